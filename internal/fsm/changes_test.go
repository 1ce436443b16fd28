package fsm

import (
	"fmt"
	"io"
	"testing"

	"github.com/stickyd/stickyd/internal/placement"
)

// The maps tell a reader who changed since it last asked: everyone at
// first and after a registration, then only the people an entry touched,
// gone ones as nil; bounded, past which everyone again.
func TestTakeChanges(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) {
		idx++
		apply(t, f, idx, typ, body)
	}
	for i := range 10 {
		do(ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("c%d", i), User: fmt.Sprintf("u%d", i), Worker: "w1"})
	}
	if index, users, all := f.TakeChanges(); !all || users != nil || index != idx {
		t.Fatalf("first take: index %d, %d users, all %v; want everyone at %d", index, len(users), all, idx)
	}
	if _, users, all := f.TakeChanges(); all || len(users) != 0 {
		t.Fatalf("nothing changed, yet %d users, all %v", len(users), all)
	}
	do(MoveBeginRequestType, MoveBeginRequest{User: "u1", From: "w1", To: "w2", Epoch: 1})
	do(ForgetConnRequestType, ForgetConnRequest{Conn: "c2"})
	do(SeenUsersRequestType, SeenUsersRequest{At: 5, Users: []string{"u3"}}) // not a placement change
	index, users, all := f.TakeChanges()
	if all || index != idx || len(users) != 2 {
		t.Fatalf("take: index %d, users %v, all %v", index, users, all)
	}
	if u := users["u1"]; u == nil || u.State != placement.StateMoving || u.Epoch != 2 {
		t.Fatalf("u1: %+v", u)
	}
	if u, ok := users["u2"]; !ok || u != nil {
		t.Fatalf("u2 is gone, reported %+v (%v)", u, ok)
	}
	do(RegisterAgentRequestType, AgentEntry{Name: "a", Workers: map[string]string{"w1": "g"}})
	if _, _, all := f.TakeChanges(); !all {
		t.Fatal("a registration (hosts of workers) did not ask for everyone")
	}
	for i := range maxTrackedChanges + 1 {
		f.mu.Lock()
		f.changes.changedLocked(fmt.Sprintf("x%d", i))
		f.mu.Unlock()
	}
	if _, users, all := f.TakeChanges(); !all || users != nil || len(f.changes.users) != 0 {
		t.Fatal("past the bound the changes were kept one by one")
	}
	// A restore asks for everyone (the maps were replaced whole).
	f.TakeChanges()
	var s sink
	snap, _ := f.Snapshot()
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	if err := f.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	if _, _, all := f.TakeChanges(); !all {
		t.Fatal("a restore did not ask for everyone")
	}
}
