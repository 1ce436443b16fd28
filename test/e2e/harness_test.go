// Package e2e drives a real stickyd agent from the outside: real HTTP and
// WebSocket clients against the front, with workers as go-plugin subprocesses
// (this test binary, re-executed as the counter worker) or in-process on the
// in-memory channel.
package e2e

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/examples/demo"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

const (
	agentEnv  = "STICKYD_E2E_AGENT"
	workerEnv = "STICKYD_E2E_WORKER"
	testToken = "e2e-token"
)

func TestMain(m *testing.M) {
	// A worker subprocess writes a heap profile at each SIGUSR1 when asked
	// (how the lifecycle soak's memory was read).
	if prefix := os.Getenv("STICKYD_BENCH_WORKER_HEAPPROFILE"); prefix != "" {
		benchkit.HeapProfileOnSignal(prefix)
	}
	switch os.Getenv(workerEnv) {
	case "counter":
		worker.Serve(counter.New(), worker.Options{Name: "counter", Version: "1"})
		os.Exit(0)
	case "demo1", "demo2":
		r := demo.Release(1)
		if os.Getenv(workerEnv) == "demo2" {
			r = 2
		}
		worker.Serve(demo.NewRelease(r), worker.Options{Name: "demo", Version: os.Getenv(workerEnv)})
		os.Exit(0)
	case "site":
		worker.Serve(siteApp(), worker.Options{Name: "site", Version: "1"})
		os.Exit(0)
	}
	if os.Getenv(agentEnv) == "1" {
		// Re-executed as a real stickyd agent process (its workers, started
		// with the worker variable set, took the switch above).
		os.Exit(command.Run(os.Args[1:], nil))
	}
	flag.Parse()
	setByCaller := false
	flag.Visit(func(f *flag.Flag) { setByCaller = setByCaller || f.Name == "test.parallel" })
	if !setByCaller {
		_ = flag.Set("test.parallel", fmt.Sprint(waitingTogether))
	}
	os.Exit(m.Run())
}

// waitingTogether is how many waiting tests run at once (unless go test's
// -parallel says otherwise).
const waitingTogether = 4

// waits marks a test that spends most of its time waiting on the
// product's clocks (forget_after, a lease's lapse, a cleanup's delay, a
// slow request), not on the CPU: such tests run after the others, up to
// waitingTogether at once (t.Parallel). Measured alone under -race, each
// uses under half a core over its run; a test that asserts how fast
// something happens under load stays sequential.
func waits(t *testing.T) { t.Parallel() }

// modes are the two channels every end-to-end test runs on.
var modes = []string{"subprocess", "inprocess"}

func startAgent(t *testing.T, mode string, workers int) *agent.Agent {
	t.Helper()
	return startAgentWith(t, mode, workers)
}

// option adjusts a test agent's configuration.
type option func(*agent.Config)

func withDataDir(t *testing.T) option {
	dir := t.TempDir()
	return func(c *agent.Config) {
		c.DataDir = dir
		c.Server.RaftAddr = "127.0.0.1:0"
	}
}

func withFreezeTimeout(d string) option {
	return func(c *agent.Config) { c.Move = &agent.MoveConfig{FreezeTimeout: d} }
}

// withApp makes the group's workers serve the named application of this
// binary ("counter", the default, or "site") in either mode.
func withApp(name string) option {
	return func(c *agent.Config) {
		g := c.Groups[0]
		if g.Plugin != nil {
			g.Plugin.Env[workerEnv] = name
		} else {
			g.Builtin = name
		}
	}
}

// eachRuntime runs test twice, as the subtests "go" and "python": with app
// making the group's workers the Go counter, then pycounter (the same
// pages, messages and routes in Python, plugins/examples/pycounter) on the
// Python worker. The python subtest is skipped where /usr/bin/python3
// cannot run the worker.
func eachRuntime(t *testing.T, test func(t *testing.T, app option)) {
	t.Run("go", func(t *testing.T) { test(t, withApp("counter")) })
	t.Run("python", func(t *testing.T) { test(t, withPycounter(pythonRepo(t))) })
}

