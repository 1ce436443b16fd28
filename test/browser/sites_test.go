package browser

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/test/internal/sites"
)

// Existing sites in Chromium (issue 43): the Django site and the Flask
// tutorial's app under test/sites, unchanged but for the adapters' lines,
// each served by a 2-worker python3 group of a real agent and used by a
// real browser. The browser logs in through the site's own form, uploads a
// 10 MiB file through a multipart form (Django: an object created in the
// admin, then edited), gets cookies the framework quotes (a comma, a space,
// a quote, a byte past ASCII) back unchanged, reads a streamed response
// whose first block arrives before the last is written, and listens to
// server-sent events. `stickyd user move admin` (the command line) finds
// the person the adapter named and moves them between loading a form and
// submitting it; after the agent's stop and a new start the browser is
// still logged in (the sessions live in the person's tree).
func TestSitesInChromium(t *testing.T) {
	if err := sites.Importable("django, flask, grpc, google.protobuf"); err != nil {
		t.Fatal(err) // make deps installs them; these tests never skip
	}
	root, err := sites.Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []chromeSite{djangoInChromium(), flaskInChromium()} {
		t.Run(s.name, func(t *testing.T) { runChromeSite(t, root, s) })
	}
}

// chromeSite is one site and what the browser does on it.
type chromeSite struct {
	name, dir, command string
	setup              func(t *testing.T, dir, sdk, data string)
	// login logs admin in through the site's form.
	login func(tb *tab, base string)
	// loggedIn says, in the page, whether the browser is logged in.
	loggedIn func(tb *tab, base string) bool
	// upload sends file through the site's form and checks it arrived
	// whole; edit then edits what was made, after between.
	upload func(tb *tab, base, data, file, sum string, between func())
}

