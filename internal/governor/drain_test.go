package governor

import (
	"strings"
	"testing"
	"time"
)

func TestCompaction(t *testing.T) {
	cases := []struct {
		name   string
		policy func(*Policy)
		// mem is w-1's memory (fraction) at minute m; the others stay low.
		mem func(m float64) float64
		// drainAt is the minute the drain is decided; 0 means never in 40 min.
		drainAt float64
	}{
		{
			name:    "quiet for long enough drains the least loaded",
			mem:     func(float64) float64 { return 0.10 },
			drainAt: 10,
		},
		{
			name: "a spike restarts the clock",
			mem: func(m float64) float64 {
				if m == 6 {
					return 0.40
				}
				return 0.10
			},
			drainAt: 16.5,
		},
		{
			name:   "the group at its minimum is left alone",
			policy: func(p *Policy) { p.MinWorkers = 3 },
			mem:    func(float64) float64 { return 0.10 },
		},
		{
			name:   "compaction off",
			policy: func(p *Policy) { p.CompactBelow = 0 },
			mem:    func(float64) float64 { return 0.10 },
		},
		{
			name: "busy is not quiet",
			mem:  func(float64) float64 { return 0.35 },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			if tc.policy != nil {
				tc.policy(&p)
			}
			e := newEngine(t, p, 1)
			for now := t0; !now.After(t0.Add(40 * time.Minute)); now = now.Add(30 * time.Second) {
				m := now.Sub(t0).Minutes()
				e.Observe(reading("w-1", now, 0.05, tc.mem(m), users("a", 5, Usage{})))
				e.Observe(reading("w-2", now, 0.05, 0.05, users("b", 1, Usage{})))
				e.Observe(reading("w-3", now, 0.02, 0.10, users("c", 3, Usage{})))
				ds := e.Decide(now, 0)
				if len(ds) == 0 {
					continue
				}
				if tc.drainAt == 0 || m != tc.drainAt {
					t.Fatalf("at %.1f min: %s, want a drain at %v", m, kinds(ds), tc.drainAt)
				}
				if len(ds) != 1 || ds[0].Kind != KindDrain || ds[0].Worker != "w-2" {
					t.Fatalf("at %.1f min: %s, want a drain of w-2", m, kinds(ds))
				}
				for _, s := range []string{"web: all 3 workers under 30% of every limit for 10m0s", "the least loaded (1 user,", "3 → 2 workers (min 1)"} {
					if !strings.Contains(ds[0].Reason, s) {
						t.Errorf("reason %q lacks %q", ds[0].Reason, s)
					}
				}
				return
			}
			if tc.drainAt != 0 {
				t.Fatal("never drained")
			}
		})
	}
}

// TestCompactionNeverRetiresNonEmpty drains a worker, then shows it holding
// one thing or another: it is retired only when it holds nothing.
func TestCompactionNeverRetiresNonEmpty(t *testing.T) {
	cases := []struct {
		name   string
		last   func(Reading) Reading // w-2's reading after its drain
		retire bool
	}{
		{name: "a user stays", last: func(r Reading) Reading {
			r.Users, r.PerUser = 1, map[string]Usage{"b-0": {}}
			return r
		}},
		{name: "a page stays", last: func(r Reading) Reading { r.Pages = 1; return r }},
		{name: "a grant is held", last: func(r Reading) Reading { r.Grants = 1; return r }},
		{name: "a user named but not counted", last: func(r Reading) Reading {
			r.PerUser = map[string]Usage{"b-0": {}}
			return r
		}},
		{name: "no reading since the drain began", last: nil},
		{name: "empty", last: func(r Reading) Reading { return r }, retire: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, DefaultPolicy(), 1)
			now := t0
			observe := func(w2 func(Reading) Reading) {
				e.Observe(reading("w-1", now, 0.05, 0.10, users("a", 5, Usage{})))
				e.Observe(reading("w-3", now, 0.02, 0.10, users("c", 3, Usage{})))
				if w2 != nil {
					e.Observe(w2(reading("w-2", now, 0.05, 0.05, nil)))
				}
			}
			var drain Decision
			for ; drain.ID == 0; now = now.Add(30 * time.Second) {
				observe(func(r Reading) Reading {
					r.Users, r.Pages, r.PerUser = 1, 1, map[string]Usage{"b-0": {}}
					return r
				})
				for _, d := range e.Decide(now, 0) {
					drain = d
				}
			}
			e.Done(drain, true, now)
			retired := 0
			for range 20 {
				now = now.Add(time.Second)
				observe(tc.last)
				for _, d := range e.Decide(now, 0) {
					switch d.Kind {
					case KindRetire:
						if d.Worker != "w-2" {
							t.Fatalf("retired %s", d.Worker)
						}
						retired++
					case KindMove:
						e.Done(d, false, now) // rolled back: the user stays
						continue
					}
					e.Done(d, true, now)
				}
			}
			if want := map[bool]int{true: 1, false: 0}[tc.retire]; retired != want {
				t.Errorf("retired %d times, want %d", retired, want)
			}
		})
	}
}