func startAgentWith(t *testing.T, mode string, workers int, opts ...option) *agent.Agent {
	t.Helper()
	g := &agent.GroupConfig{Name: "web", Workers: workers}
	switch mode {
	case "subprocess":
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		g.Plugin = &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "counter"}}
	case "inprocess":
		g.Builtin = "counter"
	default:
		t.Fatalf("unknown mode %q", mode)
	}
	cfg := &agent.Config{
		LogLevel: "warn",
		Name:     "e2e",
		Front:    &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s", MaxMessageBytes: 64 << 10},
		Admin:    &agent.AdminConfig{Address: "127.0.0.1:0", Token: testToken},
		Server:   &agent.ServerConfig{},
		Groups:   []*agent.GroupConfig{g},
	}
	for _, o := range opts {
		o(cfg)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Warn, Output: testWriter{t}})
	builtins := map[string]agent.Builtin{
		"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log.Named("worker")}),
		"site":    worker.InProcess(siteApp(), worker.Options{Name: "site", Version: "1", Logger: log.Named("worker")}),
	}
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("starting agent: %v", err)
	}
	t.Cleanup(func() {
		// The stop parks everyone: a few pages of megabytes under the race
		// detector on a loaded machine have taken over 20 s.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Errorf("shutting down: %v", err)
		}
	})
	return a
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// browser is one browser: a cookie jar and an HTTP client.
type browser struct {
	t    *testing.T
	base string
	jar  *cookiejar.Jar
	http *http.Client
}

func newBrowser(t *testing.T, a *agent.Agent) *browser {
	return newBrowserAt(t, "http://"+a.Addr())
}

func newBrowserAt(t *testing.T, base string) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, jar: jar, http: &http.Client{Jar: jar, Timeout: 30 * time.Second}}
}

func (b *browser) do(method, path string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest(method, b.base+path, nil)
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// doForm posts a form, without following a redirect.
func (b *browser) doForm(path, form string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(form))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := *b.http
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

type whoami struct{ Conn, User, Worker string }

func (b *browser) whoami() whoami {
	b.t.Helper()
	code, body := b.do("GET", "/whoami")
	if code != 200 {
		b.t.Fatalf("whoami: %d %s", code, body)
	}
	var w whoami
	if err := json.Unmarshal([]byte(body), &w); err != nil {
		b.t.Fatalf("whoami: %v: %s", err, body)
	}
	return w
}

func (b *browser) cookie() string {
	u, _ := url.Parse(b.base)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == "stickyd_conn" {
			return c.Value
		}
	}
	return ""
}

// tab is one browser tab: a WebSocket and a page on it.
type tab struct {
	t       *testing.T
	b       *browser
	ws      *websocket.Conn
	page    string
	kind    string
	next    uint64
	last    uint64 // last delta sequence applied
	tree    map[string]any
	seqs    []uint64
	notices []string
}

func (b *browser) dial() (*websocket.Conn, *http.Response, error) {
	u, _ := url.Parse(b.base)
	h := http.Header{}
	for _, c := range b.jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	return websocket.DefaultDialer.Dial("ws://"+u.Host+"/_stickyd/ws", h)
}

func (b *browser) openTab(page string) *tab {
	b.t.Helper()
	return b.openTabKind(page, "counter")
}

func (b *browser) openTabKind(page, kind string) *tab {
	b.t.Helper()
	tb := &tab{t: b.t, b: b, page: page, kind: kind, tree: map[string]any{}}
	tb.connect()
	return tb
}

// connect (re)opens the WebSocket and the page, resuming after tb.last.
func (tb *tab) connect() answer {
	tb.t.Helper()
	ws, resp, err := tb.b.dial()
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		tb.t.Fatalf("dialing websocket: %v (HTTP %d)", err, code)
	}
	tb.ws = ws
	a := tb.op(map[string]any{"op": "open", "kind": tb.kind, "after": tb.last})
	if a.Op != "reply" || a.Opened == nil {
		tb.t.Fatalf("open: %+v", a)
	}
	if a.Opened.Resync {
		tb.tree, tb.last = map[string]any{}, a.Opened.Base
	}
	return a
}

type answer struct {
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker"`
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
	Retry  bool            `json:"retry"`
	Code   string          `json:"code"`
	Last   uint64          `json:"last"`
	Opened *struct {
		Seq    uint64 `json:"seq"`
		Notice string `json:"notice"`
		Resync bool   `json:"resync"`
		Base   uint64 `json:"base"`
	} `json:"opened"`
	Deltas []struct {
		Seq    uint64          `json:"seq"`
		Op     string          `json:"op"`
		Path   string          `json:"path"`
		Value  json.RawMessage `json:"value"`
		Notice string          `json:"notice"`
	} `json:"deltas"`
}

