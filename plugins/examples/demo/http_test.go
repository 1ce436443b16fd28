package demo

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker"
)

// fakeSession stands for a stickyd connection: the SDK cannot put a real
// one in a request's context outside a worker.
type fakeSession struct {
	conn, user, worker string
	loginErr           error
	loggedIn           string
}

func (s *fakeSession) Conn() string     { return s.conn }
func (s *fakeSession) User() string     { return s.user }
func (s *fakeSession) WorkerID() string { return s.worker }
func (s *fakeSession) Login(user string) error {
	if s.loginErr != nil {
		return s.loginErr
	}
	s.loggedIn = user
	return nil
}

// withSession returns an App whose requests belong to s (nil: to none).
func withSession(s *fakeSession) *App {
	a := New()
	if s != nil {
		a.sessionFrom = func(context.Context) session { return s }
	}
	return a
}

func serve(a *App, method, target string, form url.Values) *httptest.ResponseRecorder {
	var r *http.Request
	if form != nil {
		r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	w := httptest.NewRecorder()
	a.ServeHTTP(w, r)
	return w
}

func TestRoutes(t *testing.T) {
	badName := fmt.Errorf("logging in %q: %w", "x y", worker.ErrBadName)
	for _, c := range []struct {
		name     string
		session  *fakeSession
		method   string
		target   string
		form     url.Values
		status   int
		body     string // a substring of the body
		location string
	}{
		{"page", nil, "GET", "/", nil, 200, `<script src="/_stickyd/client.js"></script>`, ""},
		{"page head", nil, "HEAD", "/", nil, 200, "", ""},
		{"page outside stickyd", nil, "GET", "/", nil, 200, "outside stickyd", ""},
		{"page with worker", &fakeSession{worker: "w-17", user: "ana"}, "GET", "/", nil, 200, `<b id="s-server">w-17</b>`, ""},
		{"page escapes", &fakeSession{worker: "<w>"}, "GET", "/", nil, 200, "&lt;w&gt;", ""},
		{"app.js", nil, "GET", "/assets/app.js", nil, 200, `stickyd.page({ kind: "grid"`, ""},
		{"app.css", nil, "GET", "/assets/app.css", nil, 200, "--row-h", ""},
		{"missing asset", nil, "GET", "/assets/nope.js", nil, 404, "not found", ""},
		{"asset folder", nil, "GET", "/assets/", nil, 404, "", ""},
		{"asset escape", nil, "GET", "/assets/..%2findex.html", nil, 404, "", ""},
		{"unknown path", nil, "GET", "/admin", nil, 404, "", ""},
		{"post page", nil, "POST", "/", nil, 405, "", ""},
		{"whoami", &fakeSession{conn: "c1", user: "ana", worker: "w-2"}, "GET", "/whoami", nil, 200, `{"conn":"c1","user":"ana","worker":"w-2"}`, ""},
		{"whoami outside stickyd", nil, "GET", "/whoami", nil, 500, "no stickyd connection", ""},
		{"login", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}}, 303, "", "/"},
		{"login outside stickyd", nil, "POST", "/login", url.Values{"user": {"ana"}}, 500, "no stickyd connection", ""},
		{"login without user", &fakeSession{}, "POST", "/login", url.Values{}, 400, "needs a \"user\"", ""},
		{"login without form", &fakeSession{}, "POST", "/login", nil, 400, "needs a \"user\"", ""},
		{"login blank user", nil, "POST", "/login", url.Values{"user": {"  "}}, 400, "needs a \"user\"", ""},
		{"login bad name", &fakeSession{loginErr: badName}, "POST", "/login", url.Values{"user": {"x y"}}, 400, "bad name", ""},
		{"login by get", &fakeSession{}, "GET", "/login", nil, 405, "", ""},
		{"login back to a customer", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}, "next": {"/customers/42"}}, 303, "", "/customers/42"},
		{"login back home", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}, "next": {"/"}}, 303, "", "/"},
		{"login to another site", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}, "next": {"//evil.example/"}}, 400, `"next" must be`, ""},
		{"login to a url", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}, "next": {"https://evil.example/"}}, 400, `"next" must be`, ""},
		{"login to another path", &fakeSession{}, "POST", "/login", url.Values{"user": {"ana"}, "next": {"/whoami"}}, 400, `"next" must be`, ""},
		{"customer page", nil, "GET", "/customers/42", nil, 200, `data-customer="42"`, ""},
		{"customer page loads its script", nil, "GET", "/customers/7", nil, 200, `<script src="/assets/customer.js"></script>`, ""},
		{"customer page comes back after login", nil, "GET", "/customers/42", nil, 200, `name="next" value="/customers/42"`, ""},
		{"customer page with worker", &fakeSession{worker: "w-3", user: "bob"}, "GET", "/customers/1", nil, 200, `<b id="s-server">w-3</b>`, ""},
		{"customer nav marks the page", nil, "GET", "/customers/42", nil, 200, `href="/customers/42" aria-current="page"`, ""},
		{"customer id not digits", nil, "GET", "/customers/abc", nil, 404, "no such customer", ""},
		{"customer id zero", nil, "GET", "/customers/0", nil, 404, "no such customer", ""},
		{"customer id too long", nil, "GET", "/customers/1234567890", nil, 404, "no such customer", ""},
		{"customers folder", nil, "GET", "/customers/", nil, 404, "", ""},
		{"post customer", nil, "POST", "/customers/1", nil, 405, "", ""},
		{"customer.js", nil, "GET", "/assets/customer.js", nil, 200, `stickyd.page({ kind: "customer"`, ""},
		{"page links the customers", nil, "GET", "/", nil, 200, `<a href="/customers/42">Thea Dubois</a>`, ""},
		{"favicon", nil, "GET", "/favicon.ico", nil, 200, `<svg xmlns="http://www.w3.org/2000/svg"`, ""},
		{"icon asset", nil, "GET", "/assets/icon.svg", nil, 200, `<svg`, ""},
		{"page names its icon", nil, "GET", "/", nil, 200, `<link rel="icon" href="/assets/icon.svg"`, ""},
		{"customer page names its icon", nil, "GET", "/customers/42", nil, 200, `<link rel="icon" href="/assets/icon.svg"`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := serve(withSession(c.session), c.method, c.target, c.form)
			if w.Code != c.status {
				t.Fatalf("status = %d, want %d; body %q", w.Code, c.status, w.Body.String())
			}
			if !strings.Contains(w.Body.String(), c.body) {
				t.Errorf("body does not contain %q:\n%s", c.body, w.Body.String())
			}
			if got := w.Header().Get("Location"); got != c.location {
				t.Errorf("Location = %q, want %q", got, c.location)
			}
		})
	}
}