// TestDrainMovesThenRetires: compaction moves the drained worker's users to
// workers with room, then retires it; a cancelled drain moves nobody.
func TestDrainMovesThenRetires(t *testing.T) {
	for _, cancel := range []bool{false, true} {
		name := map[bool]string{false: "carried out", true: "cancelled"}[cancel]
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, DefaultPolicy(), 1)
			now := t0
			w2 := users("b", 2, Usage{})
			observe := func() {
				e.Observe(reading("w-1", now, 0.05, 0.10, users("a", 5, Usage{})))
				e.Observe(reading("w-2", now, 0.05, 0.05, w2))
				e.Observe(reading("w-3", now, 0.02, 0.10, users("c", 3, Usage{})))
			}
			var drain Decision
			for ; drain.ID == 0; now = now.Add(30 * time.Second) {
				observe()
				for _, d := range e.Decide(now, 0) {
					drain = d
				}
			}
			e.Done(drain, !cancel, now)
			observe()
			ds := e.Decide(now, 0)
			if cancel {
				if len(ds) != 0 {
					t.Fatalf("cancelled drain: %s", kinds(ds))
				}
				return
			}
			if len(ds) != 2 {
				t.Fatalf("drain: %s, want 2 moves", kinds(ds))
			}
			to := map[string]bool{}
			for _, d := range ds {
				if d.Kind != KindMove || d.Worker != "w-2" || d.Cause != CauseCompact || !strings.Contains(d.Reason, "draining w-2 for compaction (2 users left): moving b-") {
					t.Fatalf("%+v, want a compaction move out of w-2", d)
				}
				to[d.To] = true
				delete(w2, d.User)
				e.Done(d, true, now)
			}
			if !to["w-1"] || !to["w-3"] {
				t.Errorf("moved to %v, want spread over w-1 and w-3", to)
			}
			now = now.Add(5 * time.Second)
			observe()
			ds = e.Decide(now, 0)
			if len(ds) != 1 || ds[0].Kind != KindRetire || ds[0].Worker != "w-2" {
				t.Fatalf("empty w-2: %s, want its retirement", kinds(ds))
			}
			e.Done(ds[0], true, now)
			if _, known := e.workers["w-2"]; known {
				t.Error("w-2 still known after its retirement")
			}
		})
	}
}

// TestDrainSaysWhomItWaitsFor: a compaction drain moves the people it can
// and, for those barred by the user cool-down, records whom it waits for
// and until when, instead of stalling silently.
func TestDrainSaysWhomItWaitsFor(t *testing.T) {
	e := newEngine(t, DefaultPolicy(), 1)
	now := t0
	w2 := users("b", 3, Usage{})
	observe := func() {
		e.Observe(reading("w-1", now, 0.05, 0.10, users("a", 5, Usage{})))
		e.Observe(reading("w-2", now, 0.05, 0.05, w2))
		e.Observe(reading("w-3", now, 0.02, 0.10, users("c", 4, Usage{})))
	}
	var drain Decision
	for ; drain.ID == 0; now = now.Add(30 * time.Second) {
		observe()
		for _, d := range e.Decide(now, 0) {
			drain = d
		}
	}
	// b-1 arrived on w-2 by a move that just completed: it is barred for
	// UserCoolDown from now.
	until := now.Add(DefaultPolicy().UserCoolDown)
	e.userFree["b-1"] = until
	e.Done(drain, true, now)
	observe()
	ds := e.Decide(now, 0)
	moved := map[string]bool{}
	for _, d := range ds {
		if d.Kind != KindMove || d.Worker != "w-2" {
			t.Fatalf("%+v, want moves out of w-2", d)
		}
		moved[d.User] = true
		e.Done(d, true, now)
	}
	if len(moved) != 2 || !moved["b-0"] || !moved["b-2"] {
		t.Fatalf("moved %v, want b-0 and b-2 (the movable ones)", moved)
	}
	var waits []Event
	for _, ev := range eventsOf(e, KindBlocked) {
		if ev.Worker == "w-2" && strings.Contains(ev.Reason, "waiting for") {
			waits = append(waits, ev)
		}
	}
	if len(waits) != 1 {
		t.Fatalf("%d waiting events about w-2, want 1: %+v", len(waits), e.Events())
	}
	for _, s := range []string{"draining w-2 for compaction", "waiting for 1 user", "b-1 until " + until.Format("15:04:05"), "user_cool_down 10m0s", "in 10m0s"} {
		if !strings.Contains(waits[0].Reason, s) {
			t.Errorf("reason %q lacks %q", waits[0].Reason, s)
		}
	}
	// Later rounds say it once, not every round; b-1 leaves when free.
	delete(w2, "b-0")
	delete(w2, "b-2")
	for now = now.Add(30 * time.Second); now.Before(until); now = now.Add(30 * time.Second) {
		observe()
		if ds := e.Decide(now, 0); len(ds) != 0 {
			t.Fatalf("at %s: %s while b-1 cools down", now.Format("15:04:05"), kinds(ds))
		}
	}
	if n := len(eventsOf(e, KindBlocked)); n != 1 {
		t.Errorf("%d blocked events, want the one", n)
	}
	observe()
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].User != "b-1" {
		t.Fatalf("after the cool-down: %s, want b-1 moved", kinds(ds))
	}
}
