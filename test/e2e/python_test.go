package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The Python runtime: a group with runtime "python3" runs pyshop
// (plugins/examples/pyshop, plain WSGI) in stickyd's Python worker
// (plugins/python), a go-plugin subprocess speaking the same channel.

const pythonExe = "/usr/bin/python3"

// pythonRepo returns the repository's root, or skips the test when
// /usr/bin/python3 cannot run the Python worker.
func pythonRepo(t *testing.T) string {
	t.Helper()
	if out, err := exec.Command(pythonExe, "-c", "import grpc, google.protobuf").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import grpc and protobuf (make deps installs python3-grpcio python3-protobuf): %v %s", pythonExe, err, out)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// withPyshop makes the agent's group run pyshop on the Python worker.
func withPyshop(root string) option { return withPythonApp(root, "pyshop.app:application") }

// withPycounter makes the agent's group run pycounter, the counter's
// live-data part in Python (plugins/examples/pycounter).
func withPycounter(root string) option { return withPythonApp(root, "pycounter.app:application") }

// withPythonApp makes the agent's group run command, an app of
// plugins/examples, on the Python worker.
func withPythonApp(root, command string) option {
	return func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		g := c.Groups[0]
		g.Builtin = ""
		g.Plugin = &agent.PluginConfig{Runtime: agent.RuntimePython3, Command: command,
			Env: map[string]string{"PYTHONPATH": filepath.Join(root, "plugins", "examples")}}
	}
}

type pyCart struct {
	Items  []string `json:"items"`
	Worker string   `json:"worker"`
}

func (b *browser) pyCart(method, path string) pyCart {
	b.t.Helper()
	code, body := b.do(method, path)
	if code != 200 {
		b.t.Fatalf("%s %s: %d %s", method, path, code, body)
	}
	var c pyCart
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		b.t.Fatalf("%s %s: %v: %s", method, path, err, body)
	}
	return c
}

// The SDK's own unit tests (tree, codec, collector, runtime), and the
// constants it shares with the Go side.
func TestPythonSDK(t *testing.T) {
	waits(t)
	root := pythonRepo(t)
	cmd := exec.Command(pythonExe, "-m", "unittest", "discover", "-s", filepath.Join(root, "plugins", "python", "tests"))
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
	src, err := os.ReadFile(filepath.Join(root, "plugins", "python", "stickyd", "plugin.py"))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"PROTOCOL_VERSION":   fmt.Sprint(protocol.Version),
		"APP_PROTOCOL":       fmt.Sprint(channel.Handshake.ProtocolVersion),
		"MAGIC_COOKIE_KEY":   fmt.Sprintf("%q", channel.Handshake.MagicCookieKey),
		"MAGIC_COOKIE_VALUE": fmt.Sprintf("%q", channel.Handshake.MagicCookieValue),
		"MAX_ENVELOPE":       fmt.Sprintf("%d << 20", channel.MaxEnvelopeBytes>>20),
	} {
		got := ""
		if m := regexp.MustCompile(`(?m)^` + name + ` = ([^#\n]*[^#\s])`).FindSubmatch(src); m != nil {
			got = string(m[1])
		}
		if got != want {
			t.Errorf("plugin.py %s = %s, the Go side has %s", name, got, want)
		}
	}
	// The generated module matches the .proto (make proto regenerates it).
	if protoc, err := exec.LookPath("protoc"); err == nil {
		dir := t.TempDir()
		if out, err := exec.Command(protoc, "-I", filepath.Join(root, "plugins", "worker", "protocol"), "--python_out="+dir,
			filepath.Join(root, "plugins", "worker", "protocol", "stickyd.proto")).CombinedOutput(); err != nil {
			t.Fatalf("protoc: %v %s", err, out)
		}
		fresh, _ := os.ReadFile(filepath.Join(dir, "stickyd_pb2.py"))
		committed, _ := os.ReadFile(filepath.Join(root, "plugins", "python", "stickyd", "stickyd_pb2.py"))
		if string(fresh) != string(committed) {
			t.Error("plugins/python/stickyd/stickyd_pb2.py is stale: run make proto")
		}
	}
}

