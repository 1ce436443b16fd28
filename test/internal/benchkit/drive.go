package benchkit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Drive runs n clients closed loop: client i calls rt(i) again as soon as
// it returns, from now until warmup+window has passed, and returns per
// client the latencies of the round trips started inside the window. The
// first error (or the end of ctx) stops every client, abort unblocking
// those waiting for an answer, and is returned.
func Drive(ctx context.Context, n int, warmup, window time.Duration, rt func(i int) error, abort func()) ([][]time.Duration, error) {
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
	// An interrupt stops the run like an error.
	watchDone := make(chan struct{})
	defer close(watchDone)
	go func() {
		select {
		case <-ctx.Done():
			fail(fmt.Errorf("interrupted: %w", ctx.Err()))
		case <-watchDone:
		}
	}()

	begin := time.Now()
	from, until := begin.Add(warmup), begin.Add(warmup+window)
	// Room for a few microseconds per round trip, so appends rarely copy.
	expect := int(window/(20*time.Microsecond))/max(n, 1) + 16
	lats := make([][]time.Duration, n)
	for i := range n {
		lats[i] = make([]time.Duration, 0, expect)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				if err := rt(i); err != nil {
					if !stop.Load() {
						fail(err)
					}
					return
				}
				if !t0.Before(from) {
					lats[i] = append(lats[i], time.Since(t0))
				}
			}
		}()
	}
	wg.Wait()
	errOnce.Do(func() {}) // no more failures can be recorded
	if firstErr != nil {
		return nil, firstErr
	}
	return lats, nil
}