func TestLoginDeclaresUser(t *testing.T) {
	s := &fakeSession{}
	w := serve(withSession(s), "POST", "/login", url.Values{"user": {" ana@example.com "}})
	if w.Code != http.StatusSeeOther || s.loggedIn != "ana@example.com" {
		t.Fatalf("status %d, logged in %q; want 303 and ana@example.com", w.Code, s.loggedIn)
	}
}

// TestRealSessionNames checks the demo's use of the SDK's own rules: the
// name the login form's pattern allows, Login allows too.
func TestRealSessionNames(t *testing.T) {
	s := worker.NewTestPage("doc").Session()
	for name, ok := range map[string]bool{"ana": true, "ana.b-c_d@x.io": true, "x y": false, "~anon": false, "": false} {
		if err := s.Login(name); (err == nil) != ok {
			t.Errorf("Login(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestIndexLoadsClientThenApp(t *testing.T) {
	body := serve(New(), "GET", "/", nil).Body.String()
	client := strings.Index(body, `src="/_stickyd/client.js"`)
	app := strings.Index(body, `src="/assets/app.js"`)
	if client < 0 || app < 0 || client > app {
		t.Fatalf("client.js at %d, app.js at %d: want both, client first", client, app)
	}
	for _, id := range []string{`id="notice"`, `action="/login"`, `id="s-grid-worker"`, `id="s-grid-status"`, `id="d-body"`, `id="g-body"`} {
		if !strings.Contains(body, id) {
			t.Errorf("page lacks %s", id)
		}
	}
}

func TestAssetHeaders(t *testing.T) {
	a := New()
	w := serve(a, "GET", "/assets/app.js", nil)
	if ct := w.Header().Get("Content-Type"); !strings.Contains(ct, "javascript") {
		t.Errorf("Content-Type = %q", ct)
	}
	if ct := serve(a, "GET", "/favicon.ico", nil).Header().Get("Content-Type"); ct != "image/svg+xml" {
		t.Errorf("/favicon.ico Content-Type = %q, want image/svg+xml", ct)
	}
	etag := w.Header().Get("ETag")
	if etag == "" {
		t.Fatal("no ETag")
	}
	r := httptest.NewRequest("GET", "/assets/app.js", nil)
	r.Header.Set("If-None-Match", etag)
	w2 := httptest.NewRecorder()
	a.ServeHTTP(w2, r)
	if w2.Code != http.StatusNotModified {
		t.Errorf("revalidation status = %d, want 304", w2.Code)
	}
}

func TestWhoamiJSON(t *testing.T) {
	w := serve(withSession(&fakeSession{conn: "c", worker: "w"}), "GET", "/whoami", nil)
	var got whoami
	if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding %q: %v", w.Body.String(), err)
	}
	if got != (whoami{Conn: "c", Worker: "w"}) {
		t.Fatalf("whoami = %+v", got)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}
