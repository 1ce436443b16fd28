package front

import (
	"slices"
	"testing"
)

func TestActivityTakesWhoWasSeen(t *testing.T) {
	a := NewActivity()
	a.saw("c1")
	a.saw("c1")
	a.opened("c2")
	got := a.Take()
	slices.Sort(got)
	if !slices.Equal(got, []string{"c1", "c2"}) {
		t.Fatalf("first interval: %v, want c1 and c2", got)
	}
	// c1 said nothing since; c2's WebSocket is still open.
	if got := a.Take(); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("second interval: %v, want c2 alone", got)
	}
	a.closed("c2")
	// Seen up to its close, then no more.
	if got := a.Take(); !slices.Equal(got, []string{"c2"}) {
		t.Fatalf("interval of the close: %v, want c2", got)
	}
	if got := a.Take(); len(got) != 0 {
		t.Fatalf("after the close: %v, want nobody", got)
	}
	// A nil Activity tracks nothing and does not panic.
	var none *Activity
	none.saw("c3")
	none.opened("c3")
	none.closed("c3")
}
