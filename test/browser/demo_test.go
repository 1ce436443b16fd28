package browser

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

const (
	rowCount = 600_000 // the demo's order table
	city     = "Rome"  // a city no customer or product name contains
)

// workerID is what the page shows for a worker of the group "demo".
var workerID = regexp.MustCompile(`^demo-[0-9]+$`)

// How long the page may take: the first load includes the worker building
// its 600,000 rows (slow under -race); the rest is a round trip or two.
const (
	firstLoad = 40 * time.Second
	settle    = 15 * time.Second
)

// One person in one browser, against an agent with two demo workers: the
// grid goes live, filters on the worker, keeps a page per tab on the
// person's one worker, survives a reload, and counts words on the worker.
func TestDemoInBrowser(t *testing.T) {
	t.Parallel()
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			one := startBrowser(t, "one")
			a := startAgent(t, mode, 2)
			url := "http://" + a.Addr() + "/"

			// 1. The page loads and the grid goes live on a worker.
			one.do("loading the demo", chromedp.Navigate(url))
			first := one.waitView("the grid to go live with all rows", firstLoad, func(v view) bool {
				return v.GridStatus == "live" && v.DocStatus == "live" && workerID.MatchString(v.GridWorker) &&
					v.total() == rowCount && len(v.Cities) > 0
			})
			home := first.GridWorker
			if first.DocWorker != home || first.Rendered != home {
				t.Fatalf("one connection on several workers: grid on %q, doc on %q, HTML rendered by %q", home, first.DocWorker, first.Rendered)
			}

			// 2. A filter typed in the search box is applied by the worker
			// and comes back as deltas: fewer matches, every row in the city.
			one.do("typing a filter", chromedp.SendKeys(chromedp.ID("f-text"), city))
			filtered := one.waitView("the grid to show only "+city, settle, func(v view) bool {
				return v.Search == city && v.total() > 0 && v.total() < rowCount && allContain(v.Cities, city)
			})
			if filtered.GridError != "" {
				t.Fatalf("grid error after filtering: %s", filtered)
			}
			matches := filtered.total()

			// 3. A second tab of the same browser (same cookie, so same
			// connection and worker) opens its own page: unfiltered.
			two := one.newTab("two")
			two.do("loading the demo", chromedp.Navigate(url))
			other := two.waitView("the second tab's grid to go live, unfiltered", settle, func(v view) bool {
				return v.GridStatus == "live" && v.total() == rowCount && len(v.Cities) > 0
			})
			if other.Search != "" {
				t.Fatalf("the second tab shows the first tab's filter: %s", other)
			}
			if other.Conn == "" || other.Conn != first.Conn {
				t.Fatalf("the second tab is on connection %q, the first on %q: want the browser's one cookie", other.Conn, first.Conn)
			}
			if other.GridWorker != home || other.Rendered != home {
				t.Fatalf("same connection, different worker: tab one on %s, tab two %s", home, other)
			}
			if other.GridPage == "" || other.GridPage == filtered.GridPage {
				t.Fatalf("tabs share grid page id %q: want one page per tab", other.GridPage)
			}
			still, err := one.view()
			if err != nil {
				t.Fatalf("reading the first tab: %v", err)
			}
			if still.Search != city || still.total() != matches || !allContain(still.Cities, city) {
				t.Fatalf("the first tab lost its filter when the second opened:\nbefore: %s\nnow:    %s", filtered, still)
			}

			// 4. A reload resumes the same page (its id is in
			// sessionStorage) with the tree the worker kept.
			one.do("reloading", chromedp.Reload())
			reloaded := one.waitView("the reloaded tab to resume its filtered page", settle, func(v view) bool {
				return v.GridStatus == "live" && v.Search == city && v.total() == matches && allContain(v.Cities, city)
			})
			if reloaded.GridPage != filtered.GridPage {
				t.Fatalf("the reload opened page %q, not %q", reloaded.GridPage, filtered.GridPage)
			}
			if reloaded.Notice != "" || reloaded.GridWorker != home {
				t.Fatalf("the reload did not resume quietly on %s: %s", home, reloaded)
			}

			// 5. The document's word count is computed by the worker.
			const title, body = "Weekly note", "Orders from Rome look healthy this week"
			one.do("editing the document",
				chromedp.SendKeys(chromedp.ID("d-title"), title),
				chromedp.SendKeys(chromedp.ID("d-body"), body),
			)
			count := fmt.Sprintf("%d words, %d characters", len(strings.Fields(body)), len(body))
			one.waitView("the word count "+count, settle, func(v view) bool {
				return v.Count == count && v.Title == title && v.Body == body && v.DocError == ""
			})
		})
	}
}

