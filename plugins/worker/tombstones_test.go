package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
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
	var rebuilt bool
	if got := shrunk(m, &high, &rebuilt); len(got) != 4096 || high != 4096 || rebuilt {
		t.Fatalf("growing: len %d, high %d, rebuilt %v", len(got), high, rebuilt)
	}
	for i := 100; i < 4096; i++ {
		delete(m, strconv.Itoa(i))
	}
	got := shrunk(m, &high, &rebuilt)
	got["marker"] = -1
	if _, same := m["marker"]; same || !rebuilt {
		t.Fatalf("the emptied map was not rebuilt (rebuilt %v)", rebuilt)
	}
	if len(got) != 101 || got["99"] != 99 || high != 100 {
		t.Fatalf("rebuilt: len %d, got[99] %d, high %d", len(got), got["99"], high)
	}
	// Small maps are left as they are.
	small, h := map[string]int{"a": 1}, 0
	small["b"] = 2
	delete(small, "b")
	rebuilt = false
	if shrunk(small, &h, &rebuilt)["a"] != 1 || rebuilt {
		t.Fatal("a small map changed")
	}
}

// A map that grew and emptied between two probes (people who came and
// went within one probe.interval) is rebuilt at the next: its high-water
// mark is raised as it grows, not only when a probe looks.
func TestMapsEmptiedBetweenProbesAreRebuilt(t *testing.T) {
	rt := &runtime{users: map[string]*user{}, conns: map[string]*Session{}, byUser: map[string]map[*Session]struct{}{},
		epochs: map[string]uint64{}, frozen: map[string]bool{}, yields: map[string]*yielding{}}
	rt.tidyLocked(time.Now()) // a probe, with nobody here
	for i := range 4096 {
		rt.userLocked("u" + strconv.Itoa(i))
	}
	before := rt.users
	for i := range 4096 {
		delete(rt.users, "u"+strconv.Itoa(i))
	}
	if !rt.tidyLocked(time.Now()) {
		t.Fatal("a probe that rebuilt a map did not ask for the memory to be given back")
	}
	rt.users["marker"] = nil
	if _, same := before["marker"]; same {
		t.Fatal("the users map that grew to 4,096 and emptied between probes was kept with its buckets")
	}
}

// A person parked where they live whose next frame comes before the
// eviction (the wake at the freeze's own epoch finds them still here,
// frozen) wakes from the package as if the eviction had come first, and
// the late eviction drops nobody.
func TestWakeBeforeTheEvictionOfAParkHere(t *testing.T) {
	h := startWorker(t)
	conn := h.get("", "", "/").Identity.Conn
	u := "~" + conn
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Epoch: 1, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Epoch: 1, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	fz, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: u, Epoch: 2}}})
	if err != nil {
		t.Fatal(err)
	}
	// The wake, with the package, before the eviction.
	if _, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: u, Epoch: 2, Package: fz.GetFrozen().Package}}}); err != nil {
		t.Fatalf("a wake at the freeze's epoch before the eviction: %v", err)
	}
	if err := h.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: u}}}); err != nil {
		t.Fatal(err)
	}
	r, err := h.frame(&protocol.Frame{User: u, Conn: conn, Epoch: 2, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`{}`)}}})
	if err != nil {
		t.Fatalf("the person's next message after the late eviction: %v", err)
	}
	if got := string(r.GetMessage().GetData()); got != "2" {
		t.Fatalf("the count after the wake: %q, want 2", got)
	}
}
