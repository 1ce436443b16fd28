package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
)

const webToken = "s3cret-admin-token"

// fakeView is a view func that returns a fixed View, or err.
func fakeView(err error) ViewFunc {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	proj := at.Add(20 * time.Minute)
	v := View{
		At: at, Agent: "a1", Leader: "a1", Default: "web",
		Workers: []Worker{{
			ID: "web-1", Agent: "a1", Group: "web", State: "ready", Pid: 42, Incarnation: 1, Born: at.Add(-time.Hour),
			Users: 1, Conns: 2, Pages: 3, HeapBytes: 10 << 20, RSSBytes: 30 << 20,
			Saturation: map[string]float64{"memory": 0.9, "cpu": 0.1},
			Memory:     []Sample{{At: at.Add(-time.Minute), Value: 20 << 20}, {At: at, Value: 30 << 20}},
			Projection: &proj,
		}},
		People: []Person{{User: "ana", Worker: "web-1", Group: "web", State: "live", Conns: 2, Pages: 3}},
		Events: []governor.Event{{At: at, Kind: governor.KindMove, ID: 7, Group: "web", Worker: "web-1", User: "ana", To: "web-2", Reason: "memory 90% > 85%"}},
	}
	return func(ctx context.Context, q fsm.UserQuery) (View, error) {
		if _, ok := ctx.Deadline(); !ok {
			return View{}, errors.New("the view was asked without a deadline")
		}
		if err != nil {
			return View{}, err
		}
		return v, nil
	}
}

// sessionCookie is the cookie a login with the right token sets.
func sessionCookie(t *testing.T, h http.Handler, token string) *http.Cookie {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, form("/", url.Values{"token": {token}}))
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	t.Fatalf("logging in set no %s cookie: %d %s", SessionCookie, rec.Code, rec.Body)
	return nil
}

