package fsm

import (
	"io"
	"testing"
)

func TestSeenUsersInOneEntry(t *testing.T) {
	f := New()
	apply(t, f, 1, ConnectRequestType, ConnectRequest{Conn: "a1", User: "ann", Worker: "w1"})
	apply(t, f, 2, ConnectRequestType, ConnectRequest{Conn: "b1", User: "bob", Worker: "w1"})
	if u, _ := f.User("ann"); u.Seen != 0 {
		t.Fatalf("a new person is seen at %d before any stamp", u.Seen)
	}
	out := apply(t, f, 3, SeenUsersRequestType, SeenUsersRequest{At: 1000, Users: []string{"ann", "bob", "nobody"}}).(SeenUsersResult)
	if out.Stamped != 2 {
		t.Fatalf("stamped %d, want ann and bob", out.Stamped)
	}
	// A later stamp moves on; an earlier one (a slow front's) does not
	// go back.
	apply(t, f, 4, SeenUsersRequestType, SeenUsersRequest{At: 2000, Users: []string{"ann"}})
	out = apply(t, f, 5, SeenUsersRequestType, SeenUsersRequest{At: 1500, Users: []string{"ann", "bob"}}).(SeenUsersResult)
	if out.Stamped != 1 {
		t.Fatalf("stamped %d, want bob alone", out.Stamped)
	}
	ann, _ := f.User("ann")
	bob, _ := f.User("bob")
	if ann.Seen != 2000 || bob.Seen != 1500 {
		t.Fatalf("seen: ann %d, bob %d; want 2000 and 1500", ann.Seen, bob.Seen)
	}
	if _, ok := f.User("nobody"); ok {
		t.Fatal("a stamp made a person")
	}
	// The time survives a snapshot and its restore.
	g := roundTrip(t, f)
	if u, _ := g.User("ann"); u.Seen != 2000 {
		t.Fatalf("after a restore ann is seen at %d", u.Seen)
	}
}

// roundTrip is f snapshotted and restored into a new FSM.
func roundTrip(t *testing.T, f *FSM) *FSM {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	return g
}

// A connection not seen for a while is forgotten from a person still seen
// on another, in one entry for many; the person's newest connection, the
// last one, one seen since it was chosen, and those of people not live
// stay.
func TestForgetStaleConnections(t *testing.T) {
	f := New()
	for i, c := range []ConnectRequest{
		{Conn: "a-old", User: "ann", Worker: "w1"}, {Conn: "a-older", User: "ann", Worker: "w1"}, {Conn: "a-new", User: "ann", Worker: "w1"},
		{Conn: "b-only", User: "bob", Worker: "w1"},
		{Conn: "c-old", User: "cy", Worker: "w2"}, {Conn: "c-new", User: "cy", Worker: "w2"},
		{Conn: "d-old", User: "dee", Worker: "w1"}, {Conn: "d-unstamped", User: "dee", Worker: "w1"},
	} {
		apply(t, f, uint64(1+i), ConnectRequestType, c)
	}
	apply(t, f, 20, SeenUsersRequestType, SeenUsersRequest{At: 100, Conns: []string{"a-older", "b-only", "c-old", "d-old"}})
	apply(t, f, 21, SeenUsersRequestType, SeenUsersRequest{At: 200, Conns: []string{"a-old", "nobody's"}})
	apply(t, f, 22, SeenUsersRequestType, SeenUsersRequest{At: 900, Users: []string{"ann"}, Conns: []string{"a-new", "c-new"}})

	stale, unstamped := f.StaleConns(map[string]bool{"w1": true}, 500)
	got := map[string]bool{}
	for _, fc := range stale {
		got[fc.Conn] = true
	}
	// b-only is bob's last; c-* live on w2; dee's newest stamped (d-old) is
	// hers to keep.
	if len(stale) != 2 || !got["a-old"] || !got["a-older"] {
		t.Fatalf("stale %v, want ann's a-old and a-older", stale)
	}
	if len(unstamped) != 1 || unstamped[0] != "d-unstamped" {
		t.Fatalf("unstamped %v, want d-unstamped", unstamped)
	}
	// a-old is seen again before the entry: it stays.
	apply(t, f, 23, SeenUsersRequestType, SeenUsersRequest{At: 600, Conns: []string{"a-old"}})
	out := apply(t, f, 24, ForgetConnsRequestType, ForgetConnsRequest{Before: 500, Conns: append(stale, ForgetConn{Conn: "b-only", User: "bob"})}).(ForgetConnsResult)
	if len(out.Forgotten) != 1 || out.Forgotten[0] != (ForgottenConn{Conn: "a-older", User: "ann", Worker: "w1"}) || out.Kept != 2 {
		t.Fatalf("forgot %+v (kept %d), want a-older alone", out.Forgotten, out.Kept)
	}
	if _, ok := f.Lookup("a-older"); ok {
		t.Fatal("the forgotten connection still routes")
	}
	if u, _ := f.User("ann"); u.Conns != 2 {
		t.Fatalf("ann has %d connections, want 2", u.Conns)
	}
	if _, ok := f.Lookup("b-only"); !ok {
		t.Fatal("a person's last connection was forgotten on its own")
	}
	// The times survive a snapshot and its restore; a forgotten one is gone.
	g := roundTrip(t, f)
	stamped := 0
	g.state.Conns.all(func(_ string, c Conn) bool {
		if c.Seen != 0 {
			stamped++
		}
		return true
	})
	if c, _ := g.state.Conns.get("a-old"); stamped != 6 || c.Seen != 600 {
		t.Fatalf("after a restore: %d stamped, a-old at %d", stamped, c.Seen)
	}
}
