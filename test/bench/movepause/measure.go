package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

const (
	// opTimeout bounds each page op's write and its answer. It is above
	// the agent's barrier wait, so a slow move shows as a long round trip,
	// not a timeout.
	opTimeout = 90 * time.Second
	// windowLimit bounds the wait for the typist's first reply after a
	// move; past it the run fails.
	windowLimit = 2 * time.Minute
	// settleTrips is how many round trips the typist makes at the new home
	// (and its wake must be recorded in the maps) before the next move, so
	// that one move's tail (the wake being recorded, the old worker
	// evicting) does not run into the next.
	settleTrips = 20
)

// sample is one measured move.
type sample struct {
	pause  time.Duration // the typist's longest round trip overlapping the move window
	move   time.Duration // move.Result.Duration: barrier up → reassigned
	freeze time.Duration // move.Result.Freeze: the freeze request to the package in hand
	wake   time.Duration // reassigned (or sent, if later) → the new worker's first reply
	call   time.Duration // the whole Move call: precopy, barrier, freeze, reassign
	bytes  int           // the package the freeze handed over
	copied int           // the precopy sent ahead of the barrier (0: none)
	// slowAt is when the longest round trip began, from the Move call.
	slowAt time.Duration
	// lateWatch is set when the watcher saw the reassignment only after
	// the reply it released had arrived; wake is then counted as zero.
	lateWatch bool
}

// result is one size's measured moves.
type result struct {
	size     benchkit.Size
	samples  []sample
	trips    int           // the typist's round trips during the measured moves
	loadOps  int64         // the other users' round trips meanwhile
	window   time.Duration // from the first measured move to the last one's settling
	pkgBytes []int         // sorted
	copied   []int         // sorted: the precopies
	late     int           // samples with lateWatch
	cold     time.Duration // the slowest pause of the warm-up round
}

func (r *result) durations(f func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(r.samples))
	for i, s := range r.samples {
		out[i] = f(s)
	}
	slices.Sort(out)
	return out
}

// goal is the bound on the p99 pause for a state of n bytes: at
// 1 KB, 5 ms alone and 15 ms under load; at 10 MB 60 ms; at 100 MB 500 ms;
// linear between those points and on past the last (1 MB = 2^20 bytes).
func goal(n int, loaded bool) time.Duration {
	base := 5 * time.Millisecond
	if loaded {
		base = 15 * time.Millisecond
	}
	points := []struct {
		n int
		d time.Duration
	}{{1 << 10, base}, {10 << 20, 60 * time.Millisecond}, {100 << 20, 500 * time.Millisecond}}
	if n <= points[0].n {
		return base
	}
	for i := 1; i < len(points); i++ {
		a, b := points[i-1], points[i]
		if n <= b.n || i == len(points)-1 {
			return a.d + time.Duration(float64(n-a.n)/float64(b.n-a.n)*float64(b.d-a.d))
		}
	}
	return base // not reached
}

// measureSize logs a new person in, fills their page with s of state,
// starts them typing and moves them moves times (after one unmeasured
// round of the workers, each receiving the person once: the warm-up, whose
// slowest pause is reported apart
// unmeasured ones) round the workers, each time waiting for them to be
// served and settled at the new home before the next move. It closes the
// person's page at the end, freeing the state.
func measureSize(ctx context.Context, a *agent.Agent, l *load, s benchkit.Size, moves int, fail *failure, stderr io.Writer) (res result, err error) {
	res.size = s
	sup := a.Supervisor()
	user := "typist-" + strings.ToLower(s.Label)
	workers := a.Pool().Ready()
	if len(workers) < 2 {
		return res, fmt.Errorf("%d ready workers: a move needs two", len(workers))
	}

	fmt.Fprintf(stderr, "  %s: filling ... ", s.Label)
	began := time.Now()
	p, err := benchkit.OpenPage(ctx, a.Addr(), user, opTimeout)
	if err != nil {
		return res, fmt.Errorf("opening the typist's page: %w", err)
	}
	if err := p.Fill(s.Bytes); err != nil {
		p.Abort()
		return res, fmt.Errorf("filling the typist's page with %s: %w", s.Label, err)
	}
	fmt.Fprintf(stderr, "%.1fs; moving ", time.Since(began).Seconds())

	t := startTypist(p, fail)
	defer func() {
		if err != nil {
			t.kill()
			return
		}
		t.halt()
		if cerr := p.Close(); cerr != nil {
			err = fmt.Errorf("closing the typist's page: %w", cerr)
		}
	}()

	warmupMoves := len(workers)
	var load0 int64
	for i := 0; i < warmupMoves+moves; i++ {
		if i == warmupMoves {
			load0, began = l.frames.Load(), time.Now()
		}
		smp, n, err := moveOnce(ctx, sup, t, user, workers, s, fail)
		if err != nil {
			fmt.Fprintln(stderr, "error")
			return res, fmt.Errorf("move %d of %d: %w", i+1, warmupMoves+moves, err)
		}
		if i < warmupMoves {
			res.cold = max(res.cold, smp.pause)
		}
		if i >= warmupMoves {
			res.samples = append(res.samples, smp)
			res.trips += n
			res.pkgBytes = append(res.pkgBytes, smp.bytes)
			res.copied = append(res.copied, smp.copied)
			if smp.lateWatch {
				res.late++
			}
		}
		if os.Getenv("STICKYD_BENCH_SAMPLES") != "" {
			fmt.Fprintf(stderr, "\n    %s pause %s (from %s into the call) call %s move %s freeze %s wake %s", time.Now().Format("15:04:05.000"), fmtDur(smp.pause), fmtDur(smp.slowAt), fmtDur(smp.call), fmtDur(smp.move), fmtDur(smp.freeze), fmtDur(smp.wake))
		}
		fmt.Fprint(stderr, ".")
	}
	res.window = time.Since(began)
	res.loadOps = l.frames.Load() - load0
	slices.Sort(res.pkgBytes)
	slices.Sort(res.copied)
	fmt.Fprintf(stderr, " pause p50 %s, move p50 %s\n",
		fmtDur(benchkit.Percentile(res.durations(func(s sample) time.Duration { return s.pause }), 0.5)),
		fmtDur(benchkit.Percentile(res.durations(func(s sample) time.Duration { return s.move }), 0.5)))
	return res, nil
}

