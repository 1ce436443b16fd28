package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/test/bench/internal/benchkit"
)

// opTimeout bounds each page op's write and its answer. It is above the
// agent's barrier wait, so a slow move shows as a long round trip, not a
// timeout.
const opTimeout = 90 * time.Second

// userName is the login of person i.
func userName(i int) string { return fmt.Sprintf("u%d", i) }

// forEach calls f(0) … f(n-1), at most conc calls at a time, and returns
// the first error; once a call has failed, no new one starts.
func forEach(n, conc int, f func(i int) error) error {
	var (
		next   atomic.Int64
		failed atomic.Bool
		once   sync.Once
		first  error // set once, before failed
		wg     sync.WaitGroup
	)
	for range min(conc, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err; failed.Store(true) })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// abortPages drops every page that is open.
func abortPages(pages []*benchkit.Page) {
	for _, p := range pages {
		if p != nil {
			p.Abort()
		}
	}
}

// closePages closes every page on its worker, conc at a time, and returns
// the first error; the pages that were not closed are aborted.
func closePages(pages []*benchkit.Page, conc int, name func(i int) string) error {
	err := forEach(len(pages), conc, func(i int) error {
		p := pages[i]
		pages[i] = nil
		if err := p.Close(); err != nil {
			return fmt.Errorf("%s: %w", name(i), err)
		}
		return nil
	})
	abortPages(pages)
	return err
}
