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
