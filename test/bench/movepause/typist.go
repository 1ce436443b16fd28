package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// ackEvery is how many incs the typist sends between two pulls that
// acknowledge its deltas. Well below the worker's fold limit (4096 pending
// deltas, plugins/worker/collector.go), so its big tree is never folded
// into a RESET, and the package a move carries holds at most this many
// small pending deltas.
const ackEvery = 256

// trip is one round trip of the typist: when its op was written, when the
// answer was read, and which worker answered.
type trip struct {
	start, end time.Time
	worker     string
}

// typist is the moved person's page, sending inc closed loop (and a pull
// every ackEvery incs) from one goroutine, recording every round trip. A
// failed op fails the run.
type typist struct {
	p    *benchkit.Page
	tick chan struct{} // gets a token after each trip
	stop atomic.Bool
	done chan struct{} // closed when the goroutine has returned

	mu    sync.Mutex // guards trips
	trips []trip     // in completion order: one op is in flight at a time
}

func startTypist(p *benchkit.Page, fail *failure) *typist {
	t := &typist{p: p, tick: make(chan struct{}, 1), done: make(chan struct{})}
	go t.run(fail)
	return t
}

func (t *typist) run(fail *failure) {
	defer close(t.done)
	for n := 1; !t.stop.Load(); n++ {
		start := time.Now()
		var (
			w   string
			err error
		)
		if n%(ackEvery+1) == 0 {
			w, err = t.p.Ack()
		} else {
			w, err = t.p.Inc()
		}
		end := time.Now()
		if err != nil {
			if !t.stop.Load() {
				fail.set(fmt.Errorf("the typist: %w", err))
			}
			return
		}
		t.mu.Lock()
		t.trips = append(t.trips, trip{start: start, end: end, worker: w})
		t.mu.Unlock()
		select {
		case t.tick <- struct{}{}:
		default:
		}
	}
}

// reset forgets the trips recorded so far.
func (t *typist) reset() {
	t.mu.Lock()
	t.trips = t.trips[:0]
	t.mu.Unlock()
}

// snapshot returns a copy of the trips recorded since the last reset.
func (t *typist) snapshot() []trip {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]trip(nil), t.trips...)
}

// waitUntil calls cond with the trips so far after every trip, until it
// reports true. It gives up on a run failure, an interrupt or after limit.
// cond runs with the trips locked: it must be quick and not keep the slice.
func (t *typist) waitUntil(ctx context.Context, fail *failure, limit time.Duration, what string, cond func([]trip) bool) error {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		t.mu.Lock()
		ok := cond(t.trips)
		t.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-t.tick:
		case <-t.done:
			if err := fail.check(); err != nil {
				return err
			}
			return errors.New("the typist stopped")
		case <-fail.done:
			return fail.err
		case <-ctx.Done():
			return fmt.Errorf("interrupted: %w", ctx.Err())
		case <-timer.C:
			return fmt.Errorf("waiting for %s: nothing after %v", what, limit)
		}
	}
}

// halt stops the typist after its op in flight and waits for it.
func (t *typist) halt() {
	t.stop.Store(true)
	<-t.done
}

// kill stops the typist at once, dropping its WebSocket, and waits for it.
func (t *typist) kill() {
	t.stop.Store(true)
	t.p.Abort()
	<-t.done
}
