package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

var update = flag.Bool("update", false, "rewrite the snapshot written by this version in testdata")

// dump is everything the maps hold, in an order that compares.
func dump(t *testing.T, f *FSM) string {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	var lines []string
	f.state.Users.all(func(name string, u User) bool {
		lines = append(lines, fmt.Sprintf("user %s %+v", name, u))
		return true
	})
	f.state.Conns.all(func(name string, c Conn) bool {
		lines = append(lines, fmt.Sprintf("conn %s %+v", name, c))
		return true
	})
	slices.Sort(lines)
	rest, err := json.Marshal(f.restLocked())
	if err != nil {
		t.Fatal(err)
	}
	load, _ := json.Marshal(f.load)
	return strings.Join(lines, "\n") + "\nrest " + string(rest) + "\nload " + string(load)
}

// Every snapshot form a version wrote is read by every later one, whole:
// the JSON document of the versions before the records
// (snapshot-json.golden, written by that code), the records of format
// version 1 with connections naming their people (snapshot-v1.golden, as
// written before recConnsAt, and still while a server does not read it)
// and with connections pointing to their people's places
// (snapshot-v1-connsat.golden, rewritten only with -update, when what
// this version writes changes).
func TestReadsOlderSnapshots(t *testing.T) {
	if *update {
		var buf bytes.Buffer
		if err := goldenMaps(t).EncodeSnapshot(&buf); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join("testdata", "snapshot-v1-connsat.golden"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want := dump(t, goldenMaps(t))
	for _, name := range []string{"snapshot-json.golden", "snapshot-v1.golden", "snapshot-v1-connsat.golden"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			g, err := DecodeSnapshot(b)
			if err != nil {
				t.Fatal(err)
			}
			if got := dump(t, g); got != want {
				t.Fatalf("restored:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// A snapshot is the maps as they were when it was taken, though writes go
// on while it is written; the live maps keep those writes.
func TestSnapshotIsAPointInTime(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) any {
		idx++
		return apply(t, f, idx, typ, body)
	}
	for i := range 3000 {
		do(ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("c%d", i), User: fmt.Sprintf("u%d", i), Worker: "w1"})
	}
	before := dump(t, f)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	// Every shard written after the snapshot: moves, logins, forgets,
	// new people, stamps.
	for i := range 3000 {
		u := fmt.Sprintf("u%d", i)
		switch i % 4 {
		case 0:
			do(MoveBeginRequestType, MoveBeginRequest{User: u, From: "w1", To: "w2", Epoch: 1})
		case 1:
			do(ForgetConnRequestType, ForgetConnRequest{Conn: fmt.Sprintf("c%d", i)})
		case 2:
			do(LoginRequestType, LoginRequest{Conn: fmt.Sprintf("c%d", i), User: "x" + u, Attrs: map[string]string{"a": "b"}})
		case 3:
			do(SeenUsersRequestType, SeenUsersRequest{At: 99, Users: []string{u}, Conns: []string{fmt.Sprintf("c%d", i)}})
		}
		do(ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("n%d", i), User: fmt.Sprintf("n%d", i), Worker: "w3"})
	}
	after := dump(t, f)
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g, err := DecodeSnapshot(s.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if got := dump(t, g); got != before {
		t.Fatal("the snapshot holds writes made after it was taken")
	}
	if dump(t, f) != after || after == before {
		t.Fatal("the live maps changed by writing the snapshot")
	}
	// A second snapshot now holds the writes.
	if got := dump(t, roundTrip(t, f)); got != after {
		t.Fatal("a later snapshot does not hold the writes")
	}
}

// A snapshot cut short, damaged or from a newer version is refused whole.
func TestSnapshotRefusesDamage(t *testing.T) {
	var buf bytes.Buffer
	if err := goldenMaps(t).EncodeSnapshot(&buf); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"cut", b[:len(b)-3], "ends before"},
		{"cut at a record", b[:len(b)/2], ""},
		{"empty", nil, "head"},
		{"other head", []byte("nonsense"), "unknown head"},
		{"newer version", append([]byte("SKYM\x09"), b[5:]...), "version 9"},
		{"unknown record", append(append([]byte{}, b[:5]...), append([]byte{42, 0}, b[5:]...)...), "unknown type 42"},
		{"huge record", append(append([]byte{}, b[:5]...), 2, 0xff, 0xff, 0xff, 0xff, 0x0f), "bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeSnapshot(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}

// Until every server reads recConnsAt, a snapshot names each
// connection's person (recConns); after, it points to the person's place.
// Either restores the same maps, with a connection whose person is gone
// (a ghost) too.
func TestSnapshotConnectionRecordsFollowTheGate(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		t.Run(fmt.Sprintf("allowed=%v", allowed), func(t *testing.T) {
			f := goldenMaps(t)
			f.SetEntryGate(func(MessageType) bool { return allowed })
			f.mu.Lock()
			f.state.Conns.put("orphan", Conn{User: "nobody", Seen: 3})
			f.mu.Unlock()
			var buf bytes.Buffer
			if err := f.EncodeSnapshot(&buf); err != nil {
				t.Fatal(err)
			}
			types := recordTypes(t, buf.Bytes())
			if got, want := types[recConnsAt] > 0, allowed; got != want || (types[recConns] > 0) == allowed {
				t.Fatalf("records %v with the gate allowing=%v", types, allowed)
			}
			g, err := DecodeSnapshot(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dump(t, g), dump(t, f); got != want {
				t.Fatalf("restored:\n%s\nwant\n%s", got, want)
			}
			if c, ok := g.state.Conns.get("orphan"); !ok || c.User != "nobody" || c.Seen != 3 {
				t.Fatalf("the connection of a person not in the maps restored as %+v, %v", c, ok)
			}
			if _, ok := g.state.Users.get("nobody"); ok {
				t.Fatal("a ghost restored as a person")
			}
		})
	}
}

// recordTypes counts a snapshot's records by type.
func recordTypes(t *testing.T, b []byte) map[byte]int {
	t.Helper()
	out := map[byte]int{}
	r := bufio.NewReader(bytes.NewReader(b[len(snapshotMagic)+1:]))
	for {
		typ, err := r.ReadByte()
		if err != nil {
			return out
		}
		n, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Discard(int(n)); err != nil {
			t.Fatal(err)
		}
		out[typ]++
	}
}

var _ raft.FSMSnapshot = (*snapshot)(nil)

// goldenMaps builds maps with something of every kind a snapshot holds:
// people live, moving and parked, with attributes and seen stamps, their
// connections, an agent, table subscriptions and a maintenance window.
func goldenMaps(t *testing.T) *FSM {
	t.Helper()
	return goldenMapsWith(t, Encode)
}

// goldenMapsWith is goldenMaps, its entries built by encode.
func goldenMapsWith(t *testing.T, encode func(MessageType, any) ([]byte, error)) *FSM {
	t.Helper()
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) any {
		idx++
		b, err := encode(typ, body)
		if err != nil {
			t.Fatal(err)
		}
		return f.Apply(&raft.Log{Index: idx, Data: b})
	}
	for i := range 40 {
		w := fmt.Sprintf("w%d", i%4)
		do(ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("c%02d", i), User: fmt.Sprintf("u%02d", i%25), Worker: w})
	}
	do(ConnectRequestType, ConnectRequest{Conn: "anon", Worker: "w1"})
	do(ConnectRequestType, ConnectRequest{Conn: "late", Worker: "w2"})
	do(LoginRequestType, LoginRequest{Conn: "late", User: "maria", Attrs: map[string]string{"dept": "sales"}})
	do(MoveBeginRequestType, MoveBeginRequest{User: "u01", From: "w1", To: "w3", Epoch: 1})
	do(MoveBeginRequestType, MoveBeginRequest{User: "u02", From: "w2", To: "w0", Epoch: 1})
	do(MoveCommitRequestType, MoveCommitRequest{User: "u02", To: "w0", Epoch: 2, Package: "sha256:abc"})
	do(SeenUsersRequestType, SeenUsersRequest{At: 1700000000, Users: []string{"u03", "maria"}, Conns: []string{"c03", "c28"}})
	do(RegisterAgentRequestType, AgentEntry{Name: "a1", RPCAddr: "127.0.0.1:1", AdminAddr: "127.0.0.1:2", Workers: map[string]string{"w0": "blue", "w1": "blue", "w2": "green", "w3": "green"}})
	do(TableSubsRequestType, TableSubsRequest{Worker: "w1", Tables: []string{"orders"}})
	do(MaintenanceRequestType, MaintenanceRequest{Backend: "billing", Active: true, Window: MaintenanceEntry{Backend: "billing", Reason: "upgrade", MaxWait: 5e9}})
	return f
}
