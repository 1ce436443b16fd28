package agent

import (
	"slices"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/placement"
)

// A stop parks the people who matter first: live before parked, logged in
// before anonymous, the most recently active first; never by name.
func TestStopOrder(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).Unix() }
	people := []placement.UserInfo{
		{User: "aaron", State: placement.StateParked, Seen: ago(time.Second)},
		{User: "~visitor", State: placement.StateLive, Seen: ago(time.Second)},
		{User: "bea", State: placement.StateLive, Seen: ago(time.Hour)},
		{User: "zoe", State: placement.StateLive, Seen: ago(time.Minute)},
		{User: "cy", State: placement.StateLive},
	}
	a := &Agent{}
	got := a.stopOrder(people)
	want := []string{"zoe", "bea", "cy", "~visitor", "aaron"}
	if !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
	// The probes' last frame counts when newer than the maps' time.
	a.idle = newIdleParker(a, time.Minute)
	a.idle.seen["bea"] = idleMark{since: now}
	got = a.stopOrder(people)
	want = []string{"bea", "zoe", "cy", "~visitor", "aaron"}
	if !slices.Equal(got, want) {
		t.Fatalf("with bea's frame just seen: %v, want %v", got, want)
	}
}

func TestIdleParkOfAGroup(t *testing.T) {
	p := newIdleParker(&Agent{}, 15*time.Minute)
	p.groups = map[string]time.Duration{"batch": 0, "fast": 2 * time.Second}
	if p.idleOf("web") != 15*time.Minute || p.idleOf("batch") != 0 || p.idleOf("fast") != 2*time.Second {
		t.Fatalf("idle of web %v, batch %v, fast %v", p.idleOf("web"), p.idleOf("batch"), p.idleOf("fast"))
	}
	if p.every() != 500*time.Millisecond {
		t.Fatalf("looks every %v, want a quarter of the shortest (500ms)", p.every())
	}
}

func TestKeepOrder(t *testing.T) {
	some := []string{"zed", "amy", "kim"}
	keepOrder(some, []string{"kim", "bob", "zed", "amy"})
	if want := []string{"kim", "zed", "amy"}; !slices.Equal(some, want) {
		t.Fatalf("kept %v, want %v", some, want)
	}
}
