package browser

import (
	"context"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

// rowWatchJS, run before the page's own scripts, keeps in window.__maxRows
// the most grid rows ever shown at once (every DOM change is looked at).
const rowWatchJS = `
window.__maxRows = 0;
new MutationObserver(() => {
  const n = document.querySelectorAll("#g-body tr:not([hidden])").length;
  if (n > window.__maxRows) window.__maxRows = n;
}).observe(document, { childList: true, subtree: true, attributes: true, attributeFilter: ["hidden"] });`

// shownRowsJS is how many grid rows show now, and the most ever shown.
const shownRowsJS = `(() => {
  return { shown: document.querySelectorAll("#g-body tr:not([hidden])").length, max: window.__maxRows };
})()`

type rowCounts struct {
	Shown int `json:"shown"`
	Max   int `json:"max"`
}

// The grid is drawn once at the size its room holds: never the worker's
// default window of 50 rows first and then refitted, neither on the first
// load nor after Reset.
func TestGridDrawsOnceAtItsSize(t *testing.T) {
	t.Parallel()
	one := startBrowser(t, "one")
	a := startAgent(t, "inprocess", 1)
	watch := func(ctx context.Context, tg *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: rowWatchJS})
		return chromedp.Void{}, err
	}
	one.do("watching the grid's rows", watch)
	one.do("loading the demo", chromedp.Navigate("http://"+a.Addr()+"/"))
	one.waitView("the grid to go live with all rows", firstLoad, func(v view) bool {
		return v.GridStatus == "live" && v.total() == rowCount && len(v.Cities) > 0
	})
	// counts reads the rows once the page shows them all: a window of
	// rows, each drawn ("1–N of ..." agrees with the rows shown).
	counts := func(what string) rowCounts {
		t.Helper()
		var c rowCounts
		one.waitView(what, settle, func(v view) bool {
			var err error
			c, err = eval[rowCounts](one, shownRowsJS)
			return err == nil && c.Shown > 0 && len(v.Cities) == c.Shown
		})
		return c
	}
	first := counts("the grid's rows")
	if first.Shown >= 50 {
		t.Fatalf("the grid shows %d rows in a 900 px window: the test needs a room smaller than the default window of 50", first.Shown)
	}
	if first.Max != first.Shown {
		t.Fatalf("the grid drew %d rows before settling at %d", first.Max, first.Shown)
	}

	// Filter, then Reset: the window keeps its size.
	one.do("typing a filter", chromedp.SendKeys(chromedp.ID("f-text"), city))
	one.waitView("the grid to show only "+city, settle, func(v view) bool {
		return v.Search == city && v.total() > 0 && v.total() < rowCount && allContain(v.Cities, city)
	})
	one.js("counting again", "window.__maxRows = 0")
	one.do("resetting", chromedp.Click(chromedp.ID("g-reset")))
	one.waitView("the grid reset", settle, func(v view) bool {
		return v.Search == "" && v.total() == rowCount
	})
	after := counts("the grid's rows after Reset")
	if after.Shown != first.Shown || after.Max > after.Shown {
		t.Fatalf("after Reset the grid drew up to %d rows and settled at %d (before: %d)", after.Max, after.Shown, first.Shown)
	}
}
