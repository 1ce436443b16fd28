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

const (
	// minPerClient is how many round trips per client a measured window
	// holds at least: a slow cell (10 MB through Redis) is measured for
	// longer rather than on a handful of round trips.
	minPerClient = 2
	// maxWindowFactor bounds that: a window ends at this many times the
	// asked duration, with what it has.
	maxWindowFactor = 10
)

// loadResult is one closed-loop measurement: the round trips that ended
// inside the measured window, and how many the whole drive made.
type loadResult struct {
	msgs      int
	window    time.Duration
	latencies []time.Duration // one per round trip, sorted
	// total counts every round trip of the drive: the warm-up's, the
	// window's and those that ended after it. A counter read before and
	// after the drive is divided by it.
	total int
}

// rate is round trips per second.
func (r loadResult) rate() float64 { return float64(r.msgs) / r.window.Seconds() }

// p is the nearest-rank percentile q of the round trips.
func (r loadResult) p(q float64) time.Duration { return benchkit.Percentile(r.latencies, q) }

// loadWindow decides which round trips count. The warm-up lasts at least
// warmup and until every client has finished one round trip (so the first
// round, all clients starting at once, is never measured). The window then
// opens and lasts at least duration and until it holds minPerClient round
// trips per client, but no longer than maxWindowFactor × duration.
type loadWindow struct {
	n        int
	warmup   time.Duration
	duration time.Duration
	begin    time.Time

	mu     sync.Mutex // guards all below
	total  int
	warmed []bool
	warm   int
	from   time.Time // the window's start; zero while warming up
	until  time.Time // its end; zero while open
	lats   []time.Duration
}

// record notes a round trip of client i from t0 to t1 and says whether
// the window is over, so the client must stop.
func (w *loadWindow) record(i int, t0, t1 time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.total++
	switch {
	case !w.until.IsZero():
		return true // after the window: not counted
	case w.from.IsZero():
		if !w.warmed[i] {
			w.warmed[i] = true
			w.warm++
		}
		if w.warm == w.n && t1.Sub(w.begin) >= w.warmup {
			w.from = t1
		}
		return false
	}
	w.lats = append(w.lats, t1.Sub(t0))
	in := t1.Sub(w.from)
	if (in >= w.duration && len(w.lats) >= minPerClient*w.n) || in >= maxWindowFactor*w.duration {
		w.until = t1
	}
	return !w.until.IsZero()
}

// drive runs n clients closed loop: client i calls rt(i) again as soon as
// it returns, through the warm-up and the measured window (see
// loadWindow); the round trips that end inside the window count, with
// their latency. Once the window is over no round trip starts and those in
// flight are waited for. The first error (or the end of ctx) stops every
// client, abort unblocking those waiting for an answer, and is returned.
func drive(ctx context.Context, n int, warmup, duration time.Duration, rt func(i int) error, abort func()) (loadResult, error) {
	w := &loadWindow{n: n, warmup: warmup, duration: duration, begin: time.Now(), warmed: make([]bool, n)}
	var (
		stop     atomic.Bool
		errOnce  sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() {
			firstErr = err
			stop.Store(true)
			abort()
		})
	}
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-ctx.Done():
			fail(fmt.Errorf("interrupted: %w", ctx.Err()))
		case <-watchDone:
		}
	}()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				if err := rt(i); err != nil {
					if !stop.Load() {
						fail(fmt.Errorf("client %d: %w", i, err))
					}
					return
				}
				if w.record(i, t0, time.Now()) {
					return
				}
			}
		}()
	}
	wg.Wait()
	errOnce.Do(func() {}) // no more failures can be recorded
	if firstErr != nil {
		return loadResult{}, firstErr
	}
	res := loadResult{msgs: len(w.lats), window: w.until.Sub(w.from), latencies: w.lats, total: w.total}
	slices.Sort(res.latencies)
	return res, nil
}