// A worker killed under a live page (subprocess mode: only a subprocess can
// be killed from outside): the page comes back live on its own, restarted
// clean, says so in the notice banner, and works again.
func TestDemoWorkerKilled(t *testing.T) {
	t.Parallel()
	one := startBrowser(t, "one")
	a := startAgent(t, "subprocess", 2)
	one.do("loading the demo", chromedp.Navigate("http://"+a.Addr()+"/"))
	v := one.waitView("the grid to go live", firstLoad, func(v view) bool {
		return v.GridStatus == "live" && workerID.MatchString(v.GridWorker) && v.total() == rowCount
	})
	home := v.GridWorker
	one.do("typing a filter", chromedp.SendKeys(chromedp.ID("f-text"), city), chromedp.Blur(chromedp.ID("f-text")))
	one.waitView("the grid to show only "+city, settle, func(v view) bool {
		return v.total() > 0 && v.total() < rowCount && allContain(v.Cities, city)
	})

	killWorker(t, a, home)
	back := one.waitView("the notice that the page restarted clean, live again and unfiltered", settle, func(v view) bool {
		return v.Notice != "" && v.GridStatus == "live" && v.total() == rowCount && v.Search == ""
	})
	t.Logf("after the kill: %s", back)

	// The restarted page takes ops again.
	const other = "Oslo"
	one.do("typing another filter", chromedp.SendKeys(chromedp.ID("f-text"), other))
	one.waitView("the restarted grid to show only "+other, settle, func(v view) bool {
		return v.Search == other && v.total() > 0 && v.total() < rowCount && allContain(v.Cities, other) && v.GridError == ""
	})
}

// killWorker SIGKILLs a subprocess worker, as the kernel's OOM killer would.
func killWorker(t *testing.T, a *agent.Agent, id string) {
	t.Helper()
	for _, w := range a.Pool().Workers() {
		if w.ID != id {
			continue
		}
		if w.State != host.StateReady || w.Pid == 0 {
			t.Fatalf("worker %s is not a running subprocess: %+v", id, w)
		}
		if err := syscall.Kill(w.Pid, syscall.SIGKILL); err != nil {
			t.Fatalf("killing worker %s (pid %d): %v", id, w.Pid, err)
		}
		return
	}
	t.Fatalf("no worker %s in %+v", id, a.Pool().Workers())
}

// allContain reports whether there is at least one cell and every one
// contains text.
func allContain(cells []string, text string) bool {
	if len(cells) == 0 {
		return false
	}
	for _, c := range cells {
		if !strings.Contains(c, text) {
			return false
		}
	}
	return true
}

// At 800x600 the demo's panes need more room than the window has: they
// scroll inside the page, never under the status bar, so a click on the
// note lands on the note. After a move the status bar says the HTML's
// worker is not where the person is now.
func TestDemoSmallScreen(t *testing.T) {
	t.Parallel()
	tb := startBrowser(t, "small")
	a := startAgent(t, "inprocess", 2)
	tb.do("a small window", chromedp.EmulateViewport(800, 600))
	tb.do("loading the demo", chromedp.Navigate("http://"+a.Addr()+"/"))
	first := tb.waitView("the demo live", firstLoad, func(v view) bool {
		return v.GridStatus == "live" && v.DocStatus == "live" && workerID.MatchString(v.GridWorker)
	})
	hit, err := eval[string](tb, `(() => {
		const body = document.getElementById("d-body");
		body.scrollIntoView({ block: "center" });
		const r = body.getBoundingClientRect(), f = document.querySelector("footer.status").getBoundingClientRect();
		if (r.bottom > f.top + 1 && r.top < f.top) return "the note runs under the status bar";
		const at = document.elementFromPoint(r.left + r.width / 2, Math.min(r.bottom - 4, f.top - 4));
		return at === body ? "note" : "a click lands on " + (at ? at.tagName + "#" + at.id + "." + at.className : "nothing");
	})()`)
	if err != nil || hit != "note" {
		t.Fatalf("at 800x600: %s %v", hit, err)
	}
	if shown, _ := eval[bool](tb, `!document.getElementById("s-moved").hidden`); shown {
		t.Fatal("the status bar says the person moved before any move")
	}
	to := ""
	for _, w := range a.Pool().Ready() {
		if w != first.GridWorker {
			to = w
		}
	}
	if _, err := a.Supervisor().Move(t.Context(), "~"+first.Conn, to, "test"); err != nil {
		t.Fatal(err)
	}
	tb.do("typing after the move", chromedp.SendKeys(chromedp.ID("d-body"), "moved"))
	waitJS(t, tb, "the status bar to say the person moved, the doc on "+to, 10*time.Second,
		`!document.getElementById("s-moved").hidden && document.getElementById("s-doc-worker").textContent === "`+to+`"`)
}
