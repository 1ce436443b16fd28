package governor

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestHysteresis: a worker starts shedding above the high mark and stops
// only under the low mark.
func TestHysteresis(t *testing.T) {
	steps := []struct {
		mem    float64
		moves  int
		reason string
	}{
		{mem: 0.80, moves: 0}, // between the marks, never over: calm
		{mem: 0.86, moves: 1, reason: "w-1 over memory 86% > 85%"},    // over: sheds
		{mem: 0.80, moves: 1, reason: "still above its low mark 75%"}, // between the marks since going over: still sheds
		{mem: 0.76, moves: 1, reason: "memory 76%"},
		{mem: 0.74, moves: 0}, // under the low mark: stops
		{mem: 0.80, moves: 0}, // back between the marks: stays calm
		{mem: 0.84, moves: 0},
	}
	e := newEngine(t, DefaultPolicy(), 1)
	now := t0
	for i, s := range steps {
		now = now.Add(time.Minute) // past every worker cool-down
		// Its people's growth shows the whole rise (TestLeaverWaitsForUsage
		// is about when it does not).
		e.Observe(reading("w-1", now, 0.1, s.mem, users("u", 20, Usage{MemGrowth: 0.1 * gib / 20})))
		e.Observe(reading("w-2", now, 0.1, 0.2, nil))
		ds := e.Decide(now, 0)
		if len(ds) != s.moves {
			t.Fatalf("step %d (memory %v): %s, want %d moves", i, s.mem, kinds(ds), s.moves)
		}
		if s.moves > 0 && !strings.Contains(ds[0].Reason, s.reason) {
			t.Errorf("step %d: reason %q lacks %q", i, ds[0].Reason, s.reason)
		}
		doneAll(e, ds, now)
	}
}

// TestNoThrashing feeds readings that oscillate around the thresholds and
// never reflect the moves (the worst case): the moves stay few, no user is
// moved twice within UserCoolDown, no worker is touched twice within
// WorkerCoolDown, and nobody goes back and forth.
func TestNoThrashing(t *testing.T) {
	const (
		tick = 5 * time.Second
		span = 30 * time.Minute
	)
	p := DefaultPolicy()
	cases := []struct {
		name string
		// mem gives w-1's and w-2's memory at tick i.
		mem func(i int) (w1, w2 float64)
		// max is the most moves allowed over span.
		max int
	}{
		{
			name: "around the high mark",
			mem: func(i int) (float64, float64) {
				return []float64{0.84, 0.86}[i%2], 0.50
			},
			max: int(span/p.WorkerCoolDown) + 1,
		},
		{
			name: "around the low mark, never over the high mark",
			mem: func(i int) (float64, float64) {
				return []float64{0.74, 0.80}[i%2], 0.50
			},
			max: 0,
		},
		{
			name: "both workers crossing both marks in antiphase",
			mem: func(i int) (float64, float64) {
				if i%2 == 0 {
					return 0.90, 0.70
				}
				return 0.70, 0.90
			},
			max: int(span/p.WorkerCoolDown) + 1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEngine(t, p, 3)
			lastUser := map[string]time.Time{}
			lastWorker := map[string]time.Time{}
			pair := map[string]string{} // user → the move before, "from→to"
			moves := 0
			i := 0
			for now := t0; now.Before(t0.Add(span)); now, i = now.Add(tick), i+1 {
				m1, m2 := tc.mem(i)
				e.Observe(reading("w-1", now, 0.1, m1, users("a", 50, Usage{MemGrowth: 1})))
				e.Observe(reading("w-2", now, 0.1, m2, users("b", 50, Usage{MemGrowth: 1})))
				for _, d := range e.Decide(now, 0) {
					if d.Kind != KindMove {
						continue // a start is never carried out here: no room comes
					}
					moves++
					if at, ok := lastUser[d.User]; ok && now.Sub(at) < p.UserCoolDown {
						t.Errorf("%s moved again after %s", d.User, now.Sub(at))
					}
					for _, w := range []string{d.Worker, d.To} {
						if at, ok := lastWorker[w]; ok && now.Sub(at) < p.WorkerCoolDown {
							t.Errorf("%s touched again after %s", w, now.Sub(at))
						}
						lastWorker[w] = now
					}
					if pair[d.User] == d.To+"→"+d.Worker {
						t.Errorf("%s went back from %s to %s", d.User, d.Worker, d.To)
					}
					lastUser[d.User], pair[d.User] = now, d.Worker+"→"+d.To
					e.Done(d, true, now)
				}
			}
			if moves > tc.max {
				t.Errorf("%d moves in %s, want at most %d", moves, span, tc.max)
			}
			t.Logf("%d moves in %s (at most %d)", moves, span, tc.max)
		})
	}
}

