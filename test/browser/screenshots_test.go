package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
)

// docsWidths are the widths the docs' screenshots are taken at (issue 27).
var docsWidths = []int64{1280, 1400, 1440, 1920}

// findCut lists what the monitor's cards cut: a card wider than its box, or
// a value whose text is wider than its own (scrollWidth > clientWidth).
const findCut = `(() => {
  const out = [];
  for (const c of document.querySelectorAll("#workers .card")) {
    if (c.scrollWidth > c.clientWidth) out.push({ worker: c.dataset.worker, field: "(the card)", text: "", scroll: c.scrollWidth, client: c.clientWidth });
    for (const dd of c.querySelectorAll("dd")) {
      if (dd.hidden || dd.getClientRects().length === 0) continue;
      if (dd.scrollWidth > dd.clientWidth) out.push({ worker: c.dataset.worker, field: dd.dataset.field, text: dd.textContent, scroll: dd.scrollWidth, client: dd.clientWidth });
    }
  }
  return out;
})()`

// cut is one finding of findCut.
type cut struct {
	Worker string `json:"worker"`
	Field  string `json:"field"`
	Text   string `json:"text"`
	Scroll int    `json:"scroll"`
	Client int    `json:"client"`
}

// overflow is how many px a page is wider than its window (0: nothing
// reaches past the right edge).
const overflow = `Math.max(0, document.documentElement.scrollWidth - document.documentElement.clientWidth)`

// The docs' screenshots (docs/screenshots, `make screenshots`): the demo
// and the monitor as `stickyd dev` serves them (two in-process demo
// workers, people signed in), at 1280, 1400, 1440 and 1920 px, each taken
// once the page is live and checked: the demo's grid is live on a worker
// and no page is wider than its window; no monitor card value is cut, and
// the in-process workers' shared figures say so. Written to
// $STICKYD_SCREENSHOTS; skipped without it.
func TestScreenshotsForDocs(t *testing.T) {
	dir := os.Getenv("STICKYD_SCREENSHOTS")
	if dir == "" {
		t.Skip("STICKYD_SCREENSHOTS is not set (make screenshots sets it to docs/screenshots)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, "inprocess", 2)
	base := "http://" + a.Addr()
	requireMonitor(t, base)

	operator := startBrowser(t, "operator")
	for _, name := range []string{"ana", "bo", "cy"} {
		signIn(t, operator.newPerson(name), base, name)
	}
	demoTab := operator.newTab("demo")
	demoTab.do("loading the demo", chromedp.Navigate(base+"/"))
	demoTab.waitView("the grid to go live", firstLoad, func(v view) bool {
		return v.GridStatus == "live" && v.DocStatus == "live" && workerID.MatchString(v.GridWorker) && v.total() == rowCount
	})
	mon := operator.newTab("monitor")
	mon.loginMonitor(base+monitorPath, a.Token())

	for _, width := range docsWidths {
		size := chromedp.EmulateViewport(width, 900)
		demoTab.do(fmt.Sprintf("resizing the demo to %d px", width), size)
		demoTab.waitView(fmt.Sprintf("the grid live at %d px", width), settle, func(v view) bool {
			return v.GridStatus == "live" && v.total() == rowCount && len(v.Cities) > 0
		})
		if px, err := eval[int](demoTab, overflow); err != nil || px > 0 {
			t.Errorf("at %d px the demo is %d px wider than its window (%v)", width, px, err)
		}
		demoTab.screenshotTo(filepath.Join(dir, fmt.Sprintf("demo-%d.png", width)))

		mon.do(fmt.Sprintf("resizing the monitor to %d px", width), size)
		mon.waitMonitor(fmt.Sprintf("both workers ready at %d px, their shared figures marked", width), settle, func(v monitorView) bool {
			for _, id := range []string{"demo-1", "demo-2"} {
				c, ok := v.card(id)
				if !ok || c.State != "ready" || !anyContains(c.Hints, "in-process: heap, RSS, CPU") {
					return false
				}
			}
			return v.Tab == "processes" && v.Error == ""
		})
		cuts, err := eval[[]cut](mon, findCut)
		if err != nil {
			t.Fatalf("reading the cards at %d px: %v", width, err)
		}
		for _, c := range cuts {
			t.Errorf("at %d px, %s's %s %q is cut: %d px of text in %d px", width, c.Worker, c.Field, c.Text, c.Scroll, c.Client)
		}
		if px, err := eval[int](mon, overflow); err != nil || px > 0 {
			t.Errorf("at %d px the monitor is %d px wider than its window (%v)", width, px, err)
		}
		mon.screenshotTo(filepath.Join(dir, fmt.Sprintf("monitor-%d.png", width)))
	}
}

// screenshotTo saves a full screenshot of the tab at path.
func (tb *tab) screenshotTo(path string) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("tab %s: taking a screenshot: %v", tb.name, err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatalf("saving the screenshot: %v", err)
	}
	tb.t.Logf("screenshot of tab %s: %s", tb.name, path)
}
