package main

import (
	"fmt"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// opTimeout bounds each page op's write and its answer. It is above the
// agent's barrier wait, so a slow move shows as a long round trip, not a
// timeout.
const opTimeout = 90 * time.Second

// userName is the login of person i.
func userName(i int) string { return fmt.Sprintf("u%d", i) }

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
	err := benchkit.ForEach(len(pages), conc, func(i int) error {
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