// moveOnce moves user from their worker to the next one in workers while
// the typist keeps typing, and measures what the typist saw. It returns
// once the typist has been served at the new home and the move has settled,
// with the number of round trips the typist made meanwhile.
func moveOnce(ctx context.Context, sup *supervisor.Supervisor, t *typist, user string, workers []string, s benchkit.Size, fail *failure) (sample, int, error) {
	u, ok := sup.User(user)
	if !ok {
		return sample{}, 0, fmt.Errorf("%q is not in the maps", user)
	}
	if u.State != placement.StateLive {
		return sample{}, 0, fmt.Errorf("%q is %s before the move, want %s", user, u.State, placement.StateLive)
	}
	from := u.Worker
	to := workers[(slices.Index(workers, from)+1)%len(workers)]

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t.reset() // what ended before t0 is not in the window
	reassigned := watchReassign(wctx, sup, user, to)
	t0 := time.Now()
	res, err := sup.Move(ctx, user, to, "bench")
	t1 := time.Now()
	if err != nil {
		return sample{}, 0, fmt.Errorf("moving %q from %s to %s: outcome %s: %w", user, from, to, res.Outcome, err)
	}
	if res.Outcome != move.Moved || res.Pages != 1 || res.Conns != 1 || res.Bytes+res.Precopied < s.Bytes {
		return sample{}, 0, fmt.Errorf("moving %q from %s to %s: result %+v, want moved with 1 connection, 1 page and at least %d bytes", user, from, to, res, s.Bytes)
	}

	// The window closes at the typist's first reply after Move returned,
	// and no sooner than its first reply from the new home: a reply the
	// old worker sent before the freeze can arrive after Move returned.
	var (
		closeAt  time.Time
		firstNew = -1
	)
	err = t.waitUntil(ctx, fail, windowLimit, "the typist's first reply from "+to, func(trips []trip) bool {
		closeAt, firstNew = time.Time{}, -1
		for i, tr := range trips {
			if firstNew < 0 && tr.worker == to {
				firstNew = i
			}
			if closeAt.IsZero() && tr.end.After(t1) {
				closeAt = tr.end
			}
		}
		return firstNew >= 0 && !closeAt.IsZero()
	})
	if err != nil {
		return sample{}, 0, err
	}
	var at time.Time
	select {
	case at = <-reassigned:
	case <-time.After(windowLimit):
		return sample{}, 0, fmt.Errorf("the maps never showed %q live on %s, yet %s answered", user, to, to)
	}

	trips := t.snapshot()
	if e := trips[firstNew].end; e.After(closeAt) {
		closeAt = e
	}
	smp := sample{move: res.Duration, freeze: res.Freeze, call: t1.Sub(t0), bytes: res.Bytes, copied: res.Precopied}
	for i, tr := range trips {
		if tr.start.Before(closeAt) && tr.end.After(t0) && tr.end.Sub(tr.start) > smp.pause {
			smp.pause, smp.slowAt = tr.end.Sub(tr.start), tr.start.Sub(t0)
		}
		if i > firstNew && tr.worker != to {
			return sample{}, 0, fmt.Errorf("after %s served %q, %s answered again", to, user, tr.worker)
		}
	}
	// The wake runs ahead of the first frame the new home gets; that
	// frame was usually sent before the move ended and held on the
	// barrier, so its wait there is the pause's business, not the wake's.
	w := trips[firstNew]
	from0 := w.start
	if at.After(from0) {
		from0 = at
	}
	// The watcher is woken by the same change as the barrier, but may be
	// scheduled later than the reply it released: count that as no wake
	// time rather than a negative one, and say so in the report.
	smp.wake = w.end.Sub(from0)
	if smp.wake < 0 {
		smp.wake, smp.lateWatch = 0, true
	}

	// Settle: the wake is recorded in the maps and the typist is served
	// a few times at the new home.
	err = t.waitUntil(ctx, fail, windowLimit, "the move to settle", func(trips []trip) bool {
		if len(trips)-firstNew < settleTrips {
			return false
		}
		u, ok := sup.User(user)
		return ok && u.Worker == to && u.State == placement.StateLive
	})
	if err != nil {
		return sample{}, 0, err
	}
	return smp, len(t.snapshot()), nil
}

// watchReassign reports when the maps first show user at to and not moving:
// the moment the barrier drops (the front's barrier waits on the same
// change). It subscribes before it returns, so a change right after is not
// missed; it gives up when ctx ends.
func watchReassign(ctx context.Context, sup *supervisor.Supervisor, user, to string) <-chan time.Time {
	out := make(chan time.Time, 1)
	changed := sup.Watch(user)
	go func() {
		for {
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
			changed = sup.Watch(user)
			if u, ok := sup.User(user); ok && u.Worker == to && u.State != placement.StateMoving {
				out <- time.Now()
				return
			}
		}
	}()
	return out
}
