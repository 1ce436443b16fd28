package command

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

var (
	servingRE = regexp.MustCompile(`stickyd is serving on http://(\S+)`)
	cliRE     = regexp.MustCompile(`export STICKYD_ADDR=http://(\S+) STICKYD_TOKEN=(\S+)`)
)

// devInstance is one stickyd dev running in this process.
type devInstance struct {
	front, admin, token string
}

// startDev runs stickyd dev with args until the test ends, and returns the
// addresses and token it printed.
func startDev(t *testing.T, args ...string) devInstance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ui := cli.NewMockUi()
	builtins := map[string]agent.Builtin{
		"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1"}),
	}
	cmd := &DevCommand{Meta: Meta{UI: ui, Builtins: builtins, Context: ctx}}
	done := make(chan int, 1)
	go func() {
		done <- cmd.Run(append([]string{"-app", "counter", "-workers", "1", "-log-level", "warn"}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("dev %v exited %d: %s", args, code, ui.ErrorWriter.String())
			}
		case <-time.After(30 * time.Second):
			t.Errorf("dev %v did not stop", args)
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := ui.OutputWriter.String()
		s, c := servingRE.FindStringSubmatch(out), cliRE.FindStringSubmatch(out)
		if s != nil && c != nil {
			return devInstance{front: s[1], admin: c[1], token: c[2]}
		}
		select {
		case code := <-done:
			done <- code
			t.Fatalf("dev %v exited %d before serving: %s %s", args, code, out, ui.ErrorWriter.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dev %v printed no addresses in time: %q", args, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("X-Stickyd-Token", token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Two stickyd dev instances run side by side, each on its own front
// address, as two `make run ADDR=...` would: the admin API takes a free
// port of the front's host by default, so they do not clash, and each
// answers on its front and on its admin API with its own token.
func TestTwoDevInstancesSideBySide(t *testing.T) {
	t.Setenv("STICKYD_TOKEN", "")
	a := startDev(t, "-addr", "127.0.0.1:0")
	b := startDev(t, "-addr", "127.0.0.1:0")
	if a.admin == b.admin || a.front == b.front {
		t.Fatalf("two instances share an address: %+v %+v", a, b)
	}
	for _, d := range []devInstance{a, b} {
		if !strings.HasPrefix(d.admin, "127.0.0.1:") || strings.HasSuffix(d.admin, ":4650") {
			t.Fatalf("admin API on %s, want a free port of the front's host", d.admin)
		}
		if code, body := get(t, "http://"+d.front+"/_stickyd/health", ""); code != 200 {
			t.Fatalf("front %s: %d %s", d.front, code, body)
		}
		if code, body := get(t, "http://"+d.admin+"/v1/workers", d.token); code != 200 || !strings.Contains(body, "counter") {
			t.Fatalf("admin API %s: %d %s", d.admin, code, body)
		}
	}
	// Each token is its own instance's.
	if code, _ := get(t, "http://"+a.admin+"/v1/workers", b.token); code != 403 {
		t.Fatalf("a's admin API took b's token: %d", code)
	}
}

// -admin-addr puts the admin API where it is told.
func TestDevAdminAddr(t *testing.T) {
	t.Setenv("STICKYD_TOKEN", "")
	ln := freeport.Addr(t)
	d := startDev(t, "-addr", "127.0.0.1:0", "-admin-addr", ln)
	if d.admin != ln {
		t.Fatalf("admin API on %s, want %s", d.admin, ln)
	}
}

// With -plugin, the engine image goes to a directory of this instance that
// is gone at exit, or to $STICKYD_TEMPLATE_DIR, kept.
func TestDevTemplateDir(t *testing.T) {
	t.Setenv(worker.TemplateDirEnv, "")
	t.Setenv("TMPDIR", t.TempDir())
	dir, cleanup, err := devTemplateDir("demo")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dir, os.Getenv("TMPDIR")) || filepath.Base(dir) != "demo" || strings.Contains(dir, "stickyd-templates") {
		t.Fatalf("template dir %s", dir)
	}
	other, cleanupOther, err := devTemplateDir("demo")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanupOther()
	if other == dir {
		t.Fatalf("two instances share %s", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	cleanup()
	if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
		t.Fatalf("%s left after exit: %v", filepath.Dir(dir), err)
	}
	mine := t.TempDir()
	t.Setenv(worker.TemplateDirEnv, mine)
	dir, cleanup, err = devTemplateDir("demo")
	if err != nil || dir != mine {
		t.Fatalf("with $%s set: %s %v", worker.TemplateDirEnv, dir, err)
	}
	cleanup()
	if _, err := os.Stat(mine); err != nil {
		t.Fatalf("the user's template dir removed: %v", err)
	}
}

// stickyd dev -plugin names its group after the worker binary, so that
// user move -group and the monitor say the app's name.
func TestDevPluginGroupName(t *testing.T) {
	for plugin, want := range map[string]string{
		"bin/taskboard-worker": "taskboard",
		"/x/demo-worker":       "demo",
		"./shop":               "shop",
		"bin/my app-worker":    "demo",
		"bin/-worker":          "demo",
	} {
		if got := pluginGroup(plugin); got != want {
			t.Errorf("pluginGroup(%q) = %q, want %q", plugin, got, want)
		}
	}
}
