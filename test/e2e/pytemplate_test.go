package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// tmplWho is what the template fixture's app answers.
type tmplWho struct {
	Rows, Pid, Ppid int
	Worker, User    string
	Notes           []string
}

func (b *browser) tmplWho(path string) tmplWho {
	b.t.Helper()
	code, body := b.do("GET", path)
	var w tmplWho
	if code != 200 || json.Unmarshal([]byte(body), &w) != nil {
		b.t.Fatalf("GET %s: %d %.300s", path, code, body)
	}
	return w
}

// A python3 group with a template (issue 44): the template imports the app
// and runs its build step once (100,000 rows); both workers are forks of
// it (their parent is the template, and they serve the rows without
// building); a person moves between the forks with their session. A
// template that dies takes no worker with it, and the next worker's start
// builds it again; a worker that dies is forked again.
func TestPythonTemplateForks(t *testing.T) {
	root := pythonRepo(t)
	data := t.TempDir()
	a := startAgentWith(t, "inprocess", 2, withDataDir(t), func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		g := c.Groups[0]
		g.Builtin = ""
		g.Plugin = &agent.PluginConfig{Runtime: agent.RuntimePython3, Command: "tmplapp:application",
			Template: &agent.PluginTemplate{Build: "tmplapp:build"},
			Env:      map[string]string{"PYTHONPATH": filepath.Join(root, "test", "e2e", "testdata", "pytemplate"), "STICKYD_SITE_DATA": data}}
	})
	builds := func() []string {
		b, _ := os.ReadFile(filepath.Join(data, "builds"))
		return strings.Fields(string(b))
	}
	if got := builds(); len(got) != 1 {
		t.Fatalf("the build ran %d times for 2 workers, want once: %v", len(got), got)
	}
	template := builds()[0]
	workers := a.Pool().Workers()
	if len(workers) != 2 {
		t.Fatalf("%d workers", len(workers))
	}
	for _, w := range workers {
		if ppid := parentOf(t, w.Pid); ppid != template {
			t.Fatalf("worker %s (pid %d) has parent %s, want the template %s", w.ID, w.Pid, ppid, template)
		}
	}
	// The admin API and the monitor show each worker's template.
	_, body := adminCall(t, a, "GET", "/v1/workers", testToken, "")
	if !strings.Contains(body, `"template":{"pid":`+template+`,"builds":1}`) {
		t.Fatalf("GET /v1/workers does not show the template %s: %.600s", template, body)
	}
	_, body = adminCall(t, a, "GET", "/v1/monitor/local", testToken, "")
	if strings.Count(body, `"template":{"pid":`+template+`,"builds":1}`) != 2 {
		t.Fatalf("the monitor does not show the template %s on both workers: %.800s", template, body)
	}

	b := newBrowser(t, a)
	b.tmplWho("/login?user=tia")
	w := b.tmplWho("/note?first")
	if w.Rows != 100_000 || w.User != "tia" {
		t.Fatalf("a fork's answer: %+v", w)
	}
	to := otherWorker(a.Pool().Ready(), w.Worker)
	if code, body := adminCall(t, a, "POST", "/v1/users/tia/move", testToken, `{"to":"`+to+`"}`); code != 200 || !strings.Contains(body, `"outcome":"moved"`) {
		t.Fatalf("moving tia to %s: %d %s", to, code, body)
	}
	if moved := b.tmplWho("/note?second"); moved.Worker != to || moved.Rows != 100_000 || strings.Join(moved.Notes, ",") != "first,second" {
		t.Fatalf("after the move: %+v", moved)
	}

	// The template keeps one spare fork ready (the host uses AutoMTLS):
	// its child that is no worker.
	var tpid int
	if _, err := fmt.Sscan(template, &tpid); err != nil {
		t.Fatal(err)
	}
	var spare []int
	waitFor(t, 20*time.Second, "the template's spare fork", func() bool {
		spare = nil
		for _, c := range childrenOf(t, tpid) {
			if !slices.ContainsFunc(a.Pool().Workers(), func(w host.WorkerInfo) bool { return w.Pid == c }) {
				spare = append(spare, c)
			}
		}
		return len(spare) == 1
	})

	// The template dies: the workers go on, and the spare goes with it.
	if err := syscall.Kill(tpid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the spare fork to exit with its template", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", spare[0]))
		return err != nil || strings.Contains(procState(spare[0]), "Z")
	})
	time.Sleep(300 * time.Millisecond)
	if again := b.tmplWho("/note?third"); again.Worker != to || len(again.Notes) != 3 {
		t.Fatalf("after the template died: %+v", again)
	}
	// A worker dies: its replacement is forked from a template built again.
	var victim host.WorkerInfo
	for _, w := range a.Pool().Workers() {
		if w.ID != to {
			victim = w
		}
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the worker forked again", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == victim.ID && w.State == host.StateReady && w.Pid != victim.Pid && w.Pid != 0 {
				return len(builds()) == 2 && parentOf(t, w.Pid) == builds()[1]
			}
		}
		return false
	})
}

// childrenOf is the pids of p's children, as /proc says them.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	var out []int
	for f := range strings.FieldsSeq(string(b)) {
		var c int
		if _, err := fmt.Sscan(f, &c); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// procState is the State line of /proc/PID/status ("" once it is gone).
func procState(pid int) string {
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// parentOf is the pid of p's parent, as /proc says it.
func parentOf(t *testing.T, pid int) string {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// A template whose host asks for plain channels (plain_channel = true)
// keeps no spare: each worker is forked when asked, and serves.
func TestPythonTemplateForksPlainChannel(t *testing.T) {
	root := pythonRepo(t)
	data := t.TempDir()
	a := startAgentWith(t, "inprocess", 2, withDataDir(t), func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		g := c.Groups[0]
		g.Builtin = ""
		g.Plugin = &agent.PluginConfig{Runtime: agent.RuntimePython3, Command: "tmplapp:application", PlainChannel: true,
			Template: &agent.PluginTemplate{Build: "tmplapp:build"},
			Env:      map[string]string{"PYTHONPATH": filepath.Join(root, "test", "e2e", "testdata", "pytemplate"), "STICKYD_SITE_DATA": data}}
	})
	b, _ := os.ReadFile(filepath.Join(data, "builds"))
	var tpid int
	if _, err := fmt.Sscan(string(b), &tpid); err != nil {
		t.Fatal(err)
	}
	workers := a.Pool().Workers()
	time.Sleep(500 * time.Millisecond) // a spare, if one were made, would be there by now
	if kids := childrenOf(t, tpid); len(kids) != len(workers) {
		t.Fatalf("the template has %d children (%v) for %d workers: a spare was forked for plain channels", len(kids), kids, len(workers))
	}
	br := newBrowser(t, a)
	br.tmplWho("/login?user=pia")
	if w := br.tmplWho("/note?first"); w.Rows != 100_000 || w.User != "pia" || w.Ppid != tpid {
		t.Fatalf("a fork's answer over a plain channel: %+v", w)
	}
}
