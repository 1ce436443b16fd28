package e2e

import (
	"archive/zip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/bundle"
)

// Python releases as bundles (issue 44): the Flask site of
// plugins/examples/pynotes (Debian's Flask) packed twice with the real
// command line as python3 bundles, each with its own dependency (the test's
// own pure-Python package tally, 1.0 and 2.0, from a wheelhouse) and
// stickyd's Python SDK, pushed to a directory archive; one real `stickyd
// agent` process runs release 1 from the archive (no python_sdk: the
// bundle's SDK serves) and creates a group of release 2 with the CLI. While
// everyone logged in keeps adding notes to their Flask session, one person
// is sent ahead to release 2, then everyone is promoted, then rolled back:
// no request fails, no note is lost or doubled, and everyone keeps their
// login. A bundle needing a Python this agent lacks is refused at group
// creation.
func TestPythonBundleRelease(t *testing.T) {
	root := pythonRepo(t)
	if out, err := exec.Command(pythonExe, "-c", "import flask").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import flask (make deps installs python3-flask): %v %s", pythonExe, err, out)
	}
	began := time.Now()
	example := filepath.Join(root, "plugins", "examples", "pynotes")
	tally, err := os.ReadFile(filepath.Join(example, "vendor", "tally", "__init__.py"))
	if err != nil {
		t.Fatal(err)
	}
	wheels := map[string]string{}
	for _, v := range []string{"1.0", "2.0"} {
		wheels[v] = t.TempDir()
		src := strings.Replace(string(tally), `__version__ = "1.0"`, `__version__ = "`+v+`"`, 1)
		writeTallyWheel(t, wheels[v], v, src)
	}
	archive := t.TempDir()
	pack := func(version, tallyVersion, requires string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "pynotes.tar.gz")
		args := []string{"bundle", "pack", "-app", filepath.Join(example, "app"), "-wheels", wheels[tallyVersion],
			"-sdk", filepath.Join(root, "plugins", "python"), "-wsgi", "pynotes.wsgi:application", "-requires-python", requires,
			"-name", "pynotes", "-version", version, "-arg", "--threads", "-arg", "4", "-o", file}
		if _, err := bundle.SourceFromGit(root, true); err == nil {
			args = append(args, "-git", root, "-allow-dirty")
		} else {
			args = append(args, "-source", "https://example.invalid/stickyd.git@"+strings.Repeat("0", 40)+":plugins/examples/pynotes")
		}
		out, code := runTool(t, args...)
		if code != 0 {
			t.Fatalf("stickyd %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		digest := lines[len(lines)-1]
		if out, code := runTool(t, "bundle", "verify", file); code != 0 || !strings.Contains(out, "Runtime   = python3") ||
			!strings.Contains(out, "WSGI      = pynotes.wsgi:application") || !strings.Contains(out, "Python    = "+requires) {
			t.Fatalf("stickyd bundle verify: exit %d\n%s", code, out)
		}
		if out, code := runTool(t, "bundle", "push", "-archive", archive, file); code != 0 {
			t.Fatalf("stickyd bundle push: exit %d\n%s", code, out)
		}
		return digest
	}
	r1, r2 := pack("1.0.0", "1.0", ">=3.9"), pack("2.0.0", "2.0", ">=3.9")
	future := pack("3.0.0", "2.0", ">=3.99")
	t.Logf("packed and pushed 3 bundles in %v", time.Since(began).Round(time.Millisecond))

	p := &proc{t: t, dir: t.TempDir(), front: freePort(t), admin: freePort(t)}
	data := filepath.Join(p.dir, "data")
	cfg := fmt.Sprintf(`
name      = "pybundle"
data_dir  = %q
log_level = "info"
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
bundles { archive = %q }
group "v1" {
  workers = 2
  bundle  = %q
}
`, data, freePort(t), freePort(t), p.front, p.admin, testToken, archive, r1)
	if err := os.WriteFile(filepath.Join(p.dir, "stickyd.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()

	// Release 1's workers: the system's Python running the Python worker
	// on the bundle's app, named and versioned as the bundle, with the
	// bundle's read-only app and dependencies on PYTHONPATH (and nothing
	// of this checkout: the SDK is the bundle's copy).
	hex1 := strings.TrimPrefix(r1, "sha256:")
	cached := filepath.Join(data, "bundles", hex1)
	for _, w := range pyWorkers(t, p, "v1") {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid))
		if err != nil {
			t.Fatal(err)
		}
		argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		want := []string{pythonExe, "-m", "stickyd.worker", "pynotes.wsgi:application", "--name", "pynotes", "--version", "1.0.0", "--threads", "4"}
		if !slices.Equal(argv, want) {
			t.Fatalf("worker %s runs %q, want %q", w.ID, argv, want)
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", w.Pid))
		if err != nil {
			t.Fatal(err)
		}
		wantPath := "PYTHONPATH=" + filepath.Join(cached, "app") + ":" + filepath.Join(cached, "deps")
		if !slices.Contains(strings.Split(string(environ), "\x00"), wantPath) {
			t.Fatalf("worker %s's environment lacks %s:\n%s", w.ID, wantPath, strings.ReplaceAll(string(environ), "\x00", "\n"))
		}
	}
	if fi, err := os.Stat(filepath.Join(cached, "app", "pynotes")); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the cached app is not read-only: %v %v", fi.Mode(), err)
	}

	// A bundle needing a Python this agent does not have is refused when
	// its group is created, saying which.
	if out, code := runCLI(t, p.admin, "group", "create", "-bundle", future, "v9"); code != 1 ||
		!strings.Contains(out, "pynotes 3.0.0 needs Python >=3.99 (its requires_python); the system's Python here, /usr/bin/python3, is Python 3.") {
		t.Fatalf("a group of a bundle needing Python >=3.99: exit %d\n%s", code, out)
	}
	// Release 2 is a group of the catalog, from its digest.
	if out, code := runCLI(t, p.admin, "group", "create", "-bundle", r2, "-workers", "2", "v2"); code != 0 {
		t.Fatalf("stickyd group create v2: exit %d\n%s", code, out)
	}
	waitFor(t, 60*time.Second, "group v2's 2 workers ready", func() bool { return len(pyWorkers(t, p, "v2")) == 2 })
	// The catalog says what runs it: the bundle's runtime.
	if code, body := adminCallAt(t, p.admin, "GET", "/v1/groups", testToken); code != 200 || !regexp.MustCompile(`"name":"v2"[^}]*"runtime":"python3"`).MatchString(body) {
		t.Fatalf("GET /v1/groups: the python3 bundle's group: %d %.600s", code, body)
	}
	// A go-plugin runtime asked for a python3 bundle is refused.
	if out, code := runCLI(t, p.admin, "group", "create", "-bundle", r2, "-runtime", "go-plugin", "v8"); code != 1 || !strings.Contains(out, "is a python3 bundle, not go-plugin") {
		t.Fatalf("a go-plugin group of a python3 bundle: exit %d\n%s", code, out)
	}

	// Six people log in; everyone keeps adding notes from now on.
	const people = 6
	notes := make([]*noteTaker, people)
	for i := range notes {
		notes[i] = &noteTaker{user: fmt.Sprintf("p%d", i), b: procBrowser(t, p)}
		notes[i].login(t)
		// The login names the person once it is answered.
		if w := notes[i].who(t); w.Tally != "1.0" || w.Bundle != r1 || w.User != notes[i].user || w.Person != notes[i].user {
			t.Fatalf("%s after the login: %+v, want release 1 (%s), logged in and the person named", notes[i].user, w, r1)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range notes {
		wg.Go(func() { n.typeUntil(stop) })
	}
	typing := func(d time.Duration) {
		t.Helper()
		time.Sleep(d)
		for _, n := range notes {
			if err := n.failure(); err != nil {
				t.Fatalf("while typing: %v", err)
			}
		}
	}
	release := func(n *noteTaker) string {
		w := n.who(t)
		if w.User != n.user || w.Person != n.user {
			t.Fatalf("%s lost their login: %+v", n.user, w)
		}
		switch {
		case w.Bundle == r1 && w.Tally == "1.0" && strings.HasPrefix(w.Worker, "v1-"):
			return "1"
		case w.Bundle == r2 && w.Tally == "2.0" && strings.HasPrefix(w.Worker, "v2-"):
			return "2"
		}
		t.Fatalf("%s is served by %+v: neither release", n.user, w)
		return ""
	}
	everyone := func(want string, except ...string) {
		t.Helper()
		for _, n := range notes {
			w := want
			if slices.Contains(except, n.user) {
				w = map[string]string{"1": "2", "2": "1"}[want]
			}
			if got := release(n); got != w {
				t.Fatalf("%s is on release %s, want %s", n.user, got, w)
			}
		}
	}
	typing(300 * time.Millisecond)
	everyone("1")

	// p0 is sent ahead to release 2, with their session.
	if out, code := runCLI(t, p.admin, "group", "assign", "-user", "p0", "v2"); code != 0 || !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("stickyd group assign -user p0 v2: exit %d\n%s", code, out)
	}
	typing(300 * time.Millisecond)
	everyone("1", "p0")

	// Everyone else follows.
	out, code := runCLI(t, p.admin, "group", "promote", "v2")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d of %d people moved, 0 failed", people-1, people-1)) {
		t.Fatalf("stickyd group promote v2: exit %d\n%s", code, tail(out))
	}
	typing(300 * time.Millisecond)
	everyone("2")
	if w := (&noteTaker{user: "newcomer", b: procBrowser(t, p)}).who(t); w.Bundle != r2 {
		t.Fatalf("a newcomer after the promotion: %+v", w)
	}
	// The rule that sent p0 ahead has done its work.
	if out, code := runCLI(t, p.admin, "group", "unassign", "p0-v2"); code != 0 {
		t.Fatalf("stickyd group unassign p0-v2: exit %d\n%s", code, out)
	}

	// And everyone goes back (the newcomer too).
	out, code = runCLI(t, p.admin, "group", "rollback")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("%d of %d people moved, 0 failed", people+1, people+1)) {
		t.Fatalf("stickyd group rollback: exit %d\n%s", code, tail(out))
	}
	typing(300 * time.Millisecond)
	everyone("1")
	close(stop)
	wg.Wait()
	total := 0
	for _, n := range notes {
		if err := n.failure(); err != nil {
			t.Fatal(err)
		}
		w := n.who(t)
		if w.Notes != n.count || w.Last != fmt.Sprintf("%s-%d", n.user, n.count) {
			t.Fatalf("%s's session holds %d notes (last %q), %d were added", n.user, w.Notes, w.Last, n.count)
		}
		total += n.count
	}
	t.Logf("%d people added %d notes through a send-ahead, a promotion and a rollback of python3 bundles; 0 failed (%v in all)",
		people, total, time.Since(began).Round(time.Millisecond))
}

