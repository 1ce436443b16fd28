package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// ackEvery is how many incs a typist sends between two pulls that
// acknowledge its deltas, as client.js keeps doing. Well below the worker's
// fold limit (4096 pending deltas, plugins/worker/collector.go), so a
// typist's page is never folded into a RESET and the package a move carries
// holds at most this many small pending deltas.
const ackEvery = 256

// failure is the run's first error. Any goroutine may report one; the
// measuring goroutine checks it or waits on done. Reporting is idempotent.
type failure struct {
	once sync.Once
	err  error // set once, before done is closed
	done chan struct{}
}

func newFailure() *failure { return &failure{done: make(chan struct{})} }

// set records err unless an error was recorded already.
func (f *failure) set(err error) {
	f.once.Do(func() {
		f.err = err
		close(f.done)
	})
}

// check returns the recorded error, if any.
func (f *failure) check() error {
	select {
	case <-f.done:
		return f.err
	default:
		return nil
	}
}

// trip is one inc round trip: when its op was written, when the answer was
// read, and which worker answered.
type trip struct {
	start, end time.Time
	worker     string
}

// typists are the active people's pages, each sending inc closed loop from
// its own goroutine (and a pull every ackEvery incs, not recorded), every
// inc's round trip recorded. A failed op fails the run.
type typists struct {
	pages []*benchkit.Page
	stop  atomic.Bool
	wg    sync.WaitGroup

	mu    sync.Mutex // guards trips
	trips [][]trip   // per page, in order: one op is in flight at a time
}

func startTypists(pages []*benchkit.Page, fail *failure) *typists {
	t := &typists{pages: pages, trips: make([][]trip, len(pages))}
	for i := range pages {
		t.wg.Add(1)
		go t.run(i, fail)
	}
	return t
}

func (t *typists) run(i int, fail *failure) {
	defer t.wg.Done()
	p := t.pages[i]
	for n := 1; !t.stop.Load(); n++ {
		if n%(ackEvery+1) == 0 {
			if _, err := p.Ack(); err != nil {
				if !t.stop.Load() {
					fail.set(fmt.Errorf("typist %s: %w", userName(i), err))
				}
				return
			}
			continue
		}
		start := time.Now()
		w, err := p.Inc()
		end := time.Now()
		if err != nil {
			if !t.stop.Load() {
				fail.set(fmt.Errorf("typist %s: %w", userName(i), err))
			}
			return
		}
		t.mu.Lock()
		t.trips[i] = append(t.trips[i], trip{start: start, end: end, worker: w})
		t.mu.Unlock()
	}
}

// within returns the round trips, sorted, of the trips that match keep.
func (t *typists) within(keep func(trip) bool) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []time.Duration
	for _, trips := range t.trips {
		for _, tr := range trips {
			if keep(tr) {
				out = append(out, tr.end.Sub(tr.start))
			}
		}
	}
	slices.Sort(out)
	return out
}

// baseline returns the round trips, sorted, that started at from or later
// and ended by to.
func (t *typists) baseline(from, to time.Time) []time.Duration {
	return t.within(func(tr trip) bool { return !tr.start.Before(from) && !tr.end.After(to) })
}

// overlapping returns the round trips, sorted, that overlap the window from
// t0 to t1.
func (t *typists) overlapping(t0, t1 time.Time) []time.Duration {
	return t.within(func(tr trip) bool { return tr.start.Before(t1) && tr.end.After(t0) })
}

// checkMoved waits until every typist has made a round trip that started
// after t1 (so none is in flight across t1 any more), and then checks each
// one's trips from t0 on: once a worker that inGroup accepts has answered,
// only such workers answer, and every trip started after t1 was answered
// by one. It gives up on a run failure, an interrupt or after limit.
func (t *typists) checkMoved(ctx context.Context, fail *failure, t0, t1 time.Time, inGroup func(string) bool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := t.notSince(t1)
		if missing < 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("typist %s made no round trip in the %v after the call returned", userName(missing), limit)
		}
		select {
		case <-tick.C:
		case <-fail.done:
			return fail.err
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, trips := range t.trips {
		moved := false
		for _, tr := range trips {
			if !tr.end.After(t0) {
				continue
			}
			in := inGroup(tr.worker)
			switch {
			case in:
				moved = true
			case moved:
				return fmt.Errorf("typist %s: answered by %s after the new group had answered", userName(i), tr.worker)
			case tr.start.After(t1):
				return fmt.Errorf("typist %s: answered by %s after the call returned", userName(i), tr.worker)
			}
		}
	}
	return nil
}

// notSince returns a typist with no round trip started after t, or -1.
func (t *typists) notSince(at time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, trips := range t.trips {
		if n := len(trips); n == 0 || !trips[n-1].start.After(at) {
			return i
		}
	}
	return -1
}

// halt stops the typists after their ops in flight and waits for them.
func (t *typists) halt() {
	t.stop.Store(true)
	t.wg.Wait()
}

// kill stops the typists at once, dropping their WebSockets, and waits for
// them.
func (t *typists) kill() {
	t.stop.Store(true)
	abortPages(t.pages)
	t.wg.Wait()
}
