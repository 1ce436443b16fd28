package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
)

// A Python request that holds the GIL for 12–24 s while it computes (a
// backtracking regular expression) completes, and its worker is not killed
// for silence although it answers no probe meanwhile: the host sees its
// process compute. A worker that neither answers nor computes (stopped) is
// still killed after probe.misses.
func TestBusyPythonWorkerIsNotKilled(t *testing.T) {
	root := pythonRepo(t)
	a := startAgentWith(t, "subprocess", 1, func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		g := c.Groups[0]
		g.Builtin = ""
		g.Plugin = &agent.PluginConfig{Runtime: agent.RuntimePython3, Command: "busyapp:application",
			Env: map[string]string{"PYTHONPATH": filepath.Join(root, "test", "e2e", "testdata", "pybusy")}}
		// Three probes of 250 ms: old hosts killed a worker silent for 750 ms.
		c.Probe = &agent.ProbeConfig{Interval: "250ms", Misses: 3}
		// The request may take twice what it was sized for (the regular
		// expression's time doubles with each character).
		c.Front.FrameTimeout = "90s"
	})
	b := newBrowser(t, a)
	b.http.Timeout = 90 * time.Second
	code, body := b.do("GET", "/spin?s=12")
	if code != 200 {
		t.Fatalf("the busy request: %d %s", code, body)
	}
	var spin struct {
		N    int
		Took float64
		Pid  int
	}
	if err := json.Unmarshal([]byte(body), &spin); err != nil {
		t.Fatal(err, body)
	}
	// Sized for 12–24 s; the machine's load moves it either way. Ten seconds
	// is over thirteen times the 750 ms old hosts allowed.
	if spin.Took < 10 {
		t.Fatalf("the regular expression held the GIL %.1f s only (n=%d): the test wants at least 10 s", spin.Took, spin.N)
	}
	t.Logf("held the GIL %.1f s (n=%d)", spin.Took, spin.N)
	ws := a.Pool().Workers()
	if len(ws) != 1 || ws[0].Pid != spin.Pid || ws[0].HowDied != "" || ws[0].Incarnation != 1 {
		t.Fatalf("after the busy request the worker is %+v, want the same process, never killed", ws)
	}

	// Stopped: no answer, no computing. Killed for silence.
	if err := syscall.Kill(spin.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the stopped worker killed for silence", func() bool {
		ws := a.Pool().Workers()
		return len(ws) == 1 && strings.Contains(ws[0].HowDied, "killed for silence")
	})
}

// A Python app that cannot be imported says why: the worker's traceback
// reaches the operator in the launch error, not go-plugin's guess at the
// architecture; an application factory ("MODULE:factory()") is accepted.
func TestPythonAppThatCannotBeImportedSaysWhy(t *testing.T) {
	root := pythonRepo(t)
	cfg := &agent.Config{
		LogLevel:  "warn",
		Name:      "e2e",
		PythonSDK: filepath.Join(root, "plugins", "python"),
		Front:     &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:     &agent.AdminConfig{Address: "127.0.0.1:0", Token: testToken},
		Server:    &agent.ServerConfig{},
		Groups: []*agent.GroupConfig{{Name: "web", Workers: 1, Plugin: &agent.PluginConfig{Runtime: agent.RuntimePython3,
			Command: "busyapp_missing:application", Env: map[string]string{"PYTHONPATH": filepath.Join(root, "test", "e2e", "testdata", "pybusy")}}}},
	}
	a, err := agent.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = a.Start(ctx)
	defer a.Shutdown(context.Background())
	if err == nil {
		t.Fatal("an agent whose only app cannot be imported started")
	}
	t.Logf("the start says: %v", err)
	if !strings.Contains(err.Error(), "No module named 'busyapp_missing'") {
		t.Fatalf("the start's error does not say why: %v", err)
	}

	// A factory.
	b := startAgentWith(t, "subprocess", 1, func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		g := c.Groups[0]
		g.Builtin = ""
		g.Plugin = &agent.PluginConfig{Runtime: agent.RuntimePython3, Command: "busyapp:create_app('factory')",
			Env: map[string]string{"PYTHONPATH": filepath.Join(root, "test", "e2e", "testdata", "pybusy")}}
	})
	code, body := newBrowser(t, b).do("GET", "/made-by")
	if code != 200 || !strings.Contains(body, `"factory"`) {
		t.Fatalf("the factory's app: %d %s", code, body)
	}
}