// Two Python workers behind the front: each browser's cart stays with its
// cookie, a counter page keeps its state and its deltas in sequence, and a
// logged-in person moved to the other worker keeps both.
func TestPythonWorkers(t *testing.T) {
	root := pythonRepo(t)
	a := startAgentWith(t, "inprocess", 2, withPyshop(root), withDataDir(t))
	for _, w := range a.Pool().Workers() {
		if w.App != "pyshop.app" || w.AppVersion != "1" || w.Pid == 0 {
			t.Fatalf("worker %s runs %q version %q (pid %d), want pyshop.app 1 in a process", w.ID, w.App, w.AppVersion, w.Pid)
		}
	}
	if n := len(a.Pool().Ready()); n != 2 {
		t.Fatalf("%d Python workers ready, want 2", n)
	}

	// Stickiness: every request of a browser reaches the worker holding
	// its session, and the cart is the browser's own.
	shoppers := []*browser{newBrowser(t, a), newBrowser(t, a), newBrowser(t, a)}
	homes := map[string]bool{}
	for i, b := range shoppers {
		first := b.pyCart("GET", "/cart")
		homes[first.Worker] = true
		for k := 0; k < 4; k++ {
			c := b.pyCart("POST", fmt.Sprintf("/cart/add?item=s%d-%d", i, k))
			if c.Worker != first.Worker || len(c.Items) != k+1 {
				t.Fatalf("shopper %d, item %d: %+v (first served by %s)", i, k, c, first.Worker)
			}
		}
	}
	for i, b := range shoppers {
		c := b.pyCart("GET", "/cart")
		if len(c.Items) != 4 || c.Items[3] != fmt.Sprintf("s%d-3", i) {
			t.Fatalf("shopper %d's cart is %v", i, c.Items)
		}
	}
	if len(homes) != 2 {
		t.Errorf("three new sessions all went to %v: placement should spread them", homes)
	}

	// A logged-in person with a cart and a counter page.
	b := newBrowser(t, a)
	if code, body := b.do("POST", "/login?user=pia&team=py"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	b.pyCart("POST", "/cart/add?item=tea")
	tb := b.openTab("counter-1")
	for i := 1; i <= 5; i++ {
		ans := tb.send(map[string]any{"op": "inc"})
		var got struct{ Count float64 }
		if err := json.Unmarshal(ans.Data, &got); err != nil || got.Count != float64(i) {
			t.Fatalf("inc %d answered %s (%v)", i, ans.Data, err)
		}
	}
	tb.drainUntil("count", 5)
	if ans := tb.op(map[string]any{"op": "msg", "data": map[string]any{"op": "nope"}}); ans.Error == "" {
		t.Fatalf("an unknown op was not refused: %+v", ans)
	}
	home := b.whoami()
	if home.User != "pia" {
		t.Fatalf("after login: %+v", home)
	}

	// The move, through the admin API.
	to := otherWorker(a.Pool().Ready(), home.Worker)
	code, body := adminCall(t, a, "POST", "/v1/users/pia/move", testToken, fmt.Sprintf(`{"to": %q}`, to))
	if code != 200 {
		t.Fatalf("move: %d %s", code, body)
	}
	var res struct {
		Outcome string
		Pages   int
		Conns   int
	}
	if err := json.Unmarshal([]byte(body), &res); err != nil || res.Outcome != "moved" || res.Pages != 1 || res.Conns != 1 {
		t.Fatalf("move result %s (%v)", body, err)
	}
	if w := b.whoami(); w.Worker != to || w.User != "pia" || w.Conn != home.Conn {
		t.Fatalf("after the move pia is %+v, want worker %s, connection %s", w, to, home.Conn)
	}
	if c := b.pyCart("GET", "/cart"); c.Worker != to || len(c.Items) != 1 || c.Items[0] != "tea" {
		t.Fatalf("pia's cart after the move: %+v", c)
	}
	for i := 6; i <= 8; i++ {
		tb.send(map[string]any{"op": "inc"})
	}
	tb.drainUntil("count", 8)
	for i := 1; i < len(tb.seqs); i++ {
		if tb.seqs[i] != tb.seqs[i-1]+1 {
			t.Fatalf("delta gap or duplicate across the move: %v", tb.seqs)
		}
	}
	if len(tb.notices) != 0 {
		t.Fatalf("the page restarted across the move: %v", tb.notices)
	}
	// And back: the move is the same road in both directions.
	code, body = adminCall(t, a, "POST", "/v1/users/pia/move", testToken, fmt.Sprintf(`{"to": %q}`, home.Worker))
	if code != 200 {
		t.Fatalf("move back: %d %s", code, body)
	}
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 9)
	if w := b.whoami(); w.Worker != home.Worker {
		t.Fatalf("after the move back pia is on %s", w.Worker)
	}
}

