package browser

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// TestTaskboard is docs/first-app.md done: plugins/examples/taskboard built
// from its own module (outside the product's), run in-process (its dev
// module compiles it into stickyd) and as plugins of stickyd, with an
// agent and a data directory as the guide says. Two people in Chromium
// share the board; one is moved to the other worker and the agent is
// restarted, and each tab keeps its login, its filter and its draft.
func TestTaskboard(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(root, "plugins", "examples", "taskboard")
	bin := t.TempDir()
	build := func(dir, out, pkg string) string {
		t.Helper()
		out = filepath.Join(bin, out)
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = dir
		// Outside the product's module: the app's own go.mod decides.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s in %s: %v\n%s", pkg, dir, err, b)
		}
		return out
	}
	workerBin := build(app, "taskboard-worker", "./cmd/taskboard-worker")
	devBin := build(filepath.Join(app, "dev"), "taskboard-dev", ".")
	stickyd := benchkit.BuildStickyd(t)

	for _, mode := range []string{"inprocess", "plugins"} {
		t.Run(mode, func(t *testing.T) {
			exe, group := devBin, `builtin = "taskboard"`
			if mode == "plugins" {
				exe, group = stickyd, fmt.Sprintf("plugin { command = %q }", workerBin)
			}
			ag := startTaskboard(t, exe, group)
			ana, bob := startBrowser(t, "ana"), startBrowser(t, "bob")
			for _, p := range []struct {
				tb   *tab
				name string
			}{{ana, "ana"}, {bob, "bob"}} {
				p.tb.do("signing in", chromedp.Navigate("http://"+ag.front+"/login?user="+p.name))
				waitJS(t, p.tb, p.name+"'s board live", 20*time.Second,
					`document.getElementById("me").textContent === "`+p.name+`" && document.getElementById("status").textContent === "live"`)
			}

			// Ana adds a task; Bob's board shows it.
			ana.do("typing a task", chromedp.SendKeys("#draft", "write the guide"), chromedp.Click("#add button"))
			waitJS(t, bob, "bob sees ana's task", 10*time.Second, `document.getElementById("tasks").textContent.includes("write the guide")`)
			// Ana's tab keeps a filter and a draft of its own.
			ana.do("a filter and a draft", chromedp.SendKeys("#filter", "guide"), chromedp.SendKeys("#draft", "half typed"))
			time.Sleep(500 * time.Millisecond) // the last keystrokes' messages answered

			// Ana is moved to the other worker while her tab is open.
			home := ag.userWorker(t, "ana")
			to := ""
			for _, w := range ag.workers(t) {
				if w != home {
					to = w
				}
			}
			ag.admin(t, "POST", "/v1/users/ana/move", fmt.Sprintf(`{"to":%q}`, to), `"outcome":"moved"`)
			ana.js("clearing the draft", `document.getElementById("draft").value = ""; true`)
			ana.do("adding after the move", chromedp.SendKeys("#draft", "after the move"), chromedp.Click("#add button"))
			waitJS(t, bob, "bob sees the task added after the move", 10*time.Second, `document.getElementById("tasks").textContent.includes("after the move")`)
			if w := ag.userWorker(t, "ana"); w != to {
				t.Fatalf("ana is on %s after the move, want %s", w, to)
			}
			ana.do("typing a draft", chromedp.SendKeys("#draft", "kept"))
			time.Sleep(500 * time.Millisecond)

			// The agent restarts; each tab, reloaded, is as it was.
			ag.restart(t)
			for _, tb := range []*tab{ana, bob} {
				tb.do("reloading", chromedp.Reload())
			}
			waitJS(t, ana, "ana's tab as it was", 30*time.Second, `document.getElementById("me").textContent === "ana" &&
				document.getElementById("filter").value === "guide" && document.getElementById("draft").value === "kept" &&
				document.getElementById("tasks").textContent.includes("write the guide") &&
				!document.getElementById("tasks").textContent.includes("after the move")`)
			waitJS(t, bob, "bob's tab as it was", 30*time.Second, `document.getElementById("me").textContent === "bob" &&
				document.getElementById("filter").value === "" && document.getElementById("tasks").textContent.includes("after the move")`)
		})
	}
}

// taskboardAgent is a stickyd agent process serving the task board.
type taskboardAgent struct {
	exe, config, front, adminAddr string
	cmd                           *exec.Cmd
	exited                        chan error
}

const taskboardToken = "taskboard-token"

func startTaskboard(t *testing.T, exe, group string) *taskboardAgent {
	t.Helper()
	ports, err := freeport.Take(4)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	// docs/first-app.md's taskboard.hcl, on free ports.
	cfg := fmt.Sprintf(`data_dir = %q
server {
  bootstrap_expect = 1
  raft_addr        = %q
  rpc_addr         = %q
}
front { address = %q }
admin {
  address = %q
  token   = %q
}
group "taskboard" {
  workers = 2
  %s
}
`, filepath.Join(dir, "data"), addr(0), addr(1), addr(2), addr(3), taskboardToken, group)
	a := &taskboardAgent{exe: exe, config: filepath.Join(dir, "taskboard.hcl"), front: addr(2), adminAddr: addr(3)}
	if err := os.WriteFile(a.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.stop(t) })
	a.start(t)
	return a
}

func (a *taskboardAgent) start(t *testing.T) {
	t.Helper()
	a.cmd = exec.Command(a.exe, "agent", "-config", a.config)
	out := newTestWriter(t)
	a.cmd.Stdout, a.cmd.Stderr = out, out
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, done chan error) { done <- cmd.Wait() }(a.cmd, a.exited)
	deadline := time.Now().Add(60 * time.Second)
	for len(a.workers(t)) < 2 {
		select {
		case err := <-a.exited:
			t.Fatalf("the agent exited at start: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent's two workers never became ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (a *taskboardAgent) stop(t *testing.T) {
	if a.cmd == nil {
		return
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(60 * time.Second):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Error("the agent did not stop within a minute of SIGTERM")
	}
	a.cmd = nil
}

func (a *taskboardAgent) restart(t *testing.T) {
	t.Helper()
	a.stop(t)
	a.start(t)
}

// call is an admin API call; "" on a connection error (the agent starting).
func (a *taskboardAgent) call(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.adminAddr+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+taskboardToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (a *taskboardAgent) admin(t *testing.T, method, path, body, want string) string {
	t.Helper()
	code, out := a.call(t, method, path, body)
	if code != http.StatusOK || !strings.Contains(out, want) {
		t.Fatalf("%s %s: %d %s", method, path, code, out)
	}
	return out
}

// workers are the ready workers' ids.
func (a *taskboardAgent) workers(t *testing.T) []string {
	t.Helper()
	code, out := a.call(t, "GET", "/v1/workers", "")
	if code != http.StatusOK {
		return nil
	}
	var ws []struct{ ID, State string }
	if err := json.Unmarshal([]byte(out), &ws); err != nil {
		t.Fatalf("GET /v1/workers: %v: %s", err, out)
	}
	var ready []string
	for _, w := range ws {
		if w.State == "ready" {
			ready = append(ready, w.ID)
		}
	}
	return ready
}

// userWorker is where the maps say user lives.
func (a *taskboardAgent) userWorker(t *testing.T, user string) string {
	t.Helper()
	out := a.admin(t, "GET", "/v1/users/"+user, "", user)
	var u struct{ Worker string }
	if err := json.Unmarshal([]byte(out), &u); err != nil || u.Worker == "" {
		t.Fatalf("GET /v1/users/%s: %v: %s", user, err, out)
	}
	return u.Worker
}