// TestMaxConcurrentMoves: moves on the road, the caller's and the engine's
// own, never exceed MaxConcurrentMoves.
func TestMaxConcurrentMoves(t *testing.T) {
	p := DefaultPolicy()
	p.MaxConcurrentMoves = 3
	observe := func(e *Engine, now time.Time) {
		for i := range 10 {
			e.Observe(reading(fmt.Sprintf("hot-%d", i), now, 0.1, 0.9, users(fmt.Sprintf("h%d", i), 5, Usage{MemGrowth: 1})))
			e.Observe(reading(fmt.Sprintf("idle-%d", i), now, 0.1, 0.1, nil))
		}
	}
	cases := []struct {
		inFlight int
		want     int
	}{
		{inFlight: 0, want: 3},
		{inFlight: 2, want: 1},
		{inFlight: 3, want: 0},
		{inFlight: 7, want: 0},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d in flight", tc.inFlight), func(t *testing.T) {
			e := newEngine(t, p, 1)
			observe(e, t0)
			if ds := e.Decide(t0, tc.inFlight); len(ds) != tc.want {
				t.Fatalf("%s, want %d moves", kinds(ds), tc.want)
			}
		})
	}
	t.Run("own moves not yet done count", func(t *testing.T) {
		e := newEngine(t, p, 1)
		observe(e, t0)
		first := e.Decide(t0, 0)
		if len(first) != 3 {
			t.Fatalf("%s, want 3 moves", kinds(first))
		}
		now := t0.Add(5 * time.Second)
		observe(e, now)
		if ds := e.Decide(now, 0); len(ds) != 0 {
			t.Fatalf("3 pending: %s, want none", kinds(ds))
		}
		e.Done(first[0], true, now)
		if ds := e.Decide(now, 3); len(ds) != 0 { // the caller still counts it
			t.Fatalf("caller reports 3 in flight: %s, want none", kinds(ds))
		}
		if ds := e.Decide(now, 2); len(ds) != 1 {
			t.Fatalf("one done: %s, want 1 move", kinds(ds))
		}
	})
	t.Run("draining", func(t *testing.T) {
		e := newEngine(t, p, 1)
		e.Observe(reading("w-1", t0, 0.1, 0.1, users("u", 20, Usage{})))
		e.Observe(reading("w-2", t0, 0.1, 0.1, nil))
		e.workers["w-1"].drain = &drain{cause: CauseCompact, ready: true, since: t0.Add(-time.Second)}
		if ds := e.Decide(t0, 0); len(ds) != 3 {
			t.Fatalf("%s, want 3 moves", kinds(ds))
		}
	})
}

