package worker

import (
	"strconv"
	"testing"
	"time"
)

// An evicted person's fence stays tombstoneTTL, then goes; a forgotten
// person's goes at once; a person who came back keeps theirs.
func TestFencesOfPeopleWhoLeftExpire(t *testing.T) {
	rt := &runtime{users: map[string]*user{}, conns: map[string]*Session{}, byUser: map[string]map[*Session]struct{}{},
		epochs: map[string]uint64{}, frozen: map[string]bool{}, yields: map[string]*yielding{}}
	for _, u := range []string{"ann", "bob", "cy"} {
		rt.epochs[u], rt.frozen[u] = 3, true
	}
	rt.leftLocked("ann", false)
	rt.leftLocked("bob", true) // forgotten
	rt.leftLocked("cy", false)
	if _, ok := rt.epochs["bob"]; ok {
		t.Fatal("a forgotten person's fence was kept")
	}
	if rt.epochs["ann"] != 3 || !rt.frozen["ann"] {
		t.Fatal("an evicted person's fence went at once")
	}
	// Cy comes back before the fence goes.
	rt.byUser["cy"] = map[*Session]struct{}{{}: {}}
	now := time.Now()
	rt.tidyLocked(now)
	if rt.epochs["ann"] != 3 {
		t.Fatal("the fence went before its time")
	}
	rt.tidyLocked(now.Add(tombstoneTTL))
	if _, ok := rt.epochs["ann"]; ok || rt.frozen["ann"] {
		t.Fatal("the fence is still there past tombstoneTTL")
	}
	if rt.epochs["cy"] != 3 {
		t.Fatal("the fence of a person who came back went")
	}
	if len(rt.evicted) != 0 {
		t.Fatalf("tombstones left: %v", rt.evicted)
	}
}

// A map that grew past shrinkFloor and fell to a quarter is rebuilt, with
// everything still in it.
func TestShrunkRebuildsEmptiedMaps(t *testing.T) {
	m := map[string]int{}
	high := 0
	for i := range 4096 {
		m[strconv.Itoa(i)] = i
	}
	if got := shrunk(m, &high); len(got) != 4096 || high != 4096 {
		t.Fatalf("growing: len %d, high %d", len(got), high)
	}
	for i := 100; i < 4096; i++ {
		delete(m, strconv.Itoa(i))
	}
	got := shrunk(m, &high)
	got["marker"] = -1
	if _, same := m["marker"]; same {
		t.Fatal("the emptied map was not rebuilt")
	}
	if len(got) != 101 || got["99"] != 99 || high != 100 {
		t.Fatalf("rebuilt: len %d, got[99] %d, high %d", len(got), got["99"], high)
	}
	// Small maps are left as they are.
	small, h := map[string]int{"a": 1}, 0
	small["b"] = 2
	delete(small, "b")
	if shrunk(small, &h)["a"] != 1 {
		t.Fatal("a small map changed")
	}
}
