package supervisor

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
)

// direct applies entries straight to the FSM, as a one-member log would.
type direct struct {
	mu sync.Mutex
	f  *fsm.FSM
	i  uint64
}

func (d *direct) Apply(ctx context.Context, entry []byte) (any, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.i++
	res := d.f.Apply(&raft.Log{Index: d.i, Data: entry})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

type ready []string

func (r ready) Ready() []string         { return r }
func (r ready) GroupOf(w string) string { return "g" }
func (r ready) Local() []string         { return r }

func TestPlaceSpreadsNewConnections(t *testing.T) {
	f := fsm.New()
	s := New(f, &direct{f: f}, ready{"w1", "w2", "w3"}, nil)
	for i := 0; i < 9; i++ {
		w, err := s.Place(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Connect(t.Context(), string(rune('a'+i)), "", w); err != nil {
			t.Fatal(err)
		}
	}
	for w, n := range f.UsersOn() {
		if n != 3 {
			t.Fatalf("worker %s holds %d of 9 people: %v", w, n, f.UsersOn())
		}
	}
	if _, err := New(f, &direct{f: f}, ready{}, nil).Place(t.Context()); err != ErrNoWorkers {
		t.Fatalf("place with no workers: %v", err)
	}
}

func TestLoginJoinsTheHome(t *testing.T) {
	f := fsm.New()
	s := New(f, &direct{f: f}, ready{"w1", "w2"}, nil)
	if _, err := s.Connect(t.Context(), "c1", "", "w1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Connect(t.Context(), "c2", "", "w2"); err != nil {
		t.Fatal(err)
	}
	r, prev, err := s.Login(t.Context(), "c1", "maria", nil)
	if err != nil || r.Worker != "w1" || prev != "w1" {
		t.Fatalf("first login: %+v %q %v", r, prev, err)
	}
	r, prev, err = s.Login(t.Context(), "c2", "maria", nil)
	if err != nil || r.Worker != "w1" || prev != "w2" {
		t.Fatalf("second login: %+v %q %v", r, prev, err)
	}
	if got, ok := s.Lookup("c2"); !ok || got.Worker != "w1" {
		t.Fatalf("lookup after login: %+v", got)
	}
	if _, _, err := s.Login(t.Context(), "ghost", "maria", nil); err == nil {
		t.Fatal("login on an unknown connection succeeded")
	}
	if err := s.Forget(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Lookup("c1"); ok {
		t.Fatal("forgotten connection still routes")
	}
}

// A burst of newcomers placed before any of their connections reaches the
// maps spreads over the workers (the maps alone would put everyone on the
// lightest); after a quiet moment the maps are read again.
func TestPlaceCountsTheBurst(t *testing.T) {
	f := fsm.New()
	s := New(f, &direct{f: f}, ready{"w1", "w2"}, nil)
	// w1 already holds two people.
	for _, c := range []string{"a", "b"} {
		if _, err := s.Connect(t.Context(), c, "", "w1"); err != nil {
			t.Fatal(err)
		}
	}
	placed := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			w, err := s.Place(t.Context())
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			placed[w]++
			mu.Unlock()
		})
	}
	wg.Wait()
	// 202 in all, 101 each: w1 gets two fewer of the burst.
	if placed["w1"] != 99 || placed["w2"] != 101 {
		t.Fatalf("a burst of 200 placed %v, want w1 99 and w2 101", placed)
	}
	// The maps now say w2 holds 150 and w1 the 2 (the burst went
	// elsewhere, or left): after a quiet moment they are read again.
	for i := range 150 {
		if _, err := s.Connect(t.Context(), "n"+strconv.Itoa(i), "", "w2"); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(placedQuiet + time.Second)
	if w := s.placing.pick([]string{"w1", "w2"}, f.UsersOn, 1, later); w != "w1" {
		t.Fatalf("after a quiet moment the newcomer went to %s, want w1 (2 people against 150)", w)
	}
}
