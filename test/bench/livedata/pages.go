package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// opTimeout bounds each page op's write and its answer (a pull's wait comes
// on top). It is above the agent's frame timeout, so a slow answer shows as
// a long round trip, not a timeout.
const opTimeout = 90 * time.Second

// openPages opens a page for each of names, conc at a time but one
// arrival (load and login) at a time, so that the agent's placement sees
// each newcomer before the next and spreads them evenly; then runs then (if
// not nil) on each. It prints progress on stderr under label. On an error
// the pages it opened are aborted.
func openPages(ctx context.Context, addr string, names []string, conc int, label string, then func(*page) error, stderr io.Writer) ([]*page, error) {
	pages := make([]*page, len(names))
	began := time.Now()
	var (
		opened  atomic.Int64
		arrival sync.Mutex
	)
	step := max(len(names)/5, 100)
	err := benchkit.ForEach(len(names), conc, func(i int) error {
		p, err := openPage(ctx, addr, names[i], opTimeout, &arrival)
		if err != nil {
			return fmt.Errorf("opening %s's page: %w", names[i], err)
		}
		pages[i] = p
		if then != nil {
			if err := then(p); err != nil {
				return fmt.Errorf("%s on %s: %w", names[i], p.worker, err)
			}
		}
		if n := int(opened.Add(1)); n%step == 0 || n == len(names) {
			fmt.Fprintf(stderr, "  %d/%d %s open (%.1f s)\n", n, len(names), label, time.Since(began).Seconds())
		}
		return nil
	})
	if err != nil {
		abortPages(pages)
		return nil, err
	}
	return pages, nil
}

// abortPages drops every page that is open.
func abortPages(pages []*page) {
	for _, p := range pages {
		if p != nil {
			p.abort()
		}
	}
}

// closePages closes every page on its worker, conc at a time, and returns
// the first error; the pages that were not closed are aborted.
func closePages(ctx context.Context, pages []*page, conc int) error {
	err := benchkit.ForEach(len(pages), conc, func(i int) error {
		p := pages[i]
		if p == nil {
			return nil
		}
		pages[i] = nil
		if err := p.close(ctx); err != nil {
			return fmt.Errorf("%s: %w", p.user, err)
		}
		return nil
	})
	abortPages(pages)
	return err
}

// spread counts the pages on each worker.
func spread(pages []*page) map[string]int {
	m := map[string]int{}
	for _, p := range pages {
		m[p.worker]++
	}
	return m
}

// sleep waits d, or less if ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("interrupted: %w", ctx.Err())
	}
}
