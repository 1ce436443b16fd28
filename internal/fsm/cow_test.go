package fsm

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestShardMapAgainstAMap drives a shardMap and a Go map with the same
// random writes, freezing now and then: the live map, every frozen one and
// the sorted keys must say what the Go map said at their moment.
func TestShardMapAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newShardMap[int]()
	want := map[string]int{}
	type frozen struct {
		f    *frozenMap[int]
		want map[string]int
	}
	var snaps []frozen
	refs := map[string]ref{}
	// About 120 a shard at most: each index grows from 8 slots to 256.
	const keys = 50_000
	for step := range 300_000 {
		// Few names, so that adds, replaces and removes all happen, and
		// many at once early on so that indexes grow.
		k := fmt.Sprintf("k%d", rng.IntN(keys))
		switch op := rng.IntN(10); {
		case op < 6:
			r := s.put(k, step)
			if old, ok := refs[k]; ok && old != r {
				t.Fatalf("step %d: %q moved from ref %x to %x", step, k, old, r)
			}
			refs[k] = r
			want[k] = step
		case op < 9:
			s.del(k)
			delete(want, k)
			delete(refs, k)
		default:
			v, ok := s.get(k)
			if w, wok := want[k]; v != w || ok != wok {
				t.Fatalf("step %d: get(%q) = %d, %v; want %d, %v", step, k, v, ok, w, wok)
			}
		}
		if step%30_000 == 0 {
			snaps = append(snaps, frozen{s.freeze(), maps.Clone(want)})
		}
		if step == 150_000 {
			checkSorted(t, s, want)
		}
	}
	if s.len() != len(want) {
		t.Fatalf("len %d, want %d", s.len(), len(want))
	}
	got := map[string]int{}
	s.all(func(k string, v int) bool { got[k] = v; return true })
	if !maps.Equal(got, want) {
		t.Fatalf("all() differs from the map: %d entries, want %d", len(got), len(want))
	}
	for k, r := range refs {
		if name, v := s.at(r); name != k || v != want[k] {
			t.Fatalf("ref of %q reads %q=%d", k, name, v)
		}
	}
	for i, sn := range snaps {
		got := map[string]int{}
		sn.f.all(func(k string, v int) bool { got[k] = v; return true })
		if !maps.Equal(got, sn.want) || sn.f.n != len(sn.want) {
			t.Fatalf("snapshot %d changed after it was taken: %d entries, want %d", i, len(got), len(sn.want))
		}
	}
	checkSorted(t, s, want)
}

func checkSorted(t *testing.T, s *shardMap[int], want map[string]int) {
	t.Helper()
	var got []string
	s.sorted(func(shards []*shard[int]) {
		for _, sh := range shards {
			var keys []string
			for _, slot := range sh.keys {
				keys = append(keys, sh.ents[slot].key)
			}
			if !slices.IsSorted(keys) {
				t.Fatalf("a shard's keys are out of order")
			}
			got = append(got, keys...)
		}
	})
	slices.Sort(got)
	if !slices.Equal(got, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("sorted keys: %d, want %d", len(got), len(want))
	}
}

// TestConnectionsKeepTheirPersonsName: a connection points to its person
// by a ref; the name it reads stays right when the person leaves before
// it, comes back, and when others take the freed slots.
func TestConnectionsKeepTheirPersonsName(t *testing.T) {
	users := newUserMap()
	conns := newConnMap(users)
	users.put("ann", User{Worker: "w1"})
	conns.put("c1", Conn{User: "ann", Seen: 5})
	conns.put("c2", Conn{User: "bob"}) // no such person: a ghost holds the name
	if users.len() != 1 {
		t.Fatalf("people: %d, want 1 (a ghost is no person)", users.len())
	}
	if _, ok := users.get("bob"); ok {
		t.Fatal("a ghost was read as a person")
	}
	users.del("ann")
	for i := range 100 {
		users.put(fmt.Sprintf("p%d", i), User{Worker: "w2"})
	}
	for name, want := range map[string]string{"c1": "ann", "c2": "bob"} {
		if c, ok := conns.get(name); !ok || c.User != want {
			t.Fatalf("%s reads %+v, want person %q", name, c, want)
		}
	}
	frozenU := users.freeze()
	frozenC := conns.freeze(frozenU)
	users.put("ann", User{Worker: "w3"})
	if h, ok := users.get("ann"); !ok || h.Worker != "w3" || users.len() != 101 {
		t.Fatalf("ann back: %+v %v, %d people", h, ok, users.len())
	}
	conns.put("c1", Conn{User: "bob", Seen: 7}) // a login moves c1 to bob
	conns.del("c2")
	got := map[string]string{}
	frozenC.all(func(k string, c Conn) bool { got[k] = c.User; return true })
	if got["c1"] != "ann" || got["c2"] != "bob" {
		t.Fatalf("the snapshot's connections changed: %v", got)
	}
	if c, _ := conns.get("c1"); c.User != "bob" || c.Seen != 7 {
		t.Fatalf("c1 reads %+v", c)
	}
	conns.del("c1")
	if _, _, ok := users.m.lookup("bob"); ok {
		t.Fatal("the ghost of bob stayed after the last connection to it left")
	}
	if r, ok := users.m.get("ann"); !ok || r.refs != 0 {
		t.Fatalf("ann's record after her connection left: %+v", r)
	}
}