// A full restart of an agent running Python workers (configured in HCL)
// keeps the session: same login without logging in again, same cart, and
// the page resumes where it was.
func TestPythonRestartKeepsSession(t *testing.T) {
	root := pythonRepo(t)
	p := &proc{t: t, dir: t.TempDir(), front: freePort(t), admin: freePort(t)}
	cfg := fmt.Sprintf(`
name       = "py"
data_dir   = %q
log_level  = "info"
python_sdk = %q
server {
  raft_addr = %q
  rpc_addr  = %q
}
front {
  address       = %q
  frame_timeout = "10s"
  barrier_wait  = "20s"
}
admin {
  address = %q
  token   = %q
}
group "shop" {
  workers = 2
  plugin {
    runtime = "python3"
    command = "pyshop.app:application"
    env     = { PYTHONPATH = %q }
  }
}
`, filepath.Join(p.dir, "data"), filepath.Join(root, "plugins", "python"), freePort(t), freePort(t), p.front, p.admin,
		testToken, filepath.Join(root, "plugins", "examples"))
	if err := os.WriteFile(filepath.Join(p.dir, "stickyd.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()

	b := procBrowser(t, p)
	if code, body := b.do("POST", "/login?user=rio"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	b.pyCart("POST", "/cart/add?item=kettle")
	tb := b.openTab("counter-1")
	for i := 0; i < 3; i++ {
		tb.send(map[string]any{"op": "inc"})
	}
	tb.drainUntil("count", 3)
	before := b.whoami()

	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, p.out)
	}
	tb.ws.Close()
	p.start()
	if h := p.health(); h.Restart.Parked != 1 || h.Restart.Missing != 0 || len(h.Restart.Incomplete) != 0 {
		t.Fatalf("restart report %+v\n%s", h.Restart, p.out)
	}
	if w := b.whoami(); w.User != "rio" || w.Conn != before.Conn {
		t.Fatalf("after the restart the browser is %+v, was %+v", w, before)
	}
	if c := b.pyCart("GET", "/cart"); len(c.Items) != 1 || c.Items[0] != "kettle" {
		t.Fatalf("cart after the restart: %+v", c)
	}
	ans := tb.connect()
	if ans.Opened.Resync || ans.Opened.Notice != "" {
		t.Fatalf("the page did not resume: %+v", ans.Opened)
	}
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 4)
	for i := 1; i < len(tb.seqs); i++ {
		if tb.seqs[i] != tb.seqs[i-1]+1 {
			t.Fatalf("delta gap or duplicate across the restart: %v", tb.seqs)
		}
	}
}