// TestCoolDowns: a user just moved, and a worker that just gave or received
// users, are not chosen again before their cool-down ends, counted from Done.
func TestCoolDowns(t *testing.T) {
	p := DefaultPolicy()
	p.UserCoolDown = 10 * time.Minute
	p.WorkerCoolDown = 30 * time.Second
	e := newEngine(t, p, 1)
	per := map[string]Usage{"heavy": {MemGrowth: 1 << 30}, "light": {MemGrowth: 1}}
	observe := func(now time.Time) {
		e.Observe(reading("w-1", now, 0.1, 0.9, per))
		e.Observe(reading("w-2", now, 0.1, 0.1, nil))
		e.Observe(reading("w-3", now, 0.1, 0.2, nil))
	}
	observe(t0)
	ds := e.Decide(t0, 0)
	if len(ds) != 1 || ds[0].User != "heavy" || ds[0].To != "w-2" {
		t.Fatalf("%s, want heavy → w-2", kinds(ds))
	}
	first := ds[0]

	// Pending: w-1 and w-2 are busy until Done, however long it takes.
	now := t0.Add(2 * time.Minute)
	observe(now)
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("while the move runs: %s", kinds(ds))
	}
	e.Done(first, true, now)

	now = now.Add(29 * time.Second)
	observe(now)
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("within the worker cool-down: %s", kinds(ds))
	}
	now = now.Add(time.Second)
	observe(now) // the reading does not yet show heavy gone: heavy is cooling down
	ds = e.Decide(now, 0)
	if len(ds) != 1 || ds[0].User != "light" || ds[0].To != "w-2" {
		t.Fatalf("after the worker cool-down: %s, want light → w-2", kinds(ds))
	}
	e.Done(ds[0], false, now) // failed moves cool down too

	now = now.Add(time.Minute)
	observe(now)
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("both users cooling down: %s", kinds(ds))
	}
	if evs := eventsOf(e, KindBlocked); len(evs) != 1 || !strings.Contains(evs[0].Reason, "none of its 2 users can leave now") {
		t.Errorf("blocked events = %+v, want one saying nobody can leave", evs)
	}
	now = t0.Add(2*time.Minute + p.UserCoolDown)
	observe(now)
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].User != "heavy" {
		t.Fatalf("after the user cool-down: %s, want heavy to move", kinds(ds))
	}
}

// TestSettles: when readings follow the moves (each user weighs the same),
// a saturated worker sheds just enough users to get under its low mark,
// despite noise around the marks, and the pool then stays still.
func TestSettles(t *testing.T) {
	const (
		tick    = 5 * time.Second
		span    = 40 * time.Minute
		perUser = 0.009 // of the memory limit
	)
	p := DefaultPolicy()
	e := newEngine(t, p, 9)
	home := map[string]string{}
	for i := range 100 {
		home[fmt.Sprintf("a-%d", i)] = "w-1" // 90%: over the high mark
	}
	for i := range 30 {
		home[fmt.Sprintf("b-%d", i)] = "w-2" // 27%
	}
	var moves []time.Time
	i := 0
	for now := t0; now.Before(t0.Add(span)); now, i = now.Add(tick), i+1 {
		noise := []float64{-0.01, 0.01}[i%2]
		for _, w := range []string{"w-1", "w-2"} {
			per := map[string]Usage{}
			for u, h := range home {
				if h == w {
					per[u] = Usage{MemGrowth: 1}
				}
			}
			e.Observe(reading(w, now, 0.1, float64(len(per))*perUser+noise, per))
		}
		for _, d := range e.Decide(now, 0) {
			if d.Kind != KindMove {
				t.Fatalf("unexpected %s", kinds([]Decision{d}))
			}
			home[d.User] = d.To
			moves = append(moves, now)
			e.Done(d, true, now)
		}
	}
	// The shedding stops at the first reading under 75%: with the -1%
	// noise that is 84 users (74.6%), 16 moves; the +1% readings (76.6%)
	// that follow are far from the high mark and never restart it.
	if len(moves) != 16 {
		t.Errorf("%d moves, want 16", len(moves))
	}
	if last := moves[len(moves)-1]; last.After(t0.Add(span / 2)) {
		t.Errorf("still moving at %s", last.Sub(t0))
	}
}

// TestNoStartWithoutLeaver: a hot worker whose users all cool down starts
// no worker: nobody could go there yet.
func TestNoStartWithoutLeaver(t *testing.T) {
	e := newEngine(t, DefaultPolicy(), 1)
	e.userFree["u-0"] = t0.Add(time.Minute) // moved a moment ago
	e.Observe(reading("w-1", t0, 0.1, 0.9, users("u", 1, Usage{MemGrowth: 1})))
	e.Observe(reading("w-2", t0, 0.1, 0.8, nil))
	if ds := e.Decide(t0, 0); len(ds) != 0 {
		t.Fatalf("%s, want nothing", kinds(ds))
	}
	now := t0.Add(time.Minute)
	e.Observe(reading("w-1", now, 0.1, 0.9, users("u", 1, Usage{MemGrowth: 1})))
	e.Observe(reading("w-2", now, 0.1, 0.8, nil))
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("%s, want a start once u-0 may leave", kinds(ds))
	}
}