// runTool runs the stickyd command line (this test binary) with args as
// they are.
func runTool(t *testing.T, args ...string) (string, int) {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), agentEnv+"=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// writeTallyWheel writes the wheel of tally at version, its module src,
// into dir, as `pip wheel` would have (a pure-Python py3-none-any wheel).
func writeTallyWheel(t *testing.T, dir, version, src string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "tally-"+version+"-py3-none-any.whl"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	info := "tally-" + version + ".dist-info/"
	for _, e := range []struct{ name, body string }{
		{"tally/__init__.py", src},
		{info + "METADATA", "Metadata-Version: 2.1\nName: tally\nVersion: " + version + "\n"},
		{info + "WHEEL", "Wheel-Version: 1.0\nGenerator: stickyd-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{info + "top_level.txt", "tally\n"},
		{info + "RECORD", ""},
	} {
		w, err := zw.Create(e.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(w, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

type pyWorker struct {
	ID, Group, State string
	Pid              int
}

// pyWorkers are the ready workers of group.
func pyWorkers(t *testing.T, p *proc, group string) []pyWorker {
	t.Helper()
	code, body := adminCallAt(t, p.admin, "GET", "/v1/workers", testToken)
	var all []pyWorker
	if code != 200 || json.Unmarshal([]byte(body), &all) != nil {
		t.Fatalf("GET /v1/workers: %d %.300s", code, body)
	}
	var out []pyWorker
	for _, w := range all {
		if w.Group == group && w.State == "ready" {
			out = append(out, w)
		}
	}
	return out
}

// notesWho is what pynotes answers: the user, the stickyd person and
// worker, the session's notes, and the release serving it.
type notesWho struct {
	User, Person, Worker string
	Notes                int
	Last                 string
	Bundle, Tally        string
}

// noteTaker is a person adding notes to their Flask session, each answer
// checked: their login, and one note more than the last.
type noteTaker struct {
	user  string
	b     *browser
	count int // notes added (owned by typeUntil once it runs)
	mu    sync.Mutex
	err   error
}

func (n *noteTaker) login(t *testing.T) {
	t.Helper()
	if w, err := n.post("/login", url.Values{"user": {n.user}}); err != nil || w.User != n.user {
		t.Fatalf("logging in %s: %+v %v", n.user, w, err)
	}
}

func (n *noteTaker) who(t *testing.T) notesWho {
	t.Helper()
	code, body := n.b.do("GET", "/whoami")
	var w notesWho
	if code != 200 || json.Unmarshal([]byte(body), &w) != nil {
		t.Fatalf("%s: GET /whoami: %d %.300s", n.user, code, body)
	}
	return w
}

func (n *noteTaker) post(path string, form url.Values) (notesWho, error) {
	resp, err := n.b.http.PostForm(n.b.base+path, form)
	if err != nil {
		return notesWho{}, fmt.Errorf("%s: POST %s: %w", n.user, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var w notesWho
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &w) != nil {
		return notesWho{}, fmt.Errorf("%s: POST %s: %d %.300s", n.user, path, resp.StatusCode, body)
	}
	return w, nil
}

// typeUntil adds notes until stop closes or one fails.
func (n *noteTaker) typeUntil(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		text := fmt.Sprintf("%s-%d", n.user, n.count+1)
		w, err := n.post("/note", url.Values{"text": {text}})
		if err == nil && (w.User != n.user || w.Notes != n.count+1 || w.Last != text) {
			err = fmt.Errorf("%s: note %d answered %+v: a lost login, or a lost or doubled note", n.user, n.count+1, w)
		}
		if err != nil {
			n.mu.Lock()
			n.err = err
			n.mu.Unlock()
			return
		}
		n.count++
		time.Sleep(5 * time.Millisecond)
	}
}

func (n *noteTaker) failure() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.err
}