// A catalog group on the Python runtime, created through the admin API. A
// person moves there from a Go worker and back: the package is the same
// protobuf and tree codec in both languages, so the page keeps its count.
func TestPythonCatalogGroup(t *testing.T) {
	root := pythonRepo(t)
	a := startAgentWith(t, "subprocess", 1, withDataDir(t), func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
	})
	if code, body := adminCall(t, a, "PUT", "/v1/groups/py", testToken, `{"runtime": "python3", "builtin": "counter"}`); code != 400 {
		t.Fatalf("a python3 group without a command: %d %s", code, body)
	}
	req := fmt.Sprintf(`{"runtime": "python3", "command": "pyshop.app:application", "env": {"PYTHONPATH": %q}}`,
		filepath.Join(root, "plugins", "examples"))
	if code, body := adminCall(t, a, "PUT", "/v1/groups/py", testToken, req); code != 201 {
		t.Fatalf("creating the python group: %d %s", code, body)
	}
	var pyWorker string
	waitFor(t, 30*time.Second, "the python group's worker", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.Group == "py" && w.State == host.StateReady && w.App == "pyshop.app" {
				pyWorker = w.ID
				return true
			}
		}
		return false
	})
	// The monitor shows the mixed pool with each group's runtime.
	_, body := adminCall(t, a, "GET", "/v1/monitor", testToken, "")
	var view struct {
		Workers []struct {
			Group   string `json:"group"`
			Runtime string `json:"runtime"`
		} `json:"workers"`
	}
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatal(err)
	}
	runtimes := map[string]string{}
	for _, w := range view.Workers {
		runtimes[w.Group] = w.Runtime
	}
	if runtimes["py"] != "python3" || runtimes["web"] != "go-plugin" {
		t.Fatalf("the monitor's runtimes by group: %v, want py python3 and web go-plugin", runtimes)
	}

	b := newBrowser(t, a)
	b.do("POST", "/login?user=gus")
	tb := b.openTab("c")
	for i := 0; i < 3; i++ {
		tb.send(map[string]any{"op": "note", "text": fmt.Sprint("go", i)})
	}
	tb.drainUntil("notes", 3)
	goWorker := b.whoami().Worker
	for _, step := range []struct{ group, worker, text string }{{"py", pyWorker, "py"}, {"web", goWorker, "back"}} {
		code, body := adminCall(t, a, "POST", "/v1/users/gus/move", testToken, fmt.Sprintf(`{"group": %q}`, step.group))
		if code != 200 {
			t.Fatalf("move to %s: %d %s", step.group, code, body)
		}
		if w := b.whoami(); w.Worker != step.worker || w.User != "gus" {
			t.Fatalf("after the move to %s gus is %+v, want worker %s", step.group, w, step.worker)
		}
		ans := tb.send(map[string]any{"op": "note", "text": step.text})
		if ans.Worker != step.worker {
			t.Fatalf("the note went to %s, want %s", ans.Worker, step.worker)
		}
	}
	tb.drainUntil("notes", 5)
	for i, want := range []string{"go0", "go1", "go2", "py", "back"} {
		if got := tb.tree[fmt.Sprintf("note/%d", i)]; got != want {
			t.Fatalf("note %d = %v, want %q; tree %v", i, got, want, tb.tree)
		}
	}
	if len(tb.notices) != 0 {
		t.Fatalf("the page restarted on the way: %v", tb.notices)
	}
	for i := 1; i < len(tb.seqs); i++ {
		if tb.seqs[i] != tb.seqs[i-1]+1 {
			t.Fatalf("delta gap or duplicate across languages: %v", tb.seqs)
		}
	}
}

// SIGKILL of a Python worker: its slot starts a new process, the person
// keeps their login, and their page restarts clean with a notice.
func TestPythonKilledWorkerIsReplaced(t *testing.T) {
	root := pythonRepo(t)
	a := startAgentWith(t, "inprocess", 1, withPyshop(root))
	b := newBrowser(t, a)
	b.do("POST", "/login?user=kai")
	tb := b.openTab("c")
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 1)
	id := b.whoami().Worker
	killWorker(t, a, id)
	var how string
	waitFor(t, 30*time.Second, "a new Python process in the slot", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == id && w.State == host.StateReady && w.Incarnation == 2 {
				how = w.HowDied
				return true
			}
		}
		return false
	})
	if !strings.Contains(how, "killed") {
		t.Errorf("the slot says its worker %q", how)
	}
	if w := b.whoami(); w.User != "kai" || w.Worker != id {
		t.Fatalf("after the kill: %+v", w)
	}
	tb.ws.Close()
	if ans := tb.connect(); !ans.Opened.Resync || ans.Opened.Notice == "" {
		t.Fatalf("reopen after the kill: %+v", ans.Opened)
	}
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 1)
}

// A Python worker offers the framed channel as the Go SDK does: the host
// takes it, and the envelopes go on its socket, not the gRPC stream;
// STICKYD_WORKER_CHANNEL=grpc keeps them on the stream.
func TestPythonFramedChannel(t *testing.T) {
	root := pythonRepo(t)
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "framed", true: "grpc"}[keep], func(t *testing.T) {
			before := channel.ReadFramedStats().Envelopes
			a := startAgentWith(t, "subprocess", 1, withPycounter(root), func(c *agent.Config) {
				if keep {
					c.Groups[0].Plugin.Env["STICKYD_WORKER_CHANNEL"] = "grpc"
				}
			})
			b := newBrowser(t, a)
			b.do("POST", "/login?user=fay")
			tb := b.openTab("p")
			for range 20 {
				tb.send(map[string]any{"op": "inc"})
			}
			tb.drainUntil("count", 20)
			sent := channel.ReadFramedStats().Envelopes - before
			if keep && sent != 0 {
				t.Fatalf("%d envelopes went on a framed channel with STICKYD_WORKER_CHANNEL=grpc", sent)
			}
			if !keep && sent < 20 {
				t.Fatalf("%d envelopes went on the framed channel for 20 messages and their pulls", sent)
			}
		})
	}
}