func form(target string, v url.Values) *http.Request {
	r := httptest.NewRequest("POST", target, strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

func TestWebHandler(t *testing.T) {
	h := WebHandler(webToken, fakeView(nil), nil)
	good := sessionCookie(t, h, webToken)
	forged := &http.Cookie{Name: SessionCookie, Value: "bm90LWEtbWFj"}
	// The MAC of the same label under another token.
	other := &http.Cookie{Name: SessionCookie, Value: sessionCookie(t, WebHandler("another-token", fakeView(nil), nil), "another-token").Value}
	if other.Value == good.Value {
		t.Fatal("two tokens give the same session cookie")
	}

	tests := []struct {
		name     string
		req      *http.Request
		cookie   *http.Cookie
		status   int
		body     string // a substring of the body
		notBody  string // must not be in the body
		location string
		setsAuth bool // the answer sets the session cookie
		header   map[string]string
	}{
		{name: "page without session shows the login form", req: httptest.NewRequest("GET", "/", nil),
			status: 200, body: `name="token"`, notBody: "monitor.js",
			header: map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store"}},
		{name: "page with a forged cookie shows the login form", req: httptest.NewRequest("GET", "/", nil), cookie: forged,
			status: 200, body: `name="token"`, notBody: "monitor.js"},
		{name: "page with another token's cookie shows the login form", req: httptest.NewRequest("GET", "/", nil), cookie: other,
			status: 200, body: `name="token"`, notBody: "monitor.js"},
		{name: "page with the session", req: httptest.NewRequest("GET", "/", nil), cookie: good,
			status: 200, body: `<script src="monitor.js"`, notBody: `name="token"`,
			header: map[string]string{"Content-Type": "text/html; charset=utf-8", "Cache-Control": "no-store",
				"Content-Security-Policy": contentSecurity, "X-Content-Type-Options": "nosniff"}},
		{name: "wrong token posted", req: form("/", url.Values{"token": {"guess"}}),
			status: 403, body: "That is not the admin token.", notBody: "monitor.js"},
		{name: "empty token posted", req: form("/", url.Values{"token": {""}}),
			status: 403, body: "That is not the admin token."},
		{name: "right token posted", req: form("/", url.Values{"token": {webToken}}),
			status: 303, location: "./", setsAuth: true},
		{name: "token in the address once", req: httptest.NewRequest("GET", "/?token="+webToken, nil),
			status: 303, location: "./", setsAuth: true},
		{name: "wrong token in the address", req: httptest.NewRequest("GET", "/?token=guess", nil),
			status: 403, body: "That is not the admin token."},
		{name: "view without session", req: httptest.NewRequest("GET", "/api/view", nil),
			status: 401, body: `"error":"no monitor session`,
			header: map[string]string{"Content-Type": "application/json"}},
		{name: "view with a forged cookie", req: httptest.NewRequest("GET", "/api/view", nil), cookie: forged,
			status: 401, body: `"error"`},
		{name: "view with the session", req: httptest.NewRequest("GET", "/api/view", nil), cookie: good,
			status: 200, body: `"workers":[{"id":"web-1"`,
			header: map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"}},
		{name: "script without session", req: httptest.NewRequest("GET", "/monitor.js", nil),
			status: 200, body: "api/view", header: map[string]string{"Content-Type": "text/javascript; charset=utf-8"}},
		{name: "style without session", req: httptest.NewRequest("GET", "/monitor.css", nil),
			status: 200, body: ".bar.hot", header: map[string]string{"Content-Type": "text/css; charset=utf-8"}},
		{name: "unknown path", req: httptest.NewRequest("GET", "/index.html", nil), cookie: good, status: 404},
		{name: "unknown api path", req: httptest.NewRequest("GET", "/api/views", nil), cookie: good, status: 404},
		{name: "the embedded directory is not served", req: httptest.NewRequest("GET", "/web/index.html", nil), cookie: good, status: 404},
		{name: "view is read-only", req: httptest.NewRequest("POST", "/api/view", nil), cookie: good, status: 405},
		{name: "oversized login form", req: form("/", url.Values{"token": {strings.Repeat("x", 8<<10)}}),
			status: 400, body: "Could not read the form"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Each from an address of its own: a wrong token delays only
			// its client's next try.
			tt.req.RemoteAddr = fmt.Sprintf("192.0.2.%d:1234", i+1)
			if tt.cookie != nil {
				tt.req.AddCookie(tt.cookie)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			res := rec.Result()
			body := rec.Body.String()
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d; body: %s", res.StatusCode, tt.status, body)
			}
			if tt.body != "" && !strings.Contains(body, tt.body) {
				t.Errorf("body lacks %q:\n%s", tt.body, body)
			}
			if tt.notBody != "" && strings.Contains(body, tt.notBody) {
				t.Errorf("body has %q:\n%s", tt.notBody, body)
			}
			if got := res.Header.Get("Location"); got != tt.location {
				t.Errorf("Location %q, want %q", got, tt.location)
			}
			for k, want := range tt.header {
				if got := res.Header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			var set *http.Cookie
			for _, c := range res.Cookies() {
				if c.Name == SessionCookie {
					set = c
				}
			}
			if tt.setsAuth != (set != nil) {
				t.Fatalf("session cookie set: %v, want %v", set, tt.setsAuth)
			}
			if set != nil {
				if set.Value == "" || set.Value == good.Value || !set.HttpOnly || set.SameSite != http.SameSiteStrictMode || set.Path != "/" || set.MaxAge <= 0 {
					t.Errorf("session cookie %+v: want a value of its own, HttpOnly, SameSite=Strict, Path=/ and a max age", set)
				}
				if strings.Contains(set.Value, webToken) {
					t.Errorf("the cookie carries the token: %q", set.Value)
				}
			}
		})
	}
}

// The JSON is the View, field for field.
func TestWebHandlerViewJSON(t *testing.T) {
	view := fakeView(nil)
	h := WebHandler(webToken, view, nil)
	req := httptest.NewRequest("GET", "/api/view", nil)
	req.AddCookie(sessionCookie(t, h, webToken))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 200 {
		t.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	var got View
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("decoding the view: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	want, err := view(ctx, fsm.UserQuery{Limit: DefaultLimit})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(normalize(t, got), normalize(t, want)) {
		t.Fatalf("served view:\n%+v\nwant:\n%+v", got, want)
	}
}

// normalize round-trips v through JSON so times compare without their
// monotonic readings and locations.
func normalize(t *testing.T, v View) View {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out View
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// A failing composition is a 503 with the cause, not a broken page.
func TestWebHandlerViewError(t *testing.T) {
	h := WebHandler(webToken, fakeView(errors.New("the maps are not loaded yet")), nil)
	req := httptest.NewRequest("GET", "/api/view", nil)
	req.AddCookie(sessionCookie(t, h, webToken))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503: %s", rec.Code, rec.Body)
	}
	var body struct{ Error string }
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.Error != "composing the view: the maps are not loaded yet" {
		t.Fatalf("body %s (%v): want the error in JSON", rec.Body, err)
	}
}

// An agent without a token opens no session: no login succeeds, and a
// cookie made from the empty key is refused.
func TestWebHandlerEmptyToken(t *testing.T) {
	h := WebHandler("", fakeView(nil), nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, form("/", url.Values{"token": {""}}))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("an empty token logged in: %d", rec.Code)
	}
	req := httptest.NewRequest("GET", "/api/view", nil)
	req.AddCookie(&http.Cookie{Name: SessionCookie, Value: "bm90LWEtc2Vzc2lvbg"})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusUnauthorized {
		t.Fatalf("the empty key's cookie opened the view: %d", rec.Code)
	}
}

// Past the free tries, each wrong token delays its client's next try,
// doubling; other clients
// are not delayed, and the right token after the wait logs in and clears it.
func TestWebHandlerLoginBackoff(t *testing.T) {
	reg := prometheus.NewRegistry()
	wh := newWebHandler(webToken, fakeView(nil), reg)
	now := time.Unix(1_800_000_000, 0)
	wh.now = func() time.Time { return now }
	try := func(addr, token string) *httptest.ResponseRecorder {
		r := form("/", url.Values{"token": {token}})
		r.RemoteAddr = addr
		rec := httptest.NewRecorder()
		_ = wh.serveLogin(rec, r)
		return rec
	}
	for i := range loginFreeTries + 1 {
		if rec := try("198.51.100.1:1", fmt.Sprint("typo", i)); rec.Code != 403 {
			t.Fatalf("wrong token %d: %d, want 403 (no wait within the free tries)", i+1, rec.Code)
		}
	}
	rec := try("198.51.100.1:2", webToken)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("a try within the wait: %d (Retry-After %q), want 429", rec.Code, rec.Header().Get("Retry-After"))
	}
	if rec := try("198.51.100.2:1", webToken); rec.Code != 303 {
		t.Fatalf("another client was delayed: %d", rec.Code)
	}
	// 1 s after the first wrong token, a second one; then the wait is 2 s.
	now = now.Add(1100 * time.Millisecond)
	if rec := try("198.51.100.1:3", "guess2"); rec.Code != 403 {
		t.Fatalf("second wrong token: %d", rec.Code)
	}
	now = now.Add(1500 * time.Millisecond)
	if rec := try("198.51.100.1:4", webToken); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("1.5 s after the second wrong token: %d, want 429 (the wait doubled)", rec.Code)
	}
	now = now.Add(time.Second)
	if rec := try("198.51.100.1:5", webToken); rec.Code != 303 {
		t.Fatalf("the right token after the wait: %d", rec.Code)
	}
	for i := range loginFreeTries {
		if rec := try("198.51.100.1:6", fmt.Sprint("again", i)); rec.Code != 403 {
			t.Fatalf("after a login the count starts again: %d", rec.Code)
		}
	}
	// 2,000 guesses from one client in a minute are all refused unchecked
	// but a handful.
	checked := 0
	for i := range 2000 {
		now = now.Add(30 * time.Millisecond)
		if try("198.51.100.3:1", fmt.Sprint("g", i)).Code == 403 {
			checked++
		}
	}
	if checked > loginFreeTries+8 {
		t.Fatalf("%d of 2000 guesses in a minute were checked", checked)
	}
	// Every try is counted by its result: the metrics show an attack.
	wrong := testutil.ToFloat64(wh.logins.WithLabelValues("wrong_token"))
	backed := testutil.ToFloat64(wh.logins.WithLabelValues("backed_off"))
	if int(wrong+backed) != (loginFreeTries+1)+3+loginFreeTries+2000 || backed < 1900 {
		t.Fatalf("counted %v wrong tokens and %v backed off", wrong, backed)
	}
	if got := testutil.ToFloat64(wh.logins.WithLabelValues("ok")); got != 2 {
		t.Fatalf("counted %v logins, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "stickyd_monitor_sessions", "stickyd_monitor_logins_total"); err != nil || n != 5 {
		t.Fatalf("registered series: %d, %v", n, err)
	}
}

// A login or logout sent from another origin is refused; each login gets a
// session of its own, which its logout ends, and sessions expire.
func TestWebHandlerSessions(t *testing.T) {
	wh := newWebHandler(webToken, fakeView(nil), nil)
	now := time.Unix(1_800_000_000, 0)
	wh.now = func() time.Time { return now }
	login := func(hdr map[string]string) *httptest.ResponseRecorder {
		r := form("/", url.Values{"token": {webToken}})
		for k, v := range hdr {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		_ = wh.serveLogin(rec, r)
		return rec
	}
	for what, hdr := range map[string]map[string]string{
		"cross-site fetch":     {"Sec-Fetch-Site": "cross-site"},
		"same-site other host": {"Sec-Fetch-Site": "same-site"},
		"foreign Origin":       {"Origin": "https://evil.example"},
	} {
		if rec := login(hdr); rec.Code != http.StatusForbidden || len(rec.Result().Cookies()) != 0 {
			t.Errorf("%s: %d with cookies %v, want 403 and none", what, rec.Code, rec.Result().Cookies())
		}
	}
	a := login(map[string]string{"Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"})
	b := login(nil)
	ca, cb := a.Result().Cookies(), b.Result().Cookies()
	if a.Code != 303 || b.Code != 303 || len(ca) != 1 || len(cb) != 1 || ca[0].Value == cb[0].Value {
		t.Fatalf("two logins: %d %d, cookies %v %v: want two sessions of their own", a.Code, b.Code, ca, cb)
	}
	has := func(c *http.Cookie) bool {
		r := httptest.NewRequest("GET", "/api/view", nil)
		r.AddCookie(c)
		return wh.hasSession(r)
	}
	if !has(ca[0]) || !has(cb[0]) {
		t.Fatal("a login's cookie opens no session")
	}
	out := httptest.NewRequest("POST", "/logout", nil)
	out.AddCookie(ca[0])
	out.Header.Set("Sec-Fetch-Site", "cross-site")
	rec := httptest.NewRecorder()
	if err := wh.serveLogout(rec, out); err == nil {
		t.Fatal("a cross-site logout was taken")
	}
	out.Header.Del("Sec-Fetch-Site")
	rec = httptest.NewRecorder()
	if err := wh.serveLogout(rec, out); err != nil || rec.Code != 303 {
		t.Fatalf("logout: %v %d", err, rec.Code)
	}
	if has(ca[0]) || !has(cb[0]) {
		t.Fatal("the logout did not end its session alone")
	}
	now = now.Add(sessionAge)
	if has(cb[0]) {
		t.Fatal("a session outlived its 12 hours")
	}
}

// The whole flow as a browser does it, mounted as the front mounts it: the
// login form, the redirect to the page, the cookie scoped to the mount
// point, the page's assets and its view.
func TestWebHandlerLoginFlow(t *testing.T) {
	const mount = "/_stickyd/monitor"
	mux := http.NewServeMux()
	mux.Handle(mount+"/", http.StripPrefix(mount, WebHandler(webToken, fakeView(nil), nil)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The hosted site: it must never see the monitor's cookie.
		if _, err := r.Cookie(SessionCookie); err == nil {
			t.Errorf("the site at %s received the monitor's session cookie", r.URL.Path)
		}
		_, _ = io.WriteString(w, "site")
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	get := func(path string) (int, string) {
		t.Helper()
		res, err := c.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}

	if code, body := get(mount + "/api/view"); code != 401 {
		t.Fatalf("view before login: %d %s", code, body)
	}
	code, body := get(mount + "/")
	if code != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("page before login: %d %s", code, body)
	}
	// The form posts to ./ and loads monitor.css relative to the page.
	for _, ref := range []string{`action="./"`, `href="monitor.css"`} {
		if !strings.Contains(body, ref) {
			t.Errorf("the login form lacks %s", ref)
		}
	}

	res, err := c.PostForm(srv.URL+mount+"/", url.Values{"token": {webToken}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.Path != mount+"/" || !strings.Contains(string(page), `id="people-table"`) {
		t.Fatalf("after login: %d at %s: %s", res.StatusCode, res.Request.URL, page)
	}
	u, _ := url.Parse(srv.URL + mount + "/")
	var scoped bool
	for _, ck := range jar.Cookies(u) {
		scoped = scoped || ck.Name == SessionCookie
	}
	site, _ := url.Parse(srv.URL + "/")
	for _, ck := range jar.Cookies(site) {
		if ck.Name == SessionCookie {
			t.Fatalf("the session cookie is sent to the site's root, not scoped to %s/", mount)
		}
	}
	if !scoped {
		t.Fatal("no session cookie for the monitor's path")
	}
	get("/some/site/page") // the site handler checks it gets no monitor cookie

	code, body = get(mount + "/api/view")
	var v View
	if code != 200 || json.Unmarshal([]byte(body), &v) != nil || len(v.Workers) != 1 || v.People[0].User != "ana" {
		t.Fatalf("view after login: %d %s", code, body)
	}

	// Every asset the page loads is served, without the session too.
	refs := regexp.MustCompile(`(?:src|href)="([^":]+)"`).FindAllStringSubmatch(string(page), -1)
	if len(refs) < 2 {
		t.Fatalf("the page loads no assets: %s", page)
	}
	anon := &http.Client{Timeout: 10 * time.Second}
	for _, m := range refs {
		res, err := anon.Get(srv.URL + mount + "/" + m[1])
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("asset %s: %d", m[1], res.StatusCode)
		}
	}

	// ?token= logs in and leaves no token in the address.
	jar2, _ := cookiejar.New(nil)
	c2 := &http.Client{Jar: jar2, Timeout: 10 * time.Second}
	res, err = c2.Get(srv.URL + mount + "/?token=" + url.QueryEscape(webToken))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.Request.URL.RawQuery != "" || res.Request.URL.Path != mount+"/" {
		t.Fatalf("?token= login ended at %s with %d", res.Request.URL, res.StatusCode)
	}
}

// The session cookie is scoped to wherever the handler is mounted.
func TestMountPath(t *testing.T) {
	tests := []struct{ target, prefix, want string }{
		{"/", "", "/"},
		{"/_stickyd/monitor/", "/_stickyd/monitor", "/_stickyd/monitor/"},
		{"/_stickyd/monitor/?token=x", "/_stickyd/monitor", "/_stickyd/monitor/"},
		{"/ops/mon/api/view", "/ops/mon", "/ops/mon/"},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			var got string
			h := http.StripPrefix(tt.prefix, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = mountPath(r) }))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", tt.target, nil))
			if got != tt.want {
				t.Fatalf("mountPath = %q, want %q", got, tt.want)
			}
		})
	}
}

// api/view hands the page query on to the view, cursor decoded; a bad
// parameter is a 400 that says which, and the view is not composed.
func TestWebHandlerViewQuery(t *testing.T) {
	var asked []fsm.UserQuery
	h := WebHandler(webToken, func(ctx context.Context, q fsm.UserQuery) (View, error) {
		asked = append(asked, q)
		return View{}, nil
	}, nil)
	cookie := sessionCookie(t, h, webToken)
	get := func(query string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/api/view?"+query, nil)
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, tt := range []struct {
		query string
		want  fsm.UserQuery
	}{
		{"", fsm.UserQuery{Limit: DefaultLimit}},
		{"worker=web-1&group=web&state=parked&limit=7&cursor=" + EncodeCursor("bob"),
			fsm.UserQuery{Worker: "web-1", Group: "web", State: "parked", Limit: 7, After: "bob"}},
	} {
		asked = nil
		if rec := get(tt.query); rec.Code != 200 {
			t.Fatalf("%q: status %d: %s", tt.query, rec.Code, rec.Body)
		}
		if len(asked) != 1 || asked[0] != tt.want {
			t.Fatalf("%q: the view was asked %+v, want %+v", tt.query, asked, tt.want)
		}
	}
	for _, tt := range []struct{ query, want string }{
		{"limit=0", "limit"},
		{"limit=1001", "limit"},
		{"limit=ten", "limit"},
		{"state=asleep", "state"},
		{"cursor=bob", "cursor"},
	} {
		asked = nil
		rec := get(tt.query)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), tt.want) {
			t.Fatalf("%q: %d %s, want 400 naming %s", tt.query, rec.Code, rec.Body, tt.want)
		}
		if len(asked) != 0 {
			t.Fatalf("%q: the view was composed for a bad query", tt.query)
		}
	}
}
