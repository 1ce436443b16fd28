package deploy

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/testagents"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// pythonExe is the interpreter the group hosts' Python workers run on (the
// default of a python3 bundle that names none).
const pythonExe = "/usr/bin/python3"

// TestNomadPythonBundles releases a Flask site as python3 bundles on real
// Nomad: plugins/examples/pynotes packed twice with the stickyd command
// line, release 1 with its vendored dependency (tally 1.0), release 2 with
// the test's own (tally 2.0), both carrying stickyd's Python SDK (the group
// hosts have no python_sdk). The servers come from jobs/stickyd.nomad; each
// group created with the CLI from a digest becomes a Nomad job of two
// hosts, which fetch the bundle from the archive and run it on the
// system's Python. While every person adds notes to their Flask session
// through the fronts Consul lists, one is sent ahead to release 2,
// everyone is promoted, and everyone is rolled back: no request fails, no
// note is lost or doubled, and everyone keeps their login. A bundle
// needing a Python the agents lack is refused at group creation.
func TestNomadPythonBundles(t *testing.T) {
	testagents.Require(t, "consul")
	nomadBin := testagents.Require(t, "nomad")
	if out, err := exec.Command(pythonExe, "-c", "import grpc, google.protobuf, cryptography, flask").CombinedOutput(); err != nil {
		t.Skipf("%s cannot run the Flask site in the Python worker (make deps installs python3-grpcio python3-protobuf python3-cryptography python3-flask): %v %s",
			pythonExe, err, out)
	}
	began := time.Now()
	root := t.TempDir()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	stickyd := benchkit.BuildStickyd(t)

	// Release 2's dependency: the test's own tally 2.0, installed in a
	// vendor directory as pip install --target would.
	example := filepath.Join(repo, "plugins", "examples", "pynotes")
	tally, err := os.ReadFile(filepath.Join(example, "vendor", "tally", "__init__.py"))
	if err != nil {
		t.Fatal(err)
	}
	vendor2 := filepath.Join(root, "vendor2")
	writeTree(t, vendor2, map[string]string{
		"tally/__init__.py":                 strings.Replace(string(tally), `__version__ = "1.0"`, `__version__ = "2.0"`, 1),
		"tally-2.0.dist-info/METADATA":      "Metadata-Version: 2.1\nName: tally\nVersion: 2.0\n",
		"tally-2.0.dist-info/INSTALLER":     "pip\n",
		"tally-2.0.dist-info/top_level.txt": "tally\n",
	})
	archiveDir := filepath.Join(root, "archive")
	source := []string{"-git", repo, "-allow-dirty"}
	if _, err := bundle.SourceFromGit(repo, true); err != nil {
		source = []string{"-source", "https://example.invalid/stickyd.git@" + strings.Repeat("0", 40) + ":plugins/examples/pynotes"}
	}
	pack := func(version, deps, requires string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "pynotes.tar.gz")
		args := append([]string{"bundle", "pack", "-app", filepath.Join(example, "app"), "-deps", deps,
			"-sdk", filepath.Join(repo, "plugins", "python"), "-wsgi", "pynotes.wsgi:application", "-requires-python", requires,
			"-name", "pynotes", "-version", version, "-o", file}, source...)
		out := run(t, nil, 0, stickyd, args...)
		run(t, nil, 0, stickyd, "bundle", "push", "-archive", archiveDir, file)
		return lastLine(out)
	}
	// Each release carries Flask and its dependencies, as a wheelhouse
	// installed with pip install --target would: copied here from the
	// system's packages, and imported from the bundle, not from there.
	vendor1 := filepath.Join(root, "vendor1")
	copyResolved(t, filepath.Join(example, "vendor"), vendor1)
	for _, dir := range []string{vendor1, vendor2} {
		copyFlask(t, dir)
	}
	r1 := pack("1.0.0", vendor1, ">=3.9")
	r2 := pack("2.0.0", vendor2, ">=3.9")
	future := pack("3.0.0", vendor2, ">=3.99")
	dist := serveDist(t, stickyd, archiveDir)

	consul := testagents.StartConsul(t)
	nomad := testagents.StartNomad(t, testagents.NomadOptions{ConsulAddr: consul.HTTPAddr})
	cc := consul.Client()
	dumpLogsOnFailure(t, nomad, "stickyd", "server")
	dumpLogsOnFailure(t, nomad, "stickyd-group-v1", "host")
	dumpLogsOnFailure(t, nomad, "stickyd-group-v2", "host")

	vars := filepath.Join(root, "site.vars.hcl")
	writeFile(t, vars, siteVars(dist, consul.HTTPAddr, nomad.Addr, ""))
	jobfile, _ := filepath.Abs("../../jobs/stickyd.nomad")
	putSecrets(t, nomad)
	run(t, nomad.Env(), 0, nomadBin, "job", "run", "-detach", "-var-file", vars, jobfile)
	servers := waitService(t, cc, "stickyd-server", 3, 3*time.Minute)
	admin := "http://" + servers[0]
	waitLeader(t, admin, 3, time.Minute)
	cli := func(code int, args ...string) string {
		return run(t, []string{"STICKYD_ADDR=" + admin, "STICKYD_TOKEN=" + adminToken}, code, stickyd, args...)
	}
	t.Logf("servers up at %v (%v)", servers, time.Since(began).Round(time.Second))

	// A bundle needing a Python the agents lack: refused, saying which.
	if out := cli(1, "group", "create", "-bundle", future, "v9"); !strings.Contains(out, "pynotes 3.0.0 needs Python >=3.99") {
		t.Fatalf("a group of a bundle needing Python >=3.99:\n%s", out)
	}

	// Release 1: a group job of two hosts, each running two Python workers.
	cli(0, "group", "create", "-bundle", r1, "-workers", "2", "v1")
	waitJob(t, nomad.Env(), "stickyd-group-v1", time.Minute)
	waitWorkers(t, admin, "v1", 4, 3*time.Minute)
	cli(0, "group", "promote", "v1")
	t.Logf("release 1 up (%v)", time.Since(began).Round(time.Second))

	// People log in through the fronts Consul lists and keep adding notes.
	fronts := waitService(t, cc, "stickyd-front", 3, time.Minute)
	ws := startWriters(t, fronts, 12)
	ws.waitRelease(t, r1, r2, nil)

	// Release 2, created from its digest.
	cli(0, "group", "create", "-bundle", r2, "-workers", "2", "v2")
	waitJob(t, nomad.Env(), "stickyd-group-v2", time.Minute)
	waitWorkers(t, admin, "v2", 4, 3*time.Minute)
	t.Logf("release 2 up (%v)", time.Since(began).Round(time.Second))

	// One person sent ahead.
	ahead := ws.all[0].user
	if out := cli(0, "group", "assign", "-user", ahead, "v2"); !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("group assign -user %s v2:\n%s", ahead, out)
	}
	ws.waitRelease(t, r1, r2, map[string]bool{ahead: true})

	// Everyone else promoted.
	out := cli(0, "group", "promote", "v2")
	if !strings.Contains(out, fmt.Sprintf("%d of %d people moved, 0 failed", len(ws.all)-1, len(ws.all)-1)) {
		t.Fatalf("group promote v2:\n%s", out)
	}
	t.Logf("promote: %s", lastLine(out))
	ws.waitRelease(t, r2, r1, nil)
	cli(0, "group", "unassign", ahead+"-v2")

	// Everyone rolled back.
	out = cli(0, "group", "rollback")
	if !strings.Contains(out, fmt.Sprintf("%d of %d people moved, 0 failed", len(ws.all), len(ws.all))) {
		t.Fatalf("group rollback:\n%s", out)
	}
	t.Logf("rollback: %s", lastLine(out))
	ws.waitRelease(t, r1, r2, nil)
	total := ws.stop(t)
	t.Logf("%d people added %d notes through 3 fronts across a send-ahead, a promotion and a rollback; 0 failed (%v)",
		len(ws.all), total, time.Since(began).Round(time.Second))

	// Release 2, emptied, is retired: its job is purged.
	cli(0, "group", "retire", "v2")
	waitNoJob(t, nomad, "stickyd-group-v2", time.Minute)

	// Down: the servers first, then the group's job.
	run(t, nomad.Env(), 0, nomadBin, "job", "stop", "-detach", "-purge", "stickyd")
	waitNoJob(t, nomad, "stickyd", 2*time.Minute)
	run(t, nomad.Env(), 0, nomadBin, "job", "stop", "-detach", "-purge", "stickyd-group-v1")
	waitNoJob(t, nomad, "stickyd-group-v1", 2*time.Minute)
	checkNoOrphans(t, nomad.Dir)
	checkNoPythonWorkers(t, nomad.Dir)
}

