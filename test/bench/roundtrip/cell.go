package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// opTimeout bounds one op's write and its answer.
const opTimeout = 30 * time.Second

// cell is one measurement: a worker mode, a number of concurrent pages and
// the state each page holds.
type cell struct {
	mode  string
	pages int
	size  benchkit.Size
}

// result is a measured cell.
type result struct {
	cell
	frames    int             // inc round trips started inside the window
	window    time.Duration   // the measured window
	latencies []time.Duration // one per frame, sorted
	perWorker map[string]int  // pages per worker id
}

func (r *result) rate() float64 { return float64(r.frames) / r.window.Seconds() }

// runCell opens the cell's pages (each its own browser), fills their state,
// runs every page closed loop for warmup and then for the measured window,
// and closes the pages again so the next cell starts with empty workers.
func runCell(ctx context.Context, a *agent.Agent, c cell, warmup, window time.Duration) (res result, err error) {
	res = result{cell: c, window: window, perWorker: map[string]int{}}
	var pages []*benchkit.Page
	defer func() {
		// On success every page is closed below; on failure drop them.
		for _, p := range pages {
			p.Abort()
		}
	}()
	for i := 0; i < c.pages; i++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		p, err := benchkit.OpenPage(ctx, a.Addr(), "", opTimeout)
		if err != nil {
			return res, fmt.Errorf("page %d: %w", i, err)
		}
		pages = append(pages, p)
		res.perWorker[p.Worker()]++
		if err := p.Fill(c.size.Bytes); err != nil {
			return res, fmt.Errorf("page %d: filling %s: %w", i, c.size.Label, err)
		}
	}

	lats, err := drive(ctx, pages, warmup, window)
	if err != nil {
		return res, err
	}
	for _, l := range lats {
		res.frames += len(l)
		res.latencies = append(res.latencies, l...)
	}
	slices.Sort(res.latencies)
	if res.frames == 0 {
		return res, errors.New("no round trip completed in the measured window")
	}

	for i, p := range pages {
		if err := p.Close(); err != nil {
			return res, fmt.Errorf("page %d: %w", i, err)
		}
	}
	pages = nil
	return res, nil
}

// drive runs every page in its own goroutine, closed loop, from now until
// warmup+window has passed, and returns per page the latencies of the round
// trips started inside the window. The first error stops every page and is
// returned.
func drive(ctx context.Context, pages []*benchkit.Page, warmup, window time.Duration) ([][]time.Duration, error) {
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
			for _, p := range pages {
				p.Abort() // unblock the others' reads
			}
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
	expect := int(window/(20*time.Microsecond))/len(pages) + 16
	lats := make([][]time.Duration, len(pages))
	for i, p := range pages {
		lats[i] = make([]time.Duration, 0, expect)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				if !t0.Before(until) {
					return
				}
				if err := p.IncHome(); err != nil {
					if !stop.Load() {
						fail(fmt.Errorf("page on %s: %w", p.Worker(), err))
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
