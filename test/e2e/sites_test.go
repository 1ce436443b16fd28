package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/test/internal/sites"
)

// Existing sites aboard (issue 43): a Django site and the Flask tutorial's
// app (test/sites), unchanged but for the adapters' lines of
// docs/existing-apps.md, each under a real `stickyd agent` process with a
// 2-worker python3 group, driven over HTTP as a browser would (a cookie
// jar; Django's CSRF token from its login form). The person is the site's
// user: the admin API finds them by username, a second browser logging in
// as the same user joins them on their worker with its session, `stickyd
// user move` moves them with both sessions, and after SIGTERM and a new
// start both browsers are still logged in: the sessions lived in the
// person's tree, not in the workers' memory. Logging out keeps the person
// while another browser is logged in, and forgets them with the last one.

// existingSite is one existing site and how a browser uses it.
type existingSite struct {
	dir     string // under test/sites: the PYTHONPATH of the group
	command string // MODULE:CALLABLE
	modules string // what /usr/bin/python3 must import to run it
	// setup prepares the site's data directory before the agent starts.
	setup  func(t *testing.T, dir, data string)
	login  func(b *siteBrowser, user, password string)
	note   func(b *siteBrowser, text string) []string
	logout func(b *siteBrowser)
}

func TestSitesDjango(t *testing.T) {
	runSite(t, existingSite{
		dir:     "django_site",
		command: "site_project.wsgi:application",
		modules: "django",
		setup:   djangoSetup,
		login:   djangoLogin,
		note: func(b *siteBrowser, text string) []string {
			b.t.Helper()
			return b.postNote(url.Values{"text": {text}}, map[string]string{"X-CSRFToken": b.cookie("csrftoken")})
		},
		logout: func(b *siteBrowser) {
			b.t.Helper()
			if code, body := b.do("GET", "/admin/logout/"); code != 200 {
				b.t.Fatalf("logging out: %d %.300s", code, body)
			}
		},
	})
}

// djangoLogin logs in through the admin's login form, with its CSRF token.
func djangoLogin(b *siteBrowser, user, password string) {
	b.t.Helper()
	code, body := b.do("GET", "/admin/login/?next=/admin/")
	m := regexp.MustCompile(`name="csrfmiddlewaretoken" value="([^"]+)"`).FindStringSubmatch(body)
	if code != 200 || m == nil {
		b.t.Fatalf("the login form: %d %.300s", code, body)
	}
	code, loc := b.post("/admin/login/?next=/admin/", url.Values{"csrfmiddlewaretoken": {m[1]},
		"username": {user}, "password": {password}, "next": {"/admin/"}}, nil)
	if code != 302 || loc != "/admin/" {
		b.t.Fatalf("logging in %s: %d to %q", user, code, loc)
	}
	if code, body := b.do("GET", "/admin/"); code != 200 || !strings.Contains(body, "Site administration") {
		b.t.Fatalf("the admin after the login: %d %.300s", code, body)
	}
}

// djangoSetup makes the Django site's database and its superuser (admin,
// secret-1) in data, as its README says.
func djangoSetup(t *testing.T, dir, data string) {
	if err := sites.DjangoSetup(dir, filepath.Join(dir, "..", "..", "..", "plugins", "python"), data); err != nil {
		t.Fatal(err)
	}
}

func TestSitesFlask(t *testing.T) {
	runSite(t, existingSite{
		dir:     "flaskr",
		command: "flaskr.wsgi:application",
		modules: "flask",
		login: func(b *siteBrowser, user, password string) {
			b.t.Helper()
			form := url.Values{"username": {user}, "password": {password}}
			if code, loc := b.post("/auth/register", form, nil); code != 302 && code != 409 {
				b.t.Fatalf("registering %s: %d %q", user, code, loc)
			}
			if code, loc := b.post("/auth/login", form, nil); code != 302 || loc != "/whoami" {
				b.t.Fatalf("logging in %s: %d to %q", user, code, loc)
			}
			// The redirect, followed: the tutorial's g.user names the user
			// from this request on.
			if w := b.who(); w.User != user {
				b.t.Fatalf("after logging in %s: %+v", user, w)
			}
		},
		note: func(b *siteBrowser, text string) []string {
			b.t.Helper()
			return b.postNote(url.Values{"text": {text}}, nil)
		},
		logout: func(b *siteBrowser) {
			b.t.Helper()
			if code, body := b.do("GET", "/auth/logout"); code != 200 {
				b.t.Fatalf("logging out: %d %.300s", code, body)
			}
		},
	})
}

// siteBrowser is a browser with the forms a site's pages post.
type siteBrowser struct{ *browser }

// post posts a form without following a redirect and returns the status
// and the Location.
func (b *siteBrowser) post(path string, form url.Values, header map[string]string) (int, string) {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := *b.http
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		b.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Location")
}