// op sends one op and waits for its answer.
func (tb *tab) op(m map[string]any) answer {
	tb.t.Helper()
	a, err := tb.tryOp(m)
	if err != nil {
		tb.t.Fatal(err)
	}
	return a
}

func (tb *tab) tryOp(m map[string]any) (answer, error) {
	tb.next++
	m["id"] = tb.next
	if _, ok := m["page"]; !ok {
		m["page"] = tb.page
	}
	_ = tb.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if err := tb.ws.WriteJSON(m); err != nil {
		return answer{}, fmt.Errorf("writing %v: %w", m, err)
	}
	_ = tb.ws.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		var a answer
		if err := tb.ws.ReadJSON(&a); err != nil {
			return answer{}, fmt.Errorf("reading answer to %v: %w", m, err)
		}
		if a.ID == tb.next {
			return a, nil
		}
	}
}

// send sends a message to the page and returns the app's answer.
func (tb *tab) send(data any) answer {
	tb.t.Helper()
	a := tb.op(map[string]any{"op": "msg", "data": data})
	if a.Op != "reply" || a.Error != "" {
		tb.t.Fatalf("msg %v: %+v", data, a)
	}
	return a
}

// pull fetches deltas after tb.last and applies them like client.js does.
func (tb *tab) pull(wait time.Duration) int {
	tb.t.Helper()
	n, err := tb.tryPull(wait)
	if err != nil {
		tb.t.Fatal(err)
	}
	return n
}

// tryPull is pull for other goroutines than the test's: it reports instead
// of failing the test.
func (tb *tab) tryPull(wait time.Duration) (int, error) {
	a, err := tb.tryOp(map[string]any{"op": "pull", "after": tb.last, "wait": wait.Milliseconds()})
	if err != nil {
		return 0, err
	}
	if a.Op != "reply" {
		return 0, fmt.Errorf("pull: %+v", a)
	}
	n := 0
	for _, d := range a.Deltas {
		if d.Seq <= tb.last {
			return n, fmt.Errorf("pull after %d returned old delta %d", tb.last, d.Seq)
		}
		if d.Seq != tb.last+1 && d.Op != "reset" {
			// Only a RESET, which carries the whole tree, may skip. (A page
			// silent for more than 4096 deltas may also skip superseded
			// ones; the tests' pages pull often enough not to.)
			return n, fmt.Errorf("gap: after %d came %d", tb.last, d.Seq)
		}
		var v any
		if len(d.Value) > 0 {
			if err := json.Unmarshal(d.Value, &v); err != nil {
				return n, err
			}
		}
		switch d.Op {
		case "set":
			tb.tree[d.Path] = v
		case "delete":
			delete(tb.tree, d.Path)
		case "reset":
			tb.tree = flatten(v)
			if d.Notice != "" {
				tb.notices = append(tb.notices, d.Notice)
			}
		}
		tb.last = d.Seq
		tb.seqs = append(tb.seqs, d.Seq)
		n++
	}
	return n, nil
}

// drain pulls until the page holds want for key, or fails.
func (tb *tab) drainUntil(key string, want any) {
	tb.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if fmt.Sprint(tb.tree[key]) == fmt.Sprint(want) {
			return
		}
		tb.pull(2 * time.Second)
	}
	tb.t.Fatalf("page never reached %s=%v; tree %v", key, want, tb.tree)
}

// flatten turns a RESET's tree into the flat path map the tab keeps.
func flatten(v any) map[string]any {
	out := map[string]any{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		m, ok := v.(map[string]any)
		if !ok || (prefix != "" && prefix != "note") {
			out[prefix] = v
			return
		}
		for k, e := range m {
			p := k
			if prefix != "" {
				p = prefix + "/" + k
			}
			walk(p, e)
		}
	}
	walk("", v)
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// killWorker SIGKILLs a subprocess worker.
func killWorker(t *testing.T, a *agent.Agent, id string) {
	t.Helper()
	for _, w := range a.Pool().Workers() {
		if w.ID == id {
			if w.Pid == 0 {
				t.Fatalf("worker %s has no process", id)
			}
			if err := syscall.Kill(w.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("no worker %s", id)
}
