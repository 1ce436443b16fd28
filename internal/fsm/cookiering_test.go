package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

func key(b byte) []byte { return bytes.Repeat([]byte{b}, MinCookieKeyBytes) }

// The first ring is installed over no ring; a later one only over the ring
// its writer read, so two servers seeding at once install one ring. The
// ring survives a snapshot, with the tear-down mark and the jobs.
func TestCookieRing(t *testing.T) {
	f := New()
	if f.CookieRing() != nil {
		t.Fatal("a new FSM holds a ring")
	}
	changed := f.WatchCookieRing()
	if err := apply(t, f, 1, CookieRingRequestType, CookieRingRequest{Keys: [][]byte{key(1)}, Source: RingGenerated}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	default:
		t.Fatal("the watch was not told of the new ring")
	}
	// A second seed, written on the same empty view, is refused.
	if err := apply(t, f, 2, CookieRingRequestType, CookieRingRequest{Keys: [][]byte{key(2)}}); !errors.Is(err.(error), ErrRingChanged) {
		t.Fatalf("a second seed: %v", err)
	}
	r := f.CookieRing()
	if len(r.Keys) != 1 || !bytes.Equal(r.Keys[0], key(1)) || r.Index != 1 || r.Source != RingGenerated {
		t.Fatalf("ring %+v", r)
	}
	r.Keys[0][0] = 9 // a copy
	// A rotation over the ring read.
	rot := CookieRingRequest{Keys: [][]byte{key(3), key(1)}, Expect: RingID([][]byte{key(1)}), Source: RingGenerated}
	if err := apply(t, f, 3, CookieRingRequestType, rot); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []CookieRingRequest{
		{Expect: RingID(rot.Keys)},
		{Keys: [][]byte{key(4)[:31]}, Expect: RingID(rot.Keys)},
		{Keys: [][]byte{key(4), key(4)}, Expect: RingID(rot.Keys)},
		{Keys: [][]byte{key(1), key(2), key(3), key(4), key(5), key(6), key(7), key(8), key(9)}, Expect: RingID(rot.Keys)},
	} {
		if _, ok := apply(t, f, 4, CookieRingRequestType, bad).(error); !ok {
			t.Fatalf("ring %d keys installed", len(bad.Keys))
		}
	}
	apply(t, f, 5, TeardownRequestType, TeardownRequest{Since: time.Unix(1_800_000_000, 0)})
	apply(t, f, 6, JobRequestType, JobRecord{ID: "j1", Kind: "drain", Agent: "s1"})
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Bytes(), key(3)) {
		t.Fatal("the snapshot holds a key in clear rather than encoded") // JSON: base64
	}
	g := New()
	if err := g.Restore(io.NopCloser(&s.Buffer)); err != nil {
		t.Fatal(err)
	}
	if got := g.CookieRing(); got == nil || RingID(got.Keys) != RingID(rot.Keys) {
		t.Fatalf("restored ring %+v", got)
	}
	if _, torn := g.TornDown(); !torn {
		t.Fatal("the tear-down mark was lost in the snapshot")
	}
	if jobs := g.Jobs(); len(jobs) != 1 {
		t.Fatalf("restored jobs: %+v", jobs)
	}
}

func TestKeyIDsSayNothingOfTheKey(t *testing.T) {
	id := KeyID(key(1))
	if len(id) != 16 || id == KeyID(key(2)) || bytes.Contains([]byte(id), key(1)[:4]) {
		t.Fatalf("key id %q", id)
	}
	if RingID(nil) != "" || RingID([][]byte{key(1), key(2)}) != id+","+KeyID(key(2)) {
		t.Fatal("ring ids")
	}
}
