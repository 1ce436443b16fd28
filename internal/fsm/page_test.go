package fsm

import (
	"fmt"
	"testing"

	"github.com/stickyd/stickyd/internal/placement"
)

// Pages walk everyone once, in name order, through every filter.
func TestUsersPage(t *testing.T) {
	f := New()
	idx := uint64(0)
	for i := range 250 {
		idx++
		w := fmt.Sprintf("w%d", i%3)
		apply(t, f, idx, ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("c%03d", i), User: fmt.Sprintf("u%03d", i), Worker: w})
	}
	idx++
	apply(t, f, idx, RegisterAgentRequestType, AgentEntry{Name: "a", Workers: map[string]string{"w0": "blue", "w1": "blue", "w2": "green"}})

	walk := func(q UserQuery) []placement.UserInfo {
		var all []placement.UserInfo
		for pages := 0; ; pages++ {
			if pages > 300 {
				t.Fatal("the pages never end")
			}
			p := f.UsersPage(q)
			if len(p.Users) > q.Limit && q.Limit > 0 {
				t.Fatalf("page of %d with limit %d", len(p.Users), q.Limit)
			}
			all = append(all, p.Users...)
			if p.Next == "" {
				return all
			}
			q.After = p.Next
		}
	}
	all := walk(UserQuery{Limit: 7})
	if len(all) != 250 {
		t.Fatalf("%d people listed, want 250", len(all))
	}
	for i, u := range all {
		if want := fmt.Sprintf("u%03d", i); u.User != want {
			t.Fatalf("person %d is %s, want %s", i, u.User, want)
		}
	}
	if got := walk(UserQuery{Worker: "w2", Limit: 10}); len(got) != 83 {
		t.Fatalf("worker w2: %d people, want 83", len(got))
	}
	if got := walk(UserQuery{Group: "blue", Limit: 1000}); len(got) != 167 {
		t.Fatalf("group blue: %d people, want 167", len(got))
	}
	if got := walk(UserQuery{State: placement.StateParked}); len(got) != 0 {
		t.Fatalf("parked: %d people, want 0", len(got))
	}
	// Once the keys are kept in order, arrivals, departures and the
	// shards a snapshot shares keep them so.
	if _, err := f.Snapshot(); err != nil {
		t.Fatal(err)
	}
	idx++
	apply(t, f, idx, ConnectRequestType, ConnectRequest{Conn: "c-new", User: "u999", Worker: "w0"})
	idx++
	apply(t, f, idx, ForgetConnRequestType, ForgetConnRequest{Conn: "c007"})
	got := walk(UserQuery{Limit: 9})
	if len(got) != 250 || got[7].User != "u008" || got[249].User != "u999" {
		t.Fatalf("after writes: %d people, [7] %s, last %s", len(got), got[7].User, got[len(got)-1].User)
	}
	for i := 1; i < len(got); i++ {
		if got[i-1].User >= got[i].User {
			t.Fatalf("out of order: %s before %s", got[i-1].User, got[i].User)
		}
	}
	idx++
	apply(t, f, idx, ForgetConnRequestType, ForgetConnRequest{Conn: "c-new"})
	idx++
	apply(t, f, idx, ConnectRequestType, ConnectRequest{Conn: "c007", User: "u007", Worker: "w1"})

	tl := f.Tally()
	if tl.Users != 250 || tl.Conns != 250 || tl.State[placement.StateLive] != 250 || tl.Groups["blue"] != 167 || tl.Workers["w2"] != 83 {
		t.Fatalf("tally: %+v", tl)
	}
}

// UsersByWorker sorts the people of the workers asked by worker, in one
// pass; the others' people and a connection's ghost are left out.
func TestUsersByWorker(t *testing.T) {
	f := New()
	for i := range 30 {
		apply(t, f, uint64(i+1), ConnectRequestType, ConnectRequest{Conn: fmt.Sprintf("c%d", i), User: fmt.Sprintf("u%02d", i), Worker: fmt.Sprintf("w%d", i%3)})
	}
	f.mu.Lock()
	f.state.Conns.put("orphan", Conn{User: "ghost"})
	f.mu.Unlock()
	got := f.UsersByWorker(map[string]bool{"w0": true, "w2": true, "w9": true})
	if len(got) != 2 || len(got["w0"]) != 10 || len(got["w2"]) != 10 {
		t.Fatalf("people by worker: %v", got)
	}
	for w, us := range got {
		for _, u := range us {
			if h, _ := f.User(u); h.Worker != w {
				t.Fatalf("%s listed on %s, lives on %s", u, w, h.Worker)
			}
		}
	}
}
