package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
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

// drive runs every page closed loop (benchkit.Drive) with inc round
// trips to its home worker.
func drive(ctx context.Context, pages []*benchkit.Page, warmup, window time.Duration) ([][]time.Duration, error) {
	return benchkit.Drive(ctx, len(pages), warmup, window, func(i int) error {
		if err := pages[i].IncHome(); err != nil {
			return fmt.Errorf("page on %s: %w", pages[i].Worker(), err)
		}
		return nil
	}, func() {
		for _, p := range pages {
			p.Abort() // unblock the others' reads
		}
	})
}

// delivery is how a page that keeps a pull waiting, as client.js does,
// gets each message's deltas: pulls per message and the delay from the
// reply to the delta (negative: the delta came first).
type delivery struct {
	mode     string
	messages int
	pulls    int
	delays   []time.Duration // sorted
}

// deliveryMessages is how many messages a delivery run sends.
const deliveryMessages = 2000

// runDelivery sends deliveryMessages notes (two writes each) on one page
// with a pull always waiting, and counts what it took to get each one's
// deltas.
func runDelivery(ctx context.Context, a *agent.Agent, mode string) (delivery, error) {
	d := delivery{mode: mode}
	p, err := benchkit.OpenPage(ctx, a.Addr(), "", opTimeout)
	if err != nil {
		return d, err
	}
	defer p.Abort()
	if err := p.Fill(1024); err != nil {
		return d, err
	}
	for range deliveryMessages {
		if err := ctx.Err(); err != nil {
			return d, err
		}
		x, err := p.NotePulled()
		if err != nil {
			return d, err
		}
		d.messages++
		d.pulls += x.Pulls
		d.delays = append(d.delays, x.ReplyToDelta)
	}
	slices.Sort(d.delays)
	return d, nil
}

// signed formats a duration that may be negative.
func signed(d time.Duration) string {
	if d < 0 {
		return "−" + benchkit.FormatDuration(-d)
	}
	return benchkit.FormatDuration(d)
}
