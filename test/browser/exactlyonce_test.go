package browser

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
)

// Twenty typists (pages of the served client.js in Chromium) type
// through ten graceful restarts of the agent: every message is answered
// once and runs once (each page's counter equals the answers it got), none
// fails, and every page's tree ends equal to its worker's count.
func TestTypistsThroughRestarts(t *testing.T) {
	t.Parallel()
	const typists, restarts = 20, 10
	// The front's and raft's addresses stay across the restarts.
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	addr, raftAddr := free(), free()
	dir := t.TempDir()
	start := func() *agent.Agent {
		return runAgent(t, &agent.Config{
			Name:    "browser",
			DataDir: dir,
			Front:   &agent.FrontConfig{Address: addr, FrameTimeout: "10s"},
			Admin:   &agent.AdminConfig{Address: "127.0.0.1:0"},
			Server:  &agent.ServerConfig{RaftAddr: raftAddr},
			Groups:  []*agent.GroupConfig{{Name: "counter", Workers: 2, Builtin: "counter"}},
		})
	}
	stop := func(a *agent.Agent) { stopAgent(t, a) }
	a := start()
	defer func() { stop(a) }()

	one := startBrowser(t, "one")
	one.do("loading the site", chromedp.Navigate("http://"+addr+"/"))
	one.js("the typists", `
		window.__typists = [];
		window.__stop = false;
		const s = document.createElement("script");
		s.src = "/_stickyd/client.js";
		s.onload = () => {
			for (let i = 0; i < `+strconv.Itoa(typists)+`; i++) {
				const t = { ok: 0, last: 0, errors: [], done: false };
				t.page = stickyd.page({ kind: "counter", id: "typist-" + i });
				window.__typists.push(t);
				(async () => {
					while (!window.__stop) {
						try {
							const a = await t.page.send({ op: "inc" });
							t.ok++;
							t.last = a.count;
							if (a.count !== t.ok) t.errors.push("answer " + a.count + " after " + t.ok + " answers");
						} catch (e) {
							t.errors.push(String(e.message));
						}
						await new Promise((r) => setTimeout(r, 20 + Math.random() * 60));
					}
					t.done = true;
				})();
			}
		};
		document.head.appendChild(s);`)
	waitJS(t, one, "every typist typing", 20*time.Second, `window.__typists.length === `+strconv.Itoa(typists)+` && window.__typists.every((t) => t.ok > 0)`)
	for r := range restarts {
		time.Sleep(time.Second)
		stop(a)
		a = start()
		waitJS(t, one, "every typist typing again after restart "+strconv.Itoa(r+1), 60*time.Second,
			`(window.__mark = window.__mark || {}, window.__typists.every((t, i) => { const m = window.__mark[i]; window.__mark[i] = t.ok; return m !== undefined && t.ok > m; }))`)
		one.js("resetting the marks", `window.__mark = undefined; true`)
	}
	one.js("stopping the typists", `window.__stop = true; true`)
	waitJS(t, one, "the typists to stop", 30*time.Second, `window.__typists.every((t) => t.done)`)
	// Every page's tree comes to its count of answers.
	waitJS(t, one, "every page's tree equal to its answers", 30*time.Second,
		`window.__typists.every((t) => t.page.tree.count === t.ok)`)
	type typist struct {
		OK     int      `json:"ok"`
		Last   int      `json:"last"`
		Errors []string `json:"errors"`
		Tree   int      `json:"tree"`
	}
	got, err := eval[[]typist](one, `window.__typists.map((t) => ({ ok: t.ok, last: t.last, errors: t.errors, tree: t.page.tree.count }))`)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for i, ty := range got {
		total += ty.OK
		if len(ty.Errors) > 0 || ty.Last != ty.OK || ty.Tree != ty.OK {
			t.Errorf("typist %d: %d answers, last count %d, tree %d, errors %q", i, ty.OK, ty.Last, ty.Tree, ty.Errors)
		}
	}
	t.Logf("%d typists, %d restarts, %d messages: each answered once, none failed", typists, restarts, total)
}

// waitJS waits until the JavaScript expression cond is true in the tab.
func waitJS(t *testing.T, tb *tab, what string, timeout time.Duration, cond string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := eval[bool](tb, cond)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (%v)", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