func (b *siteBrowser) postNote(form url.Values, header map[string]string) []string {
	b.t.Helper()
	req, _ := http.NewRequest("POST", b.base+"/note", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := b.http.Do(req)
	if err != nil {
		b.t.Fatalf("POST /note: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var got struct{ Notes []string }
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
		b.t.Fatalf("POST /note: %d %.300s", resp.StatusCode, body)
	}
	return got.Notes
}

func (b *siteBrowser) cookie(name string) string {
	u, _ := url.Parse(b.base)
	for _, c := range b.jar.Cookies(u) {
		if c.Name == name {
			return c.Value
		}
	}
	return ""
}

// siteWho is what the sites' /whoami says: the site's user, the stickyd
// person and connection, the worker and process that served it, and the
// notes the session holds.
type siteWho struct {
	User, Person, Conn, Worker string
	Pid                        int
	// Python is the interpreter's sys.prefix (a virtualenv's directory).
	Python string
	Notes  []string
}

func (b *siteBrowser) who() siteWho {
	b.t.Helper()
	code, body := b.do("GET", "/whoami")
	var w siteWho
	if code != 200 || json.Unmarshal([]byte(body), &w) != nil {
		b.t.Fatalf("whoami: %d %.300s", code, body)
	}
	return w
}

// sitePerson is the person the admin API holds for user (GET
// /v1/users/USER), or a status other than 200.
func sitePerson(t *testing.T, p *proc, user string) (int, struct {
	Worker string
	Conns  int
}) {
	t.Helper()
	code, body := adminCallAt(t, p.admin, "GET", "/v1/users/"+user, testToken)
	var u struct {
		Worker string
		Conns  int
	}
	if code == 200 {
		if err := json.Unmarshal([]byte(body), &u); err != nil {
			t.Fatalf("GET /v1/users/%s: %v %s", user, err, body)
		}
	}
	return code, u
}

func runSite(t *testing.T, s existingSite) {
	root := pythonRepo(t)
	if out, err := exec.Command(pythonExe, "-c", "import "+s.modules).CombinedOutput(); err != nil {
		t.Skipf("%s cannot import %s (make deps installs python3-django and python3-flask): %v %s", pythonExe, s.modules, err, out)
	}
	dir := filepath.Join(root, "test", "sites", s.dir)
	data := t.TempDir()
	if s.setup != nil {
		began := time.Now()
		s.setup(t, dir, data)
		t.Logf("site set up in %v", time.Since(began).Round(time.Millisecond))
	}
	p := &proc{t: t, dir: t.TempDir(), front: freePort(t), admin: freePort(t)}
	cfg := fmt.Sprintf(`
name       = "sites"
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
group "site" {
  workers = 2
  plugin {
    runtime = "python3"
    command = %q
    env     = { PYTHONPATH = %q, STICKYD_SITE_DATA = %q, PYTHONDONTWRITEBYTECODE = "1" }
  }
}
`, filepath.Join(p.dir, "data"), filepath.Join(root, "plugins", "python"), freePort(t), freePort(t), p.front, p.admin,
		testToken, s.command, dir, data)
	if err := os.WriteFile(filepath.Join(p.dir, "stickyd.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()
	const user, password = "admin", "secret-1"

	// Logged in as a browser does: the person is the user.
	a := &siteBrowser{procBrowser(t, p)}
	s.login(a, user, password)
	if w := a.who(); w.User != user || w.Person != user {
		t.Fatalf("after the login the first browser is %+v, want the user and the person %s", w, user)
	}
	if notes := s.note(a, "first"); len(notes) == 0 || notes[len(notes)-1] != "first" {
		t.Fatalf("the session's notes: %v", notes)
	}
	// The site streams (a generator's blocks reach the browser as it
	// yields them) and serves server-sent events; the person's requests
	// are served while a stream runs.
	checkStreamed(t, a.browser, "/stream?n=4", func() {
		if w := a.who(); w.User != user {
			t.Fatalf("a request beside the stream: %+v", w)
		}
	})
	checkEvents(t, a.browser, "/events")
	code, person := sitePerson(t, p, user)
	if code != 200 {
		t.Fatalf("GET /v1/users/%s: %d: the adapter did not name the person", user, code)
	}
	home := a.who().Worker
	if person.Worker != home {
		t.Fatalf("the admin API has %s on %s, the site says %s", user, person.Worker, home)
	}

	// A second browser, a newcomer on the other worker, logs in as the same
	// user: it joins the person on their worker, with its own session.
	var b *siteBrowser
	var other string
	for i := 0; i < 10 && b == nil; i++ {
		c := &siteBrowser{procBrowser(t, p)}
		if w := c.who(); w.Worker != home {
			b, other = c, w.Worker
		}
	}
	if b == nil {
		t.Fatalf("ten newcomers all placed on %s, where %s lives", home, user)
	}
	s.login(b, user, password)
	if w := b.who(); w.User != user || w.Person != user || w.Worker != home {
		t.Fatalf("the second browser after its login is %+v, want %s on %s", w, user, home)
	}
	if notes := s.note(b, "second browser"); notes[len(notes)-1] != "second browser" {
		t.Fatalf("the second browser's notes: %v", notes)
	}
	if _, person = sitePerson(t, p, user); person.Conns != 2 || person.Worker != home {
		t.Fatalf("the person %s: %+v, want 2 connections on %s", user, person, home)
	}

	// The operator moves the user, by name, with both sessions.
	before := a.who()
	out, exit := runCLI(t, p.admin, "user", "move", user, "-to", other)
	if exit != 0 || !strings.Contains(out, "moved "+user) {
		t.Fatalf("stickyd user move %s -to %s: exit %d\n%s", user, other, exit, out)
	}
	for i, c := range []*siteBrowser{a, b} {
		if w := c.who(); w.User != user || w.Worker != other || w.Pid == before.Pid {
			t.Fatalf("browser %d after the move: %+v, want %s on %s (another process than %d)", i, w, user, other, before.Pid)
		}
	}
	if w := a.who(); w.Conn != before.Conn || strings.Join(w.Notes, ",") != strings.Join(before.Notes, ",") {
		t.Fatalf("the first browser's session after the move: %+v, before %+v", w, before)
	}

	// SIGTERM and start again: new processes, the same people logged in.
	before = a.who()
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, p.out)
	}
	p.start()
	if h := p.health(); h.Restart.Missing != 0 || len(h.Restart.Incomplete) != 0 || h.Restart.Parked == 0 {
		t.Fatalf("restart report %+v\n%s", h.Restart, p.out)
	}
	w := a.who()
	if w.User != user || w.Conn != before.Conn || w.Pid == before.Pid || strings.Join(w.Notes, ",") != strings.Join(before.Notes, ",") {
		t.Fatalf("the first browser after the restart: %+v, before %+v", w, before)
	}
	if w := b.who(); w.User != user {
		t.Fatalf("the second browser after the restart: %+v", w)
	}
	if notes := s.note(a, "after the restart"); strings.Join(notes, ",") != strings.Join(append(before.Notes, "after the restart"), ",") {
		t.Fatalf("the notes after the restart: %v", notes)
	}

	// A logout keeps the person while the other browser is logged in; the
	// last one's forgets them.
	s.logout(a)
	if w := a.who(); w.User != "" {
		t.Fatalf("the first browser after its logout: %+v", w)
	}
	if w := b.who(); w.User != user {
		t.Fatalf("the second browser after the first one's logout: %+v", w)
	}
	if code, _ := sitePerson(t, p, user); code != 200 {
		t.Fatalf("the person went with one browser's logout: %d", code)
	}
	s.logout(b)
	waitFor(t, 20*time.Second, "the person forgotten after the last logout", func() bool {
		code, _ := sitePerson(t, p, user)
		return code == 404
	})
	if w := b.who(); w.User != "" || w.Person != "" {
		t.Fatalf("the second browser after its logout: %+v", w)
	}
}

// A group names its interpreter (issue 43): a Django group runs on a
// virtualenv's Python beside a Flask group on the system's, in one agent;
// each group's workers run their own interpreter (sys.prefix as the site
// reports it), and a person moved from one group to the other is served by
// the other's.
func TestSitesOnTheirOwnInterpreters(t *testing.T) {
	root := pythonRepo(t)
	if out, err := exec.Command(pythonExe, "-c", "import django, flask").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import django and flask (make deps installs python3-django and python3-flask): %v %s", pythonExe, err, out)
	}
	prefix, err := exec.Command(pythonExe, "-c", "import sys; print(sys.prefix)").Output()
	if err != nil {
		t.Fatalf("%s: %v", pythonExe, err)
	}
	systemPrefix := strings.TrimSpace(string(prefix))
	venv := filepath.Join(t.TempDir(), "shop-venv")
	// The virtualenv sees the distribution's packages (Django, grpcio,
	// protobuf), as docs/python.md says to make one.
	if out, err := exec.Command(pythonExe, "-m", "venv", "--without-pip", "--system-site-packages", venv).CombinedOutput(); err != nil {
		t.Fatalf("making a virtualenv: %v\n%s", err, out)
	}
	sites := filepath.Join(root, "test", "sites")
	djangoData, flaskData := t.TempDir(), t.TempDir()
	djangoSetup(t, filepath.Join(sites, "django_site"), djangoData)
	p := &proc{t: t, dir: t.TempDir(), front: freePort(t), admin: freePort(t)}
	cfg := fmt.Sprintf(`
name       = "interpreters"
data_dir   = %q
python_sdk = %q
server {
  raft_addr = %q
  rpc_addr  = %q
}
front { address = %q }
admin {
  address = %q
  token   = %q
}
group "django" {
  workers = 1
  plugin {
    runtime     = "python3"
    interpreter = %q
    command     = "site_project.wsgi:application"
    env         = { PYTHONPATH = %q, STICKYD_SITE_DATA = %q }
  }
}
group "flask" {
  workers = 1
  plugin {
    runtime = "python3"
    command = "flaskr.wsgi:application"
    env     = { PYTHONPATH = %q, STICKYD_SITE_DATA = %q }
  }
}
`, filepath.Join(p.dir, "data"), filepath.Join(root, "plugins", "python"), freePort(t), freePort(t), p.front, p.admin,
		testToken, filepath.Join(venv, "bin", "python"), filepath.Join(sites, "django_site"), djangoData,
		filepath.Join(sites, "flaskr"), flaskData)
	if err := os.WriteFile(filepath.Join(p.dir, "stickyd.hcl"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p.start()

	// Each group's worker process runs its interpreter.
	code, body := adminCallAt(t, p.admin, "GET", "/v1/workers", testToken)
	var workers []struct {
		ID, Group string
		Pid       int
	}
	if code != 200 || json.Unmarshal([]byte(body), &workers) != nil || len(workers) != 2 {
		t.Fatalf("GET /v1/workers: %d %.500s", code, body)
	}
	for _, w := range workers {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid))
		if err != nil {
			t.Fatalf("worker %s: %v", w.ID, err)
		}
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		want := map[string]string{"django": filepath.Join(venv, "bin", "python"), "flask": pythonExe}[w.Group]
		if argv0 != want {
			t.Errorf("worker %s of group %s runs %s, want %s", w.ID, w.Group, argv0, want)
		}
	}

	// A group of the catalog names its interpreter too (the command line),
	// and only a python3 group may.
	venvPython := filepath.Join(venv, "bin", "python")
	if out, exit := runCLI(t, p.admin, "group", "create", "-command", "/bin/true", "-interpreter", venvPython, "refused"); exit == 0 || !strings.Contains(out, "is for runtime") {
		t.Fatalf("an interpreter for a go-plugin group: exit %d\n%s", exit, out)
	}
	if out, exit := runCLI(t, p.admin, "group", "create", "-runtime", "python3", "-interpreter", venvPython,
		"-command", "flaskr.wsgi:application", "-env", "PYTHONPATH="+filepath.Join(sites, "flaskr"), "-env", "STICKYD_SITE_DATA="+flaskData, "shop"); exit != 0 {
		t.Fatalf("stickyd group create shop: exit %d\n%s", exit, out)
	}
	waitFor(t, 30*time.Second, "the catalog group's worker on the virtualenv's Python", func() bool {
		code, body := adminCallAt(t, p.admin, "GET", "/v1/workers", testToken)
		var ws []struct {
			Group, State string
			Pid          int
		}
		if code != 200 || json.Unmarshal([]byte(body), &ws) != nil {
			return false
		}
		for _, w := range ws {
			if w.Group == "shop" && w.State == "ready" {
				cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.Pid))
				argv0, _, _ := strings.Cut(string(cmdline), "\x00")
				if argv0 != venvPython {
					t.Fatalf("the catalog group's worker runs %q, want %s", argv0, venvPython)
				}
				return true
			}
		}
		return false
	})

	// A newcomer lands on the default group (the first): Django, in the
	// virtualenv; logged in, they are the person admin.
	b := &siteBrowser{procBrowser(t, p)}
	djangoLogin(b, "admin", "secret-1")
	w := b.who()
	if w.Python != venv || w.Person != "admin" {
		t.Fatalf("the Django group's site: %+v, want the person admin served in the virtualenv %s", w, venv)
	}
	// Moved to the Flask group, the same person is served by the system's
	// Python.
	out, exit := runCLI(t, p.admin, "user", "move", w.Person, "-group", "flask")
	if exit != 0 {
		t.Fatalf("stickyd user move %s -group flask: exit %d\n%s", w.Person, exit, out)
	}
	// The Flask site does not know admin, so this first answer also logs
	// the connection out there (the adapters' logout rule): what follows
	// it is a newcomer's, and is not looked at.
	moved := b.who()
	if moved.Person != w.Person || moved.Worker == w.Worker || moved.Python != systemPrefix {
		t.Fatalf("after the move to the Flask group: %+v (before %+v), want the system's Python %s", moved, w, systemPrefix)
	}
	t.Logf("django on %s (%s), flask on %s (%s)", w.Worker, w.Python, moved.Worker, moved.Python)
}