func runChromeSite(t *testing.T, root string, s chromeSite) {
	sdk := filepath.Join(root, "plugins", "python")
	dir := filepath.Join(root, "test", "sites", s.dir)
	data := t.TempDir()
	if s.setup != nil {
		s.setup(t, dir, sdk, data)
	}
	ports, err := freeport.Take(2)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &agent.Config{
		Name:      "sites",
		DataDir:   t.TempDir(),
		PythonSDK: sdk,
		Front:     &agent.FrontConfig{Address: fmt.Sprintf("127.0.0.1:%d", ports[0]), FrameTimeout: "20s"},
		Admin:     &agent.AdminConfig{Address: fmt.Sprintf("127.0.0.1:%d", ports[1])},
		Groups: []*agent.GroupConfig{{Name: "site", Workers: 2, Plugin: &agent.PluginConfig{
			Runtime: "python3", Command: s.command,
			Env: map[string]string{"PYTHONPATH": dir, "STICKYD_SITE_DATA": data, "PYTHONDONTWRITEBYTECODE": "1"},
		}}},
	}
	a := runAgent(t, cfg)
	running := a
	t.Cleanup(func() { stopAgent(t, running) })
	base := "http://" + a.Addr()
	tb := startBrowser(t, s.name)

	s.login(tb, base)
	home := personsWorker(t, a, "admin")

	// A 10 MiB file through the site's form; the person moved by the
	// command line between loading the edit form and submitting it.
	file := filepath.Join(t.TempDir(), "report.bin")
	body := make([]byte, 10<<20)
	_, _ = rand.Read(body)
	if err := os.WriteFile(file, body, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	s.upload(tb, base, data, file, hex.EncodeToString(sum[:]), func() {
		to := home
		for _, w := range a.Pool().Ready() {
			if w != home {
				to = w
			}
		}
		ui := cli.NewMockUi()
		if code := command.RunWith([]string{"user", "move", "admin", "-to", to, "-address", "http://" + a.AdminAddr(), "-token", a.Token()}, ui, nil); code != 0 {
			t.Fatalf("stickyd user move admin -to %s: exit %d: %s%s", to, code, ui.OutputWriter, ui.ErrorWriter)
		}
		if now := personsWorker(t, a, "admin"); now != to {
			t.Fatalf("admin lives on %s after the move to %s", now, to)
		}
	})

	// Cookies the framework quotes come back as they were set.
	tb.do("getting odd cookies", chromedp.Navigate(base+"/cookies/set"))
	tb.do("sending them back", chromedp.Navigate(base+"/cookies"))
	var cookies struct {
		Cookies map[string]string
		Same    bool
	}
	if err := json.Unmarshal([]byte(pageText(t, tb)), &cookies); err != nil || !cookies.Same || len(cookies.Cookies) != 4 {
		t.Fatalf("the site's cookies after a round trip through stickyd and Chromium: %+v (%v)", cookies, err)
	}

	// A streamed response, read by fetch as it comes.
	streamed, err := await[struct {
		First float64
		Text  string
	}](tb, `(async () => {
  const r = await fetch("/stream?n=4");
  const reader = r.body.getReader(), dec = new TextDecoder();
  let text = "", first = 0;
  for (;;) {
    const {done, value} = await reader.read();
    if (done) break;
    if (!first) first = Date.now();
    text += dec.decode(value, {stream: true});
  }
  return {first, text};
})()`)
	if err != nil {
		t.Fatalf("fetching the stream: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(streamed.Text), "\n")
	var last int64
	if len(lines) != 4 || func() bool { _, err := fmt.Sscanf(lines[3], "3 %d", &last); return err != nil }() {
		t.Fatalf("the stream: %q", streamed.Text)
	}
	if firstAt := time.UnixMilli(int64(streamed.First)); !firstAt.Before(time.Unix(0, last)) {
		t.Fatalf("the stream's first block arrived at %v, after its last was written (%v)", firstAt, time.Unix(0, last))
	}

	// Server-sent events, with the browser's EventSource.
	events, err := await[[]string](tb, `new Promise((resolve) => {
  const es = new EventSource("/events"), got = [];
  es.addEventListener("tick", (e) => { got.push(e.data); if (got.length === 3) { es.close(); resolve(got); } });
  setTimeout(() => { es.close(); resolve(got); }, 15000);
})`)
	if err != nil || strings.Join(events, " ") != `{"n":0} {"n":1} {"n":2}` {
		t.Fatalf("server-sent events: %q %v", events, err)
	}

	// The agent stops and starts again: still logged in.
	stopAgent(t, a)
	a = runAgent(t, cfg)
	running = a
	if !s.loggedIn(tb, base) {
		t.Fatalf("logged out by the restart")
	}
	if w := personsWorker(t, a, "admin"); w == "" {
		t.Fatalf("the person admin is gone after the restart")
	}
}

// personsWorker is the worker the admin API says user lives on.
func personsWorker(t *testing.T, a *agent.Agent, user string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+a.AdminAddr()+"/v1/users/"+user, nil)
	req.Header.Set("Authorization", "Bearer "+a.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u struct{ Worker string }
	if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&u) != nil {
		t.Fatalf("GET /v1/users/%s: %d: the adapter did not name the person", user, resp.StatusCode)
	}
	return u.Worker
}

// pageText is the page's text (a JSON answer, as Chromium shows it).
func pageText(t *testing.T, tb *tab) string {
	t.Helper()
	s, err := eval[string](tb, `document.body.innerText`)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func djangoInChromium() chromeSite {
	return chromeSite{
		name: "django", dir: "django_site", command: "site_project.wsgi:application",
		setup: func(t *testing.T, dir, sdk, data string) {
			if err := sites.DjangoSetup(dir, sdk, data); err != nil {
				t.Fatal(err)
			}
		},
		login: func(tb *tab, base string) {
			tb.do("logging in", chromedp.Navigate(base+"/admin/login/?next=/admin/"),
				chromedp.SendKeys(chromedp.ID("id_username"), "admin"),
				chromedp.SendKeys(chromedp.ID("id_password"), "secret-1"),
				chromedp.Submit(chromedp.ID("id_password")))
			waitJS(tb.t, tb, "the admin's index", actionTimeout, `location.pathname === "/admin/" && document.body.innerText.includes("Site administration")`)
		},
		loggedIn: func(tb *tab, base string) bool {
			tb.do("loading the admin", chromedp.Navigate(base+"/admin/notes/attachment/"))
			text := pageText(tb.t, tb)
			return strings.Contains(text, "report v2") && !strings.Contains(text, "Password")
		},
		upload: func(tb *tab, base, data, file, sum string, between func()) {
			t := tb.t
			tb.do("adding an attachment", chromedp.Navigate(base+"/admin/notes/attachment/add/"),
				chromedp.SendKeys(chromedp.ID("id_title"), "report"),
				chromedp.SetUploadFiles(chromedp.ID("id_file"), []string{file}),
				chromedp.Click(chromedp.CSS(`input[name="_save"]`)))
			waitJS(t, tb, "the attachment added", 60*time.Second, `document.body.innerText.includes("was added successfully")`)
			// The file on the site's disk is the one sent.
			got, err := filepath.Glob(filepath.Join(data, "media", "attachments", "report*"))
			if err != nil || len(got) != 1 {
				t.Fatalf("the uploaded file: %v %v", got, err)
			}
			b, _ := os.ReadFile(got[0])
			if s := sha256.Sum256(b); hex.EncodeToString(s[:]) != sum {
				t.Fatalf("the uploaded file (%d bytes) is not the one sent", len(b))
			}
			tb.do("opening it", chromedp.Navigate(base+"/admin/notes/attachment/1/change/"))
			between()
			tb.do("editing it", chromedp.SetValue(chromedp.ID("id_title"), "report v2"),
				chromedp.Click(chromedp.CSS(`input[name="_save"]`)))
			waitJS(t, tb, "the attachment changed", actionTimeout, `document.body.innerText.includes("was changed successfully")`)
		},
	}
}

func flaskInChromium() chromeSite {
	return chromeSite{
		name: "flask", dir: "flaskr", command: "flaskr.wsgi:application",
		login: func(tb *tab, base string) {
			tb.do("opening the login form", chromedp.Navigate(base+"/auth/login"))
			code, err := await[int](tb, `fetch("/auth/register", {method: "POST", redirect: "manual",
  body: new URLSearchParams({username: "admin", password: "secret-1"})}).then((r) => r.status)`)
			if err != nil || (code != 0 && code != 409) { // 0: the redirect, not followed
				tb.t.Fatalf("registering admin: %d %v", code, err)
			}
			tb.do("logging in", chromedp.SendKeys(chromedp.CSS(`input[name="username"]`), "admin"),
				chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), "secret-1"),
				chromedp.Submit(chromedp.CSS(`input[name="password"]`)))
			waitJS(tb.t, tb, "whoami after the login", actionTimeout, `location.pathname === "/whoami" && JSON.parse(document.body.innerText).user === "admin"`)
		},
		loggedIn: func(tb *tab, base string) bool {
			tb.do("loading whoami", chromedp.Navigate(base+"/whoami"))
			var w struct{ User string }
			return json.Unmarshal([]byte(pageText(tb.t, tb)), &w) == nil && w.User == "admin"
		},
		upload: func(tb *tab, base, data, file, sum string, between func()) {
			t := tb.t
			tb.do("opening the upload form", chromedp.Navigate(base+"/upload"))
			between()
			tb.do("uploading", chromedp.SendKeys(chromedp.ID("title"), "report"),
				chromedp.SetUploadFiles(chromedp.ID("file"), []string{file}),
				chromedp.Submit(chromedp.ID("title")))
			waitJS(t, tb, "the upload's answer", 60*time.Second, `document.body.innerText.includes("sha256")`)
			var got struct {
				Title, Name, Sha256 string
				Size                int
			}
			if err := json.Unmarshal([]byte(pageText(t, tb)), &got); err != nil || got.Size != 10<<20 || got.Sha256 != sum || got.Title != "report" || got.Name != "report.bin" {
				t.Fatalf("the upload: %+v (%v)", got, err)
			}
		},
	}
}

// await evaluates a JavaScript expression whose value is a promise, and
// waits up to 30 s for it.
func await[T any](tb *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(tb.ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr, chromedp.EvalAwaitPromise))
}
