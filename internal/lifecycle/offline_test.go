package lifecycle

import (
	"sync"
	"testing"
	"time"
)

// An offline park is taken once, by its worker, at its epoch or later; one
// the person will never wake from (an older epoch: they moved on, or woken
// from a newer package) has its package deleted, not left in the park.
func TestOfflineParksDiscardWhatNobodyWakesFrom(t *testing.T) {
	var mu sync.Mutex
	var discarded []string
	o := &OfflineParks{discard: func(d string) { mu.Lock(); discarded = append(discarded, d); mu.Unlock() }}
	o.add(offlinePark{User: "ann", Worker: "w1", Epoch: 3, Package: "pa"})
	o.add(offlinePark{User: "bob", Worker: "w1", Epoch: 3, Package: "pb"})
	o.add(offlinePark{User: "cy", Worker: "w1", Epoch: 3, Package: "pc"})
	if _, ok := o.Take("w2", "ann", 3); ok {
		t.Fatal("another worker took ann's offline park")
	}
	if d, ok := o.Take("w1", "ann", 4); !ok || d != "pa" {
		t.Fatalf("ann at a later epoch: %q %v", d, ok)
	}
	if _, ok := o.Take("w1", "ann", 4); ok {
		t.Fatal("taken twice")
	}
	if _, ok := o.Take("w1", "bob", 2); ok {
		t.Fatal("bob's package woke him at an older epoch")
	}
	o.drop("cy") // woken from a newer package
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(discarded)
		mu.Unlock()
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("discarded %v, want pb and pc", discarded)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := map[string]bool{discarded[0]: true, discarded[1]: true}; !got["pb"] || !got["pc"] {
		t.Fatalf("discarded %v, want pb and pc", discarded)
	}
	if len(o.List("w1")) != 0 {
		t.Fatalf("left: %v", o.List("w1"))
	}
}
