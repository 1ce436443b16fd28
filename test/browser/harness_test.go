// Package browser drives the demo application (plugins/examples/demo) in a
// real headless Chromium through chromedp, against a real stickyd agent: the
// page's own client.js, app.js, WebSocket and sessionStorage, not a Go stand-in
// for them. It checks what a person sees: the grid goes live on a worker, a
// filter typed in the search box comes back from the worker as deltas, two
// tabs hold two pages on one worker, a reload resumes its page, the document's
// word count is computed by the worker, and a killed worker's page restarts
// clean with a notice. On customer pages, two people on two workers see each
// other's saves live (the global store and table subscriptions) and take
// distinct, consecutive numbers from a shared ticket sequence.
//
// The tests need Chromium (Debian: `apt-get install -y chromium`, or `make
// deps`; $CHROMIUM names another binary). Without it they fail, never skip:
// CI installs it. They never touch the network beyond 127.0.0.1.
package browser

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/examples/demo"
	"github.com/stickyd/stickyd/plugins/worker"
)

// workerEnv makes this test binary, re-executed by the agent, serve as the
// demo worker plugin (see TestMain).
const workerEnv = "STICKYD_BROWSER_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) == "demo" {
		worker.Serve(demo.New(), worker.Options{Name: "demo", Version: "1"})
		os.Exit(0)
	}
	if os.Getenv(agentEnv) == "1" {
		// A stickyd agent process (agentProcess), its workers in-process.
		os.Exit(command.Run(os.Args[1:], map[string]agent.Builtin{
			"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1"}),
		}))
	}
	os.Exit(m.Run())
}

// modes are the two ways the agent runs its workers: go-plugin subprocesses
// (this binary re-executed) and the builtin on the in-memory channel.
var modes = []string{"subprocess", "inprocess"}

// startAgent runs an agent with one group "demo" of n demo workers, so the
// workers are demo-1 .. demo-n; it is shut down when the test ends.
func startAgent(t *testing.T, mode string, n int) *agent.Agent {
	t.Helper()
	return startAgentWith(t, mode, n, nil)
}

// startAgentWith is startAgent with the configuration changed by edit
// (when not nil) before the agent starts.
func startAgentWith(t *testing.T, mode string, n int, edit func(*agent.Config)) *agent.Agent {
	t.Helper()
	g := &agent.GroupConfig{Name: "demo", Workers: n}
	switch mode {
	case "subprocess":
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		g.Plugin = &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "demo"}}
	case "inprocess":
		g.Builtin = "demo"
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	cfg := &agent.Config{
		Name:   "browser",
		Front:  &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s"},
		Admin:  &agent.AdminConfig{Address: "127.0.0.1:0"},
		Groups: []*agent.GroupConfig{g},
	}
	if edit != nil {
		edit(cfg)
	}
	a := runAgent(t, cfg)
	t.Cleanup(func() { stopAgent(t, a) })
	return a
}

// runAgent starts an agent of cfg with the demo and counter apps as its
// builtins; the caller stops it (stopAgent).
func runAgent(t *testing.T, cfg *agent.Config) *agent.Agent {
	t.Helper()
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Warn, Output: newTestWriter(t)})
	builtins := map[string]agent.Builtin{
		"demo":     worker.InProcess(demo.New(), worker.Options{Name: "demo", Version: "1", Logger: log.Named("worker")}),
		"counter":  worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log.Named("worker")}),
		"refusing": worker.InProcess(refusingApp{counter.New()}, worker.Options{Name: "refusing", Version: "1", Logger: log.Named("worker")}),
	}
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("starting agent: %v", err)
	}
	return a
}

// stopAgent shuts a down gracefully, as SIGTERM does.
func stopAgent(t *testing.T, a *agent.Agent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Errorf("shutting down the agent: %v", err)
	}
}

// testWriter logs to t until the test's cleanup ran; after that (a browser
// or worker goroutine still winding down) it drops the line, since logging
// to a finished test panics.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex // guards done
	done bool
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func (w *testWriter) Logf(format string, args ...any) {
	fmt.Fprintf(w, format, args...)
}

// installHint says how to get the browser these tests need.
const installHint = "test/browser drives a real Chromium: install it with `apt-get install -y chromium`\n" +
	"(Debian/Ubuntu; `make deps` does it), or set $CHROMIUM to a Chromium or Chrome binary"

// chromiumPath finds the browser: $CHROMIUM, else Debian's chromium. A
// missing browser fails the test, never skips it, with how to install it.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		path, err := exec.LookPath(p)
		if err != nil {
			t.Fatalf("$CHROMIUM=%q is not an executable (%v).\n%s", p, err, installHint)
		}
		return path
	}
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	t.Fatalf("chromium is not installed.\n%s", installHint)
	return ""
}

// browserLife bounds a whole browser's life: a hung browser cannot outlive
// its test by more than this.
const browserLife = 2 * time.Minute

