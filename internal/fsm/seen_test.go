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
