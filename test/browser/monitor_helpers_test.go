package browser

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
)

// monitorPath is where the front serves the monitor page.
const monitorPath = "/_stickyd/monitor/"

// startGovernedAgent is startAgent with subprocess workers, a 1 s probe
// and governance on, so the monitor has saturation to draw. Its limits are
// far above what the demo uses and replacement and compaction are off:
// governance watches and never moves anyone during a test.
func startGovernedAgent(t *testing.T, n int) *agent.Agent {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	never := 0.0
	cfg := &agent.Config{
		Name:  "browser",
		Front: &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s"},
		Admin: &agent.AdminConfig{Address: "127.0.0.1:0"},
		Probe: &agent.ProbeConfig{Interval: "1s"},
		Groups: []*agent.GroupConfig{{
			Name: "demo", Workers: n,
			Plugin: &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "demo"}},
			Governance: &agent.GovernanceConfig{
				Enabled: true, MemoryLimitMB: 1024, CPULimit: 64, MinWorkers: n, MaxWorkers: n,
				ReplaceHorizon: "0s", CompactBelow: &never,
			},
		}},
	}
	a := runAgent(t, cfg)
	t.Cleanup(func() { stopAgent(t, a) })
	return a
}

// newPerson opens a tab in a new browser context of tb's browser: its own
// cookies and storage, as if another person on another computer.
func (tb *tab) newPerson(name string) *tab {
	tb.t.Helper()
	ctx, cancel := chromedp.NewContext(tb.ctx, chromedp.WithNewBrowserContext())
	tb.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.t.Fatalf("opening a browser context for %s: %v", name, err)
	}
	return &tab{t: tb.t, name: name, ctx: ctx}
}

// js runs a script in the tab for its effect, failing the test on error.
func (tb *tab) js(what, script string) {
	tb.t.Helper()
	if _, err := eval[any](tb, script); err != nil {
		tb.t.Fatalf("tab %s: %s: %v", tb.name, what, err)
	}
}

// screenshot saves a full screenshot of the tab as name under the test's
// artifact directory and logs where.
func (tb *tab) screenshot(name string) string {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("tab %s: taking a screenshot: %v", tb.name, err)
	}
	path := filepath.Join(artifactDir(tb.t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatalf("saving the screenshot: %v", err)
	}
	tb.t.Logf("screenshot of tab %s: %s", tb.name, path)
	return path
}

// artifactDir is where a test leaves what people look at afterwards: the
// test's temp dir, or $STICKYD_ARTIFACTS/<test> when set (the temp dir is
// removed when the test ends).
func artifactDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("STICKYD_ARTIFACTS")
	if root == "" {
		return t.TempDir()
	}
	dir := filepath.Join(root, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("creating the artifact directory: %v", err)
	}
	return dir
}

// monitorView is what the monitor page shows, read from its DOM.
type monitorView struct {
	Login      bool          `json:"login"`      // the login form is shown
	LoginError string        `json:"loginError"` // its message
	Tab        string        `json:"tab"`        // the selected tab
	Polls      int           `json:"polls"`      // readings taken since the page loaded
	At         string        `json:"at"`         // the last reading's time (ISO)
	Reading    string        `json:"reading"`    // the last reading's time as shown
	Summary    string        `json:"summary"`
	Error      string        `json:"error"` // the error banner, while shown
	Maint      string        `json:"maint"` // the maintenance banner, while shown
	Stale      bool          `json:"stale"` // the page greys its data out
	Workers    []monitorCard `json:"workers"`
	People     []monitorRow  `json:"people"` // the rows shown, in order
	Count      string        `json:"count"`  // "1–100 of 203"
	Filter     string        `json:"filter"` // "worker=web-2 group= state="
	Prev       bool          `json:"prev"`   // the previous page can be asked for
	Next       bool          `json:"next"`   // the next page can be asked for
	Sort       string        `json:"sort"`   // "conns descending"
	Events     []string      `json:"events"`
	Pending    int           `json:"pending"` // events marked in progress
	Marker     string        `json:"marker"`  // window.testMarker: gone after a reload
	ScrollY    float64       `json:"scrollY"`
}

// monitorCard is one worker's card.
type monitorCard struct {
	ID         string       `json:"id"`
	State      string       `json:"state"`
	StateShown string       `json:"stateShown"`
	Users      string       `json:"users"`
	Died       string       `json:"died"`
	Hints      []string     `json:"hints"`
	Bars       []monitorBar `json:"bars"`
	Samples    int          `json:"samples"`    // points on the memory line
	Limit      bool         `json:"limit"`      // the limit is drawn
	Projection bool         `json:"projection"` // the projection is drawn
}

// monitorBar is one saturation bar.
type monitorBar struct {
	Resource string  `json:"resource"`
	Hot      bool    `json:"hot"`
	Width    float64 `json:"width"` // of the fill, as a fraction of the track
	Color    string  `json:"color"` // the fill's computed colour
	Pct      string  `json:"pct"`
}

// monitorRow is one row of the people table.
type monitorRow struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	Group  string `json:"group"`
	State  string `json:"state"`
	Conns  string `json:"conns"`
	Seen   string `json:"seen"`
}

func (r monitorRow) String() string { return r.User + "@" + r.Worker }

