package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

func apply(t *testing.T, f *FSM, idx uint64, typ MessageType, body any) any {
	t.Helper()
	b, err := Encode(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	return f.Apply(&raft.Log{Index: idx, Data: b})
}

func TestConnectLoginForget(t *testing.T) {
	f := New()
	r := apply(t, f, 1, ConnectRequestType, ConnectRequest{Conn: "c1", Worker: "w1"}).(Route)
	if r.User != "~c1" || r.Worker != "w1" || r.Epoch != 1 {
		t.Fatalf("anonymous connect: %+v", r)
	}
	apply(t, f, 2, ConnectRequestType, ConnectRequest{Conn: "c2", Worker: "w2"})

	// First login: the connection's worker becomes maria's home.
	lr := apply(t, f, 3, LoginRequestType, LoginRequest{Conn: "c1", User: "maria"}).(LoginResult)
	if lr.Route.Worker != "w1" || lr.Route.User != "maria" || lr.Previous != "w1" {
		t.Fatalf("first login: %+v", lr)
	}
	// Second connection of maria joins her home, wherever it started.
	lr = apply(t, f, 4, LoginRequestType, LoginRequest{Conn: "c2", User: "maria"}).(LoginResult)
	if lr.Route.Worker != "w1" || lr.Previous != "w2" {
		t.Fatalf("second login: %+v", lr)
	}
	if _, users := f.Counts(); users != 1 {
		t.Fatalf("anonymous users not dropped after login: %d users", users)
	}
	// A new connection that logs in during its first request.
	r = apply(t, f, 5, ConnectRequestType, ConnectRequest{Conn: "c3", User: "maria", Worker: "w3"}).(Route)
	if r.Worker != "w1" {
		t.Fatalf("connect as known user: %+v", r)
	}
	if got := f.UsersOn(); got["w1"] != 1 || len(got) != 1 {
		t.Fatalf("users on: %v", got)
	}
	for i, c := range []string{"c1", "c2", "c3"} {
		apply(t, f, uint64(6+i), ForgetConnRequestType, ForgetConnRequest{Conn: c})
	}
	if conns, users := f.Counts(); conns != 0 || users != 0 {
		t.Fatalf("after forgetting everything: %d conns %d users", conns, users)
	}
	if f.Index() != 8 {
		t.Fatalf("index %d", f.Index())
	}
}

func TestBadEntriesAreErrorsNotPanics(t *testing.T) {
	f := New()
	for _, data := range [][]byte{nil, {99}, {byte(ConnectRequestType), '{'}, {byte(LoginRequestType), '{', '}'}} {
		if _, ok := f.Apply(&raft.Log{Index: 1, Data: data}).(error); !ok {
			t.Fatalf("entry %q applied without error", data)
		}
	}
}

type sink struct {
	bytes.Buffer
	cancelled bool
}

func (s *sink) ID() string    { return "test" }
func (s *sink) Cancel() error { s.cancelled = true; return nil }
func (s *sink) Close() error  { return nil }

func TestSnapshotRestore(t *testing.T) {
	f := New()
	apply(t, f, 1, ConnectRequestType, ConnectRequest{Conn: "c1", Worker: "w1"})
	apply(t, f, 2, LoginRequestType, LoginRequest{Conn: "c1", User: "maria"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Writes after the snapshot do not leak into it.
	apply(t, f, 3, ConnectRequestType, ConnectRequest{Conn: "c2", Worker: "w2"})
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	if r, ok := g.Lookup("c1"); !ok || r.User != "maria" || r.Worker != "w1" {
		t.Fatalf("restored c1: %+v %v", r, ok)
	}
	if _, ok := g.Lookup("c2"); ok {
		t.Fatal("snapshot holds a write made after it")
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte("not json")))); err == nil {
		t.Fatal("restoring garbage succeeded")
	}
}

// A connection name already bound is refused to anyone but a retry of the
// same write: a newcomer named after it does not take its person.
func TestConnectRefusesATakenName(t *testing.T) {
	f := New()
	apply(t, f, 1, ConnectRequestType, ConnectRequest{Conn: "c1", Worker: "w1"})
	apply(t, f, 2, LoginRequestType, LoginRequest{Conn: "c1", User: "alice"})
	apply(t, f, 3, ConnectRequestType, ConnectRequest{Conn: "c2", Worker: "w2"})
	for i, req := range []ConnectRequest{
		{Conn: "c1", Worker: "w1"},
		{Conn: "c1", Worker: "w2"},
		{Conn: "c2", Worker: "w1"}, // anonymous, on another worker
		{Conn: "c2", User: "bob", Worker: "w2"},
	} {
		res := f.Apply(&raft.Log{Index: uint64(10 + i), Data: mustEncode(t, ConnectRequestType, req)})
		if err, _ := res.(error); !errors.Is(err, ErrConnTaken) {
			t.Errorf("%+v: %v, want ErrConnTaken", req, res)
		}
	}
	if r, _ := f.Lookup("c1"); r.User != "alice" {
		t.Fatalf("c1 is now %+v", r)
	}
	// The same write again is answered as the first time.
	if r := apply(t, f, 20, ConnectRequestType, ConnectRequest{Conn: "c2", Worker: "w2"}).(Route); r.Worker != "w2" {
		t.Fatalf("retry: %+v", r)
	}
	if n, _ := f.Counts(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func mustEncode(t *testing.T, typ MessageType, body any) []byte {
	t.Helper()
	b, err := Encode(typ, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
