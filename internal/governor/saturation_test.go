package governor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestSaturation(t *testing.T) {
	some := users("u", 5, Usage{CPU: 0.01, MemGrowth: 1 << 20, Goroutines: 2})
	cases := []struct {
		name     string
		policy   func(*Policy)
		readings []Reading
		// want is the decision kinds in order; to is the first decision's
		// destination, if it is a move.
		want    []Kind
		to      string
		reasons []string // substrings of the first decision's reason
		blocked string   // substring of a KindBlocked event
	}{
		{
			name: "memory over while the average load is low",
			readings: []Reading{
				reading("w-1", t0, 0.05, 0.91, some),
				reading("w-2", t0, 0.05, 0.10, users("a", 5, Usage{})),
				reading("w-3", t0, 0.05, 0.05, users("b", 5, Usage{})),
				reading("w-4", t0, 0.05, 0.10, users("c", 5, Usage{})),
			},
			want:    []Kind{KindMove},
			to:      "w-3",
			reasons: []string{"w-1 over memory 91% > 85%", "932 MiB of 1.0 GiB", "w-3 at memory 5%"},
		},
		{
			name: "cpu alone",
			readings: []Reading{
				reading("w-1", t0, 0.95, 0.10, some),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
			want:    []Kind{KindMove},
			to:      "w-2",
			reasons: []string{"w-1 over cpu 95% > 80% (0.95 cores of 1.00 cores)", "recent cpu"},
		},
		{
			name: "goroutines alone",
			readings: []Reading{
				func() Reading { r := reading("w-1", t0, 0.1, 0.1, some); r.Goroutines = 9000; return r }(),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
			want:    []Kind{KindMove},
			to:      "w-2",
			reasons: []string{"w-1 over goroutines 90% > 80% (9000 goroutines of 10000 goroutines)"},
		},
		{
			name: "mailbox depth alone",
			readings: []Reading{
				func() Reading {
					r := reading("w-1", t0, 0.1, 0.1, users("u", 5, Usage{Mailbox: 180}))
					r.MailboxDepth = 900
					return r
				}(),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
			want:    []Kind{KindMove},
			to:      "w-2",
			reasons: []string{"w-1 over mailbox 90% > 80% (900 frames of 1000 frames)"},
		},
		{
			name: "the heap stands for memory when RSS is unknown",
			readings: []Reading{
				func() Reading { r := reading("w-1", t0, 0.1, 0, some); r.Heap = 9 * gib / 10; return r }(),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
			want:    []Kind{KindMove},
			to:      "w-2",
			reasons: []string{"w-1 over memory 90% > 85%"},
		},
		{
			name: "an unwatched resource is ignored",
			policy: func(p *Policy) {
				delete(p.Thresholds, Goroutines)
			},
			readings: []Reading{
				func() Reading { r := reading("w-1", t0, 0.1, 0.1, some); r.Goroutines = 9000; return r }(),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
		},
		{
			name: "just under the high mark is left alone",
			readings: []Reading{
				reading("w-1", t0, 0.79, 0.84, some),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
		},
		{
			name: "least saturated for the resource, then overall",
			readings: []Reading{
				reading("w-1", t0, 0.10, 0.90, some),
				reading("w-2", t0, 0.50, 0.20, nil),
				reading("w-3", t0, 0.10, 0.20, nil),
				reading("w-4", t0, 0.00, 0.30, nil),
			},
			want: []Kind{KindMove},
			to:   "w-3",
		},
		{
			name: "no room: start a worker first",
			readings: []Reading{
				reading("w-1", t0, 0.10, 0.90, some),
				reading("w-2", t0, 0.10, 0.80, some),
			},
			want:    []Kind{KindStart},
			reasons: []string{"w-1 over memory 90% > 85%", "w-2 memory 80% ≥ 75%", "start a worker (2 → 3, max 8)"},
		},
		{
			name:   "no room and the group at its max",
			policy: func(p *Policy) { p.MaxWorkers = 2 },
			readings: []Reading{
				reading("w-1", t0, 0.10, 0.90, some),
				reading("w-2", t0, 0.10, 0.80, some),
			},
			blocked: "the group is at its max of 2 workers",
		},
		{
			name: "a silent worker is neither source nor destination",
			readings: []Reading{
				reading("w-1", t0.Add(-time.Minute), 0.10, 0.95, some),
				reading("w-2", t0, 0.10, 0.90, some),
				reading("w-3", t0.Add(-time.Minute), 0.10, 0.10, nil),
				reading("w-4", t0, 0.10, 0.20, nil),
			},
			want: []Kind{KindMove},
			to:   "w-4",
		},
		{
			name: "nobody named in the reading: nobody can leave",
			readings: []Reading{
				func() Reading { r := reading("w-1", t0, 0.1, 0.95, nil); r.Users = 12; return r }(),
				reading("w-2", t0, 0.10, 0.10, nil),
			},
			blocked: "none of its 12 users can leave now",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			e := newEngine(t, p, 1)
			for _, r := range tc.readings {
				e.Observe(r)
			}
			got := e.Decide(t0, 0)
			if len(got) != len(tc.want) {
				t.Fatalf("decisions = %s, want kinds %v", kinds(got), tc.want)
			}
			for i, k := range tc.want {
				if got[i].Kind != k {
					t.Fatalf("decision %d = %s, want %s", i, got[i].Kind, k)
				}
			}
			if tc.to != "" && got[0].To != tc.to {
				t.Errorf("moved to %s, want %s (%s)", got[0].To, tc.to, got[0].Reason)
			}
			for _, s := range tc.reasons {
				if !strings.Contains(got[0].Reason, s) {
					t.Errorf("reason %q lacks %q", got[0].Reason, s)
				}
			}
			if tc.blocked != "" {
				found := false
				for _, ev := range eventsOf(e, KindBlocked) {
					found = found || strings.Contains(ev.Reason, tc.blocked)
				}
				if !found {
					t.Errorf("no blocked event saying %q in %+v", tc.blocked, e.Events())
				}
			}
		})
	}
}

// TestStartThenMove: with no room a worker is started once; when it reports,
// the users go there.
func TestStartThenMove(t *testing.T) {
	e := newEngine(t, DefaultPolicy(), 1)
	now := t0
	observe := func() {
		e.Observe(reading("w-1", now, 0.1, 0.90, users("u", 4, Usage{MemGrowth: 1})))
		e.Observe(reading("w-2", now, 0.1, 0.80, users("v", 4, Usage{MemGrowth: 1})))
	}
	observe()
	ds := e.Decide(now, 0)
	if len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("decisions = %s, want one start", kinds(ds))
	}
	for range 3 { // the start is pending: no second start
		now = now.Add(5 * time.Second)
		observe()
		if more := e.Decide(now, 0); len(more) != 0 {
			t.Fatalf("while starting: decisions = %s, want none", kinds(more))
		}
	}
	start := ds[0]
	start.To = "w-3"
	e.Done(start, true, now)
	now = now.Add(5 * time.Second)
	observe()
	if more := e.Decide(now, 0); len(more) != 0 { // started, not yet reporting
		t.Fatalf("before w-3 reports: decisions = %s, want none", kinds(more))
	}
	e.Observe(reading("w-3", now, 0, 0.02, nil))
	ds = e.Decide(now, 0)
	if len(ds) != 1 || ds[0].Kind != KindMove || ds[0].Worker != "w-1" || ds[0].To != "w-3" {
		t.Fatalf("decisions = %s, want w-1 → w-3", kinds(ds))
	}
}

// TestLeaverFollowsConsumption draws the leaver many times with a fixed
// seed, from one engine whose cool-downs are let to expire between draws
// (the readings never show anyone leave): each user's frequency matches
// their share of the consumption.
func TestLeaverFollowsConsumption(t *testing.T) {
	cases := []struct {
		name string
		res  Resource
		per  map[string]Usage
		want map[string]float64
	}{
		{
			name: "memory growth",
			res:  Memory,
			per: map[string]Usage{
				"u-1": {MemGrowth: 10 << 20}, "u-2": {MemGrowth: 20 << 20},
				"u-3": {MemGrowth: 30 << 20}, "u-4": {MemGrowth: 40 << 20},
				"u-5": {MemGrowth: -5 << 20}, // shrank: weight 0
			},
			want: map[string]float64{"u-1": 0.1, "u-2": 0.2, "u-3": 0.3, "u-4": 0.4},
		},
		{
			name: "cpu",
			res:  CPU,
			per: map[string]Usage{
				"u-1": {CPU: 0.05}, "u-2": {CPU: 0.05}, "u-3": {CPU: 0.70}, "u-4": {CPU: 0.20},
			},
			want: map[string]float64{"u-1": 0.05, "u-2": 0.05, "u-3": 0.70, "u-4": 0.20},
		},
		{
			name: "nobody consumed: uniform",
			res:  Memory,
			per:  users("u", 4, Usage{}),
			want: map[string]float64{"u-0": 0.25, "u-1": 0.25, "u-2": 0.25, "u-3": 0.25},
		},
	}
	const draws = 10000
	const tolerance = 0.02 // 4 standard deviations at p = 0.5
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, err := New(nil, rand.New(rand.NewPCG(42, 42)))
			if err != nil {
				t.Fatal(err)
			}
			counts := make(map[string]int)
			now := t0
			waits := 0
			for len(counts) == 0 || sum(counts) < draws {
				hot := reading("w-1", now, 0.1, 0.1, tc.per)
				if tc.res == Memory {
					hot.RSS = 9 * gib / 10
				} else {
					hot.CPU = 0.9
				}
				e.Observe(hot)
				e.Observe(reading("w-2", now, 0.1, 0.1, nil))
				ds := e.Decide(now, 0)
				if len(ds) == 0 && len(counts) == 0 && waits < DefaultPolicy().UsageWait {
					// Nobody shows any consumption: the engine waits
					// UsageWait readings before its first draw.
					waits++
					now = now.Add(time.Second)
					continue
				}
				if len(ds) != 1 || ds[0].Kind != KindMove {
					t.Fatalf("decisions = %s after %d waits, want one move", kinds(ds), waits)
				}
				counts[ds[0].User]++
				e.Done(ds[0], true, now)
				now = now.Add(DefaultPolicy().UserCoolDown) // every cool-down over
			}
			for u, n := range counts {
				if _, ok := tc.want[u]; !ok {
					t.Errorf("%s drawn %d times, want never", u, n)
				}
			}
			for u, w := range tc.want {
				if f := float64(counts[u]) / draws; math.Abs(f-w) > tolerance {
					t.Errorf("%s drawn %.3f of the time, want %.3f ± %.3f", u, f, w, tolerance)
				}
			}
		})
	}
}

// TestReasonNumbers: a move's reason carries the level, the mark, the
// leaver's share and the destination's level.
func TestReasonNumbers(t *testing.T) {
	per := map[string]Usage{"u-17": {MemGrowth: 38 << 20}, "u-4": {MemGrowth: 62 << 20}}
	shares := map[string]int{"u-17": 38, "u-4": 62}
	for seed := range uint64(6) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			e := newEngine(t, DefaultPolicy(), seed)
			e.Observe(reading("w-3", t0, 0.1, 0.91, per))
			e.Observe(reading("w-5", t0, 0.1, 0.40, nil))
			ds := e.Decide(t0, 0)
			if len(ds) != 1 {
				t.Fatalf("decisions = %s", kinds(ds))
			}
			d := ds[0]
			want := fmt.Sprintf("w-3 over memory 91%% > 85%% (932 MiB of 1.0 GiB): moving %s to w-5 (used %d%% of w-3's recent memory growth; w-5 at memory 40%%)", d.User, shares[d.User])
			if d.Reason != want {
				t.Errorf("reason\n got %q\nwant %q", d.Reason, want)
			}
			if d.Cause != CauseSaturation {
				t.Errorf("cause = %q, want %q", d.Cause, CauseSaturation)
			}
			evs := e.Events()
			if len(evs) != 1 || evs[0].Reason != d.Reason || evs[0].User != d.User || evs[0].Worker != "w-3" || !evs[0].At.Equal(t0) {
				t.Errorf("events = %+v, want the decision", evs)
			}
		})
	}
}

// sum adds the counts up.
func sum(counts map[string]int) int {
	n := 0
	for _, c := range counts {
		n += c
	}
	return n
}