const monitorJS = `(() => {
  const $ = (id) => document.getElementById(id);
  const shown = (id) => $(id) && !$(id).hidden ? $(id).textContent : "";
  if (!$("workers")) return { login: !!$("token"), loginError: shown("login-error") };
  const text = (root, sel) => { const n = root.querySelector(sel); return n ? n.textContent : ""; };
  const workers = Array.from(document.querySelectorAll("#workers .card")).map((c) => {
    const line = c.querySelector(".chart polyline.line");
    return {
      id: c.dataset.worker, state: c.dataset.state, stateShown: text(c, ".state"),
      users: text(c, 'dd[data-field="users"]'),
      died: c.querySelector('dd[data-field="died"]').hidden ? "" : text(c, 'dd[data-field="died"]'),
      hints: Array.from(c.querySelectorAll(".hints li")).map((li) => li.textContent),
      bars: Array.from(c.querySelectorAll(".bar")).map((b) => {
        const track = b.querySelector(".track").getBoundingClientRect();
        const fill = b.querySelector(".fill");
        return { resource: b.dataset.resource, hot: b.classList.contains("hot"),
          width: track.width ? fill.getBoundingClientRect().width / track.width : 0,
          color: getComputedStyle(fill).backgroundColor, pct: text(b, ".pct") };
      }),
      samples: line ? line.getAttribute("points").trim().split(/\s+/).length : 0,
      limit: !!c.querySelector(".chart line.limit"),
      projection: !!c.querySelector(".chart line.projection"),
    };
  });
  const people = Array.from(document.querySelectorAll("#people-table tbody tr")).map((tr) => {
    const cell = (k) => text(tr, 'td[data-key="' + k + '"]');
    return { user: cell("user"), worker: cell("worker"), group: cell("group"), state: cell("state"), conns: cell("conns"), seen: cell("seen") };
  });
  const sorted = document.querySelector("#people-table th[aria-sort]");
  const events = Array.from(document.querySelectorAll("#events tbody tr"));
  return {
    login: false, tab: document.body.dataset.tab || "", polls: Number(document.body.dataset.polls || 0),
    at: document.body.dataset.at || "", reading: text(document, "#last-reading"), summary: text(document, "#summary"),
    error: shown("error"), maint: shown("maintenance"), stale: document.body.classList.contains("stale"),
    workers, people, count: text(document, "#people-count"),
    filter: ["worker", "group", "state"].map((k) => k + "=" + $("f-" + k).value).join(" "),
    prev: !$("prev-page").disabled, next: !$("next-page").disabled,
    sort: sorted ? sorted.dataset.key + " " + sorted.getAttribute("aria-sort") : "",
    events: events.map((tr) => tr.dataset.kind), pending: events.filter((tr) => tr.classList.contains("pending")).length,
    marker: String(window.testMarker || ""), scrollY: window.scrollY,
  };
})()`

// monitor reads the monitor page; an error (mid-navigation) is returned.
func (tb *tab) monitor() (monitorView, error) {
	return eval[monitorView](tb, monitorJS)
}

func (v monitorView) String() string {
	if v.Login {
		return fmt.Sprintf("login form (message %q)", v.LoginError)
	}
	var ws []string
	for _, w := range v.Workers {
		ws = append(ws, fmt.Sprintf("%s:%s(users %s)", w.ID, w.State, w.Users))
	}
	var ps []string
	for _, p := range v.People {
		ps = append(ps, p.String())
	}
	return fmt.Sprintf("tab %s, %d polls, reading %s, error %q; workers %v; people %v (%s, filter %q, sort %q); events %v",
		v.Tab, v.Polls, v.Reading, v.Error, ws, ps, v.Count, v.Filter, v.Sort, v.Events)
}

// card returns the card of worker id.
func (v monitorView) card(id string) (monitorCard, bool) {
	for _, c := range v.Workers {
		if c.ID == id {
			return c, true
		}
	}
	return monitorCard{}, false
}

// person returns the row of user.
func (v monitorView) person(user string) (monitorRow, bool) {
	for _, p := range v.People {
		if p.User == user {
			return p, true
		}
	}
	return monitorRow{}, false
}

// waitMonitor polls the monitor page until cond holds and returns what it
// saw then; at the deadline it fails with the last view.
func (tb *tab) waitMonitor(what string, timeout time.Duration, cond func(v monitorView) bool) monitorView {
	tb.t.Helper()
	deadline := time.Now().Add(timeout)
	var last monitorView
	var lastErr error
	for {
		v, err := tb.monitor()
		if err == nil && cond(v) {
			return v
		}
		if err == nil {
			last = v
		}
		lastErr = err
		if time.Now().After(deadline) {
			tb.t.Fatalf("tab %s: timed out after %v waiting for %s;\nlast view: %s\nlast error: %v", tb.name, timeout, what, last, lastErr)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-tb.ctx.Done():
			tb.t.Fatalf("tab %s: waiting for %s: browser gone: %v", tb.name, what, tb.ctx.Err())
		}
	}
}

// loginMonitor logs the tab into the monitor page at url with token, by its
// form, and waits for the first reading.
func (tb *tab) loginMonitor(url, token string) monitorView {
	tb.t.Helper()
	tb.do("opening the monitor", chromedp.Navigate(url))
	tb.waitMonitor("the monitor's login form", settle, func(v monitorView) bool { return v.Login })
	tb.do("giving the admin token",
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Submit(chromedp.ID("token")),
	)
	return tb.waitMonitor("the monitor's first reading", settle, func(v monitorView) bool { return !v.Login && v.Polls > 0 })
}
