package governor

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestFitGrowth(t *testing.T) {
	var s []sample
	for i := range 10 {
		s = append(s, sample{at: t0.Add(time.Duration(i) * time.Minute), bytes: 100 + 6*float64(i)})
	}
	g, ok := fitGrowth(s)
	if !ok {
		t.Fatal("no fit")
	}
	if math.Abs(g.slope-0.1) > 1e-9 || math.Abs(g.now-154) > 1e-6 || g.n != 10 || g.span != 9*time.Minute {
		t.Errorf("fit = %+v, want slope 0.1 B/s, now 154 B, 10 samples over 9m", g)
	}
	if _, ok := fitGrowth(s[:1]); ok {
		t.Error("a fit from one sample")
	}
	same := []sample{{at: t0, bytes: 1}, {at: t0, bytes: 2}}
	if _, ok := fitGrowth(same); ok {
		t.Error("a fit from samples at one instant")
	}
}

func TestReplacement(t *testing.T) {
	const mib = 1 << 20
	noise := rand.New(rand.NewPCG(7, 7))
	cases := []struct {
		name string
		// mem is w-1's memory in bytes at minute m since the start.
		mem func(m float64) float64
		// replaceBetween bounds, in minutes, when the replacement is decided;
		// zero means never within the run.
		replaceBetween [2]float64
	}{
		{
			// 500 MiB + 10 MiB/min reaches 1 GiB at 52.4 min; it is under
			// the 30 min horizon from 22.4 min on, at 724 MiB (71%), before
			// any saturation threshold.
			name:           "steady growth is replaced before the ceiling",
			mem:            func(m float64) float64 { return 500*mib + 10*mib*m },
			replaceBetween: [2]float64{22.4, 23},
		},
		{
			name: "flat memory with noise is left alone",
			mem:  func(float64) float64 { return 600*mib + (noise.Float64()-0.5)*40*mib },
		},
		{
			name: "growth that reaches the ceiling past the horizon is left alone",
			mem:  func(m float64) float64 { return 500*mib + 1*mib*m },
		},
		{
			name: "shrinking memory is left alone",
			mem:  func(m float64) float64 { return 900*mib - 2*mib*m },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, DefaultPolicy(), 1)
			per := users("u", 3, Usage{MemGrowth: mib})
			for now := t0; now.Before(t0.Add(2 * time.Hour)); now = now.Add(10 * time.Second) {
				m := now.Sub(t0).Minutes()
				r := reading("w-1", now, 0.1, 0, per)
				r.RSS = uint64(tc.mem(m))
				e.Observe(r)
				e.Observe(reading("w-2", now, 0.1, 0.5, users("v", 3, Usage{})))
				ds := ofKind(e.Decide(now, 0), KindReplace)
				if len(ds) == 0 {
					continue
				}
				if tc.replaceBetween[1] == 0 {
					t.Fatalf("replaced at %.1f min: %s", m, ds[0].Reason)
				}
				if m < tc.replaceBetween[0] || m > tc.replaceBetween[1] {
					t.Fatalf("replaced at %.1f min, want between %v: %s", m, tc.replaceBetween, ds[0].Reason)
				}
				if ds[0].Worker != "w-1" || float64(r.RSS) >= gib {
					t.Fatalf("replaced %s at %d bytes", ds[0].Worker, r.RSS)
				}
				for _, s := range []string{"w-1 memory grows 10 MiB/min", "of 1.0 GiB ceiling", "< horizon 30m0s", "move its 3 users there, retire w-1"} {
					if !strings.Contains(ds[0].Reason, s) {
						t.Errorf("reason %q lacks %q", ds[0].Reason, s)
					}
				}
				return
			}
			if tc.replaceBetween[1] != 0 {
				t.Fatal("never replaced")
			}
		})
	}
}

// TestReplacementFlow follows a replacement to its end: start, move
// everyone to the fresh worker, retire the old one.
func TestReplacementFlow(t *testing.T) {
	const mib = 1 << 20
	e := newEngine(t, DefaultPolicy(), 1)
	left := users("u", 6, Usage{MemGrowth: mib})
	now := t0
	observe := func() {
		r := reading("w-1", now, 0.1, 0, left)
		r.RSS = uint64(500*mib + 20*mib*now.Sub(t0).Minutes())
		e.Observe(r)
		e.Observe(reading("w-2", now, 0.1, 0.5, users("v", 3, Usage{})))
	}
	var replace Decision
	for ; replace.ID == 0; now = now.Add(10 * time.Second) {
		if now.After(t0.Add(time.Hour)) {
			t.Fatal("never replaced")
		}
		observe()
		for _, d := range e.Decide(now, 0) {
			if d.Kind == KindReplace {
				replace = d
			}
		}
	}
	observe()
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("before the fresh worker is started: %s", kinds(ds))
	}
	replace.To = "w-9"
	e.Done(replace, true, now)

	now = now.Add(5 * time.Second)
	observe()
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("before w-9 reports: %s", kinds(ds))
	}

	for round := 0; len(left) > 0; round++ {
		if round > 5 {
			t.Fatalf("users still on w-1 after %d rounds: %v", round, left)
		}
		now = now.Add(5 * time.Second)
		observe()
		e.Observe(reading("w-9", now, 0.01, 0.02, nil))
		ds := e.Decide(now, 0)
		if len(ds) == 0 || len(ds) > DefaultPolicy().MaxConcurrentMoves {
			t.Fatalf("round %d: %s, want 1 to 4 moves", round, kinds(ds))
		}
		for _, d := range ds {
			if d.Kind != KindMove || d.Worker != "w-1" || d.To != "w-9" || d.Cause != CauseReplace {
				t.Fatalf("round %d: %+v, want a move w-1 → w-9 for replacement", round, d)
			}
			if !strings.Contains(d.Reason, "replacing w-1 by w-9") {
				t.Errorf("reason %q", d.Reason)
			}
			delete(left, d.User)
			e.Done(d, true, now)
		}
	}

	now = now.Add(5 * time.Second)
	observe()
	ds := e.Decide(now, 0)
	if len(ds) != 1 || ds[0].Kind != KindRetire || ds[0].Worker != "w-1" {
		t.Fatalf("empty w-1: %s, want its retirement", kinds(ds))
	}
	if !strings.Contains(ds[0].Reason, "w-1 is empty (0 users, 0 pages, 0 grants") || !strings.Contains(ds[0].Reason, "after its replacement by w-9") {
		t.Errorf("reason %q", ds[0].Reason)
	}
	retiredAt := now
	e.Done(ds[0], true, retiredAt)

	// A probe answered before the retirement does not bring w-1 back.
	late := reading("w-1", retiredAt.Add(-time.Second), 0.1, 0.9, users("u", 6, Usage{MemGrowth: 1}))
	e.Observe(late)
	e.Observe(reading("w-9", retiredAt, 0.1, 0.3, users("u", 6, Usage{})))
	if ds := e.Decide(retiredAt, 0); len(ds) != 0 {
		t.Fatalf("after the retirement: %s", kinds(ds))
	}
	if n := len(eventsOf(e, KindCompleted)); n != 8 { // replace, 6 moves, retire
		t.Errorf("%d completed events, want 8", n)
	}
}