// flaskPackages are Flask and what it imports, as Debian installs them.
var flaskPackages = []string{"flask", "werkzeug", "jinja2", "markupsafe", "itsdangerous", "click", "blinker",
	"Flask-2.2.2.egg-info", "Werkzeug-2.2.2.egg-info", "Jinja2-3.1.2.egg-info", "MarkupSafe-2.1.2.egg-info",
	"itsdangerous-2.1.2.egg-info", "click-8.1.3.egg-info", "blinker-1.5.dist-info"}

// copyFlask copies Flask and its dependencies from the system's Python
// packages into dir.
func copyFlask(t *testing.T, dir string) {
	t.Helper()
	const system = "/usr/lib/python3/dist-packages"
	for _, name := range flaskPackages {
		src := filepath.Join(system, name)
		if _, err := os.Stat(src); err != nil {
			t.Fatalf("Flask's dependencies as Debian installs them (make deps installs python3-flask): %v", err)
		}
		copyResolved(t, src, filepath.Join(dir, name))
	}
}

// copyResolved copies the tree src to dst, a symbolic link as the file it
// names (as pip installs the files Debian links to shared copies; one that
// names nothing is left out).
func copyResolved(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(path) // follows a link
		if errors.Is(err, fs.ErrNotExist) && d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copying %s: %v", src, err)
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// noteAnswer is what pynotes answers: the user, the stickyd person and
// worker, the session's notes, and the release serving it.
type noteAnswer struct {
	User, Person, Worker string
	Notes                int
	Last                 string
	Bundle, Tally        string
	Flask                string // the directory Flask was imported from
}

// writer is a person at a front who adds a note to their Flask session
// again and again; each answer must name their login and hold one note
// more than the last.
type writer struct {
	user  string
	base  string
	http  *http.Client
	count int

	mu   sync.Mutex // guards last and err
	last noteAnswer
	err  error
}

func (w *writer) post(path string, form url.Values) (noteAnswer, error) {
	resp, err := w.http.PostForm(w.base+path, form)
	if err != nil {
		return noteAnswer{}, fmt.Errorf("%s: POST %s: %w", w.user, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var a noteAnswer
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &a) != nil {
		return noteAnswer{}, fmt.Errorf("%s: POST %s: HTTP %d %.300s", w.user, path, resp.StatusCode, body)
	}
	return a, nil
}

func (w *writer) state() (noteAnswer, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.err
}

// writers are everyone adding notes at once.
type writers struct {
	all  []*writer
	done chan struct{}
	wg   sync.WaitGroup
}

func startWriters(t *testing.T, fronts []string, n int) *writers {
	t.Helper()
	ws := &writers{done: make(chan struct{})}
	for i := range n {
		jar, _ := cookiejar.New(nil)
		w := &writer{user: fmt.Sprintf("writer-%02d", i), base: "http://" + fronts[i%len(fronts)],
			http: &http.Client{Jar: jar, Timeout: time.Minute}}
		a, err := w.post("/login", url.Values{"user": {w.user}})
		if err != nil || a.User != w.user {
			t.Fatalf("logging in %s: %+v %v", w.user, a, err)
		}
		ws.all = append(ws.all, w)
	}
	for _, w := range ws.all {
		ws.wg.Go(func() {
			for {
				select {
				case <-ws.done:
					return
				default:
				}
				text := fmt.Sprintf("%s-%d", w.user, w.count+1)
				a, err := w.post("/note", url.Values{"text": {text}})
				if err == nil && (a.Flask == "" || strings.HasPrefix(a.Flask, "/usr/lib/python3")) {
					err = fmt.Errorf("%s: Flask was imported from the system (%s), not from the bundle", w.user, a.Flask)
				}
				if err == nil && (a.User != w.user || a.Person != w.user || a.Notes != w.count+1 || a.Last != text) {
					err = fmt.Errorf("%s: note %d answered %+v: a lost login, or a lost or doubled note", w.user, w.count+1, a)
				}
				w.mu.Lock()
				w.last, w.err = a, err
				w.mu.Unlock()
				if err != nil {
					return
				}
				w.count++
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
	t.Cleanup(ws.halt)
	return ws
}

func (ws *writers) halt() {
	select {
	case <-ws.done:
	default:
		close(ws.done)
	}
	ws.wg.Wait()
}

// waitRelease waits until every writer's answers come from release want,
// but those in other from release alt, failing on the first failed note.
func (ws *writers) waitRelease(t *testing.T, want, alt string, other map[string]bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		behind := ""
		for _, w := range ws.all {
			a, err := w.state()
			if err != nil {
				t.Fatalf("a note failed: %v", err)
			}
			r := want
			if other[w.user] {
				r = alt
			}
			if a.Bundle != r && behind == "" {
				behind = fmt.Sprintf("%s answered by %s (%s), want %s", w.user, a.Worker, a.Bundle, r)
			}
		}
		if behind == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not everyone on their release: %s", behind)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the writing and checks each session holds every note; it
// returns how many were added.
func (ws *writers) stop(t *testing.T) int {
	t.Helper()
	ws.halt()
	total := 0
	for _, w := range ws.all {
		if _, err := w.state(); err != nil {
			t.Fatalf("a note failed: %v", err)
		}
		resp, err := w.http.Get(w.base + "/whoami")
		if err != nil {
			t.Fatal(err)
		}
		var a noteAnswer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || a.User != w.user || a.Notes != w.count {
			t.Fatalf("%s at the end: %+v (%v), want %d notes and the login", w.user, a, err, w.count)
		}
		total += w.count
	}
	return total
}

// checkNoPythonWorkers waits (bounded) until no Python worker of a bundle
// unpacked under dir (Nomad's data directory) runs: checkNoOrphans finds
// processes by their executable, and the workers' is the system's Python.
func checkNoPythonWorkers(t *testing.T, dir string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var left []string
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err != nil || !strings.Contains(string(cmdline), "stickyd.worker") {
				continue
			}
			environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if strings.Contains(string(environ), "PYTHONPATH="+dir) {
				left = append(left, e.Name()+": "+strings.ReplaceAll(string(cmdline), "\x00", " "))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Python workers left after tear-down:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