// startBrowser starts a headless Chromium with a fresh profile and returns
// its first tab (no page loaded yet). Tabs opened from it share its cookies.
func startBrowser(t *testing.T, name string) *tab {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("lang", "en-US"),
		chromedp.WindowSize(1280, 900),
	)
	life, cancelLife := context.WithTimeout(context.Background(), browserLife)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	logs := newTestWriter(t)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithErrorf(logs.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser to exit
		cancelLife()
	})
	// The first action starts the browser, bound to ctx (not to a timeout:
	// see chromedp's docs), so this one has no deadline of its own beyond
	// browserLife.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return &tab{t: t, name: name, ctx: ctx}
}

// tab is one browser tab.
type tab struct {
	t    *testing.T
	name string
	ctx  context.Context
}

// newTab opens another tab in the same browser and browser context: same
// cookies, its own sessionStorage.
func (tb *tab) newTab(name string) *tab {
	tb.t.Helper()
	ctx, cancel := chromedp.NewContext(tb.ctx)
	tb.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		tb.t.Fatalf("opening tab %s: %v", name, err)
	}
	return &tab{t: tb.t, name: name, ctx: ctx}
}

// actionTimeout bounds one chromedp action (a navigation, a reload, keys).
const actionTimeout = 20 * time.Second

// do runs actions in the tab, failing the test on error.
func (tb *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("tab %s: %s: %v", tb.name, what, err)
	}
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](tb *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, 5*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// view is what the demo page shows, read from its DOM.
type view struct {
	GridStatus string   `json:"gridStatus"` // #s-grid-status
	GridWorker string   `json:"gridWorker"` // #s-grid-worker
	DocStatus  string   `json:"docStatus"`
	DocWorker  string   `json:"docWorker"`
	Rendered   string   `json:"rendered"` // the worker that rendered the HTML
	Conn       string   `json:"conn"`     // the connection the HTML was rendered for
	Info       string   `json:"info"`     // #p-info, "1–20 of 600,000"
	Search     string   `json:"search"`   // #f-text's value
	Cities     []string `json:"cities"`   // the city cell of each visible row
	Notice     string   `json:"notice"`   // #notice-text while #notice shows
	GridError  string   `json:"gridError"`
	Title      string   `json:"title"`
	Body       string   `json:"body"`
	Count      string   `json:"count"` // #d-count
	DocError   string   `json:"docError"`
	GridPage   string   `json:"gridPage"` // the grid's page id in sessionStorage
}

const viewJS = `(() => {
  const $ = (id) => document.getElementById(id);
  const text = (id) => $(id) ? $(id).textContent : "";
  const shown = (id) => $(id) && !$(id).hidden ? $(id).textContent : "";
  const col = Array.from(document.querySelectorAll("#g-head th")).findIndex((th) => th.dataset.col === "city");
  const rows = Array.from(document.querySelectorAll("#g-body tr")).filter((tr) => !tr.hidden);
  return {
    gridStatus: text("s-grid-status"), gridWorker: text("s-grid-worker"),
    docStatus: text("s-doc-status"), docWorker: text("s-doc-worker"),
    rendered: document.body.dataset.worker || "", conn: document.body.dataset.conn || "",
    info: text("p-info"), search: $("f-text") ? $("f-text").value : "",
    cities: col < 0 ? [] : rows.map((tr) => tr.children[col] ? tr.children[col].textContent : ""),
    notice: $("notice") && !$("notice").hidden ? text("notice-text") : "",
    gridError: shown("g-error"), docError: shown("d-error"),
    title: $("d-title") ? $("d-title").value : "", body: $("d-body") ? $("d-body").value : "",
    count: text("d-count"),
    gridPage: sessionStorage.getItem("stickyd.page.grid") || "",
  };
})()`

// view reads the page; an error (say, mid-navigation) is returned, not fatal.
func (tb *tab) view() (view, error) {
	return eval[view](tb, viewJS)
}

func (v view) String() string {
	return fmt.Sprintf("grid %s on %q, doc %s on %q, rendered by %q for conn %q, info %q, search %q, %d rows %v, notice %q, grid error %q, doc %q/%q count %q error %q, page %s",
		v.GridStatus, v.GridWorker, v.DocStatus, v.DocWorker, v.Rendered, v.Conn, v.Info, v.Search, len(v.Cities), v.Cities,
		v.Notice, v.GridError, v.Title, v.Body, v.Count, v.DocError, v.GridPage)
}

// total is the number of matching rows #p-info shows, or -1 before the grid
// rendered: "1–20 of 600,000" → 600000, "0 of 600,000" → 0. The digits are
// read whatever the locale's grouping separator.
func (v view) total() int {
	if strings.HasPrefix(v.Info, "0 of ") {
		return 0
	}
	i := strings.LastIndex(v.Info, " of ")
	if i < 0 {
		return -1
	}
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, v.Info[i+len(" of "):])
	n, err := strconv.Atoi(digits)
	if err != nil {
		return -1
	}
	return n
}

// waitView polls the page until cond holds, and returns what it saw then;
// at the deadline it fails with the last view.
func (tb *tab) waitView(what string, timeout time.Duration, cond func(v view) bool) view {
	tb.t.Helper()
	deadline := time.Now().Add(timeout)
	var last view
	var lastErr error
	for {
		v, err := tb.view()
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
