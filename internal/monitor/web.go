package monitor

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
)

// The monitor web page: index.html, monitor.js and monitor.css, embedded so
// the page works offline with nothing to build. The page polls api/view
// every second and draws both views (processes, people) from the View.
//
//go:embed web
var webFS embed.FS

// ViewFunc composes one reading with the page of people q selects.
type ViewFunc func(ctx context.Context, q fsm.UserQuery) (View, error)

// SessionCookie names the cookie that opens the monitor page to a browser
// that gave the admin token once.
const SessionCookie = "stickyd_monitor"

const (
	// sessionAge is how long a session lasts from its login.
	sessionAge = 12 * time.Hour
	// maxSessions bounds the sessions held at once; a login past it ends
	// the oldest.
	maxSessions = 256
	// loginFreeTries wrong tokens in a row cost a client nothing (a typo);
	// the next one makes it wait loginBackoff, each further one twice as
	// long, up to loginBackoffMax; a right token clears the count.
	loginFreeTries  = 3
	loginBackoff    = time.Second
	loginBackoffMax = 5 * time.Minute
	// maxLoginClients bounds the clients whose wrong tokens are
	// remembered; past it the oldest are forgotten.
	maxLoginClients = 4096
	// maxLoginForm bounds the login form's body.
	maxLoginForm = 4 << 10
	// viewTimeout bounds one composition of the view.
	viewTimeout = 5 * time.Second
)

// contentSecurity lets the page run its own script and style and talk to
// its own origin, nothing else: no inline script, no CDN, no framing.
const contentSecurity = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; " +
	"img-src 'self' data:; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// WebHandler serves the monitor page, relative to where it is mounted (the
// front mounts it with http.StripPrefix("/_stickyd/monitor", h)):
//
//	GET  /              the page, to a browser holding the session cookie;
//	                    else the login form. ?token=T (the admin token) logs
//	                    in once: cookie set, 303 to ./ without the token.
//	POST /              the login form (field "token"): 303 to ./ with the
//	                    cookie, or 403 with the form and why.
//	GET  /api/view      the View as JSON (Cache-Control: no-store), with
//	                    the page of people ?worker=&group=&state=&cursor=
//	                    &limit= selects; 401 JSON {"error": ...} without
//	                    the cookie, 400 for bad parameters.
//	GET  /monitor.js    the page's script and style, served to anyone: they
//	GET  /monitor.css   hold no data.
//
//	POST /logout        ends the session: 303 to ./.
//
// Anything else is 404 (405 for a known path with another method). Each
// login starts a session of its own: a random value, held (hashed) in
// memory for 12 hours or until its logout; a restart logs every browser
// out. The session cookie is HttpOnly and SameSite=Strict, Secure over TLS,
// scoped to the mount point so the hosted site never sees it. A login or
// logout from another origin is refused (Sec-Fetch-Site, Origin). Past
// three wrong tokens in a row, each makes its client wait before the next
// try: 1 s, doubling to
// 5 min (429 with Retry-After meanwhile). An empty token opens no session.
// view is called once per /api/view request, with a deadline and the page
// of people the request's parameters select (ParseQuery: worker, group,
// state, cursor, limit; bad ones get 400). reg, if
// set, gets the login counters (stickyd_monitor_logins_total by result)
// and the sessions held (stickyd_monitor_sessions).
func WebHandler(token string, view ViewFunc, reg prometheus.Registerer) http.Handler {
	return WebHandlerWithReadToken(token, "", view, reg)
}

// WebHandlerWithReadToken is WebHandler whose login takes the read token
// (admin.read_token) as well as the admin token: the page only reads.
func WebHandlerWithReadToken(token, readToken string, view ViewFunc, reg prometheus.Registerer) http.Handler {
	h := newWebHandler(token, view, reg)
	h.readToken = readToken
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", h.handle(h.serveIndex))
	mux.Handle("POST /{$}", h.handle(h.serveLogin))
	mux.Handle("POST /logout", h.handle(h.serveLogout))
	mux.Handle("GET /api/view", h.handle(h.serveView))
	mux.Handle("GET /monitor.js", h.asset("web/monitor.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /monitor.css", h.asset("web/monitor.css", "text/css; charset=utf-8"))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

func newWebHandler(token string, view ViewFunc, reg prometheus.Registerer) *webHandler {
	h := &webHandler{token: token, view: view, now: time.Now,
		sessions: map[string]time.Time{}, failures: map[string]*failure{},
		logins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stickyd_monitor_logins_total",
			Help: "Logins to the monitor page by result: ok, wrong_token, backed_off (refused unchecked: the client waits after wrong tokens), cross_origin.",
		}, []string{"result"})}
	for _, r := range []string{"ok", "wrong_token", "backed_off", "cross_origin"} {
		h.logins.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(h.logins, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "stickyd_monitor_sessions",
			Help: "Monitor page sessions held (at most 256; each lasts 12 h or until its logout).",
		}, func() float64 {
			h.mu.Lock()
			defer h.mu.Unlock()
			return float64(len(h.sessions))
		}))
	}
	return h
}

// webHandler is the monitor page's state.
type webHandler struct {
	token     string
	readToken string // "": none
	view      ViewFunc
	now       func() time.Time

	mu sync.Mutex
	// sessions maps the hash of each session's random value to when it
	// expires.
	sessions map[string]time.Time
	// failures holds, by client address, the wrong tokens given.
	failures map[string]*failure

	logins *prometheus.CounterVec
}

// failure is a client's run of wrong tokens.
type failure struct {
	n     int
	until time.Time // no token is checked for it before then
}

// webError is a request the monitor cannot serve: the status, the message
// the browser may read, and the cause.
type webError struct {
	status int
	msg    string
	err    error
}

func (e *webError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *webError) Unwrap() error { return e.err }

// errNoSession is the answer to an API call without a valid session.
var errNoSession = &webError{status: http.StatusUnauthorized, msg: "no monitor session: log in at the monitor page with the admin token"}

// handle writes a route's error as JSON {"error": message}.
func (h *webHandler) handle(f func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := f(w, r)
		if err == nil {
			return
		}
		var we *webError
		if !errors.As(err, &we) {
			we = &webError{status: http.StatusInternalServerError, msg: "internal error", err: err}
		}
		writeJSON(w, we.status, map[string]string{"error": we.Error()})
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *webHandler) asset(name, contentType string) http.Handler {
	body, err := webFS.ReadFile(name)
	if err != nil {
		panic("monitor: missing embedded asset " + name) // a build defect, caught by the tests
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", contentType)
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write(body)
	})
}

func (h *webHandler) serveIndex(w http.ResponseWriter, r *http.Request) error {
	if tok, ok := r.URL.Query()["token"]; ok {
		return h.tryLogin(w, r, strings.Join(tok, ""))
	}
	if !h.hasSession(r) {
		return h.writeLogin(w, http.StatusOK, "")
	}
	page, err := webFS.ReadFile("web/index.html")
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", contentSecurity)
	_, _ = w.Write(page)
	return nil
}

func (h *webHandler) serveLogin(w http.ResponseWriter, r *http.Request) error {
	if !sameOrigin(r) {
		h.logins.WithLabelValues("cross_origin").Inc()
		return h.writeLogin(w, http.StatusForbidden, "This form may be sent only from the monitor's own page.")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		return h.writeLogin(w, http.StatusBadRequest, "Could not read the form: "+err.Error())
	}
	return h.tryLogin(w, r, r.PostForm.Get("token"))
}

// tryLogin checks a token a client gave: a wrong one makes the client wait
// before its next try (429 with Retry-After until then), doubling each time.
func (h *webHandler) tryLogin(w http.ResponseWriter, r *http.Request, token string) error {
	client := clientOf(r)
	now := h.now()
	h.mu.Lock()
	f := h.failures[client]
	if f != nil && now.Before(f.until) {
		wait := f.until.Sub(now)
		h.mu.Unlock()
		h.logins.WithLabelValues("backed_off").Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())+1))
		return h.writeLogin(w, http.StatusTooManyRequests, "Too many wrong tokens: try again in "+wait.Round(time.Second).String()+".")
	}
	ok := h.tokenOK(token)
	if !ok {
		if f == nil {
			if len(h.failures) >= maxLoginClients {
				h.forgetOldestFailureLocked()
			}
			f = &failure{}
			h.failures[client] = f
		}
		f.n++
		if f.n > loginFreeTries {
			f.until = now.Add(min(loginBackoff<<min(f.n-loginFreeTries-1, 20), loginBackoffMax))
		}
	} else {
		delete(h.failures, client)
	}
	h.mu.Unlock()
	if !ok {
		h.logins.WithLabelValues("wrong_token").Inc()
		return h.writeLogin(w, http.StatusForbidden, "That is not the admin token.")
	}
	h.logins.WithLabelValues("ok").Inc()
	h.login(w, r)
	return nil
}

func (h *webHandler) forgetOldestFailureLocked() {
	var oldest string
	var at time.Time
	for k, f := range h.failures {
		if oldest == "" || f.until.Before(at) {
			oldest, at = k, f.until
		}
	}
	delete(h.failures, oldest)
}

// serveLogout ends the browser's session.
func (h *webHandler) serveLogout(w http.ResponseWriter, r *http.Request) error {
	if !sameOrigin(r) {
		return &webError{status: http.StatusForbidden, msg: "a logout may be sent only from the monitor's own page"}
	}
	for _, c := range r.CookiesNamed(SessionCookie) {
		h.mu.Lock()
		delete(h.sessions, sessionKey(c.Value))
		h.mu.Unlock()
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: mountPath(r), MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
	return nil
}

// sameOrigin reports whether a state-changing request comes from the
// monitor's own origin, as far as the browser says: Sec-Fetch-Site, else
// Origin must name this host. A client that sends neither (curl, a script)
// is not a browser a foreign page could drive. With the session cookie's
// SameSite=Strict this keeps cross-site forms out.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin" || site == "none"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// clientOf is the address a login try is counted against: the peer's IP
// (the monitor is served by the front, not behind a proxy it trusts).
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (h *webHandler) serveView(w http.ResponseWriter, r *http.Request) error {
	if !h.hasSession(r) {
		return errNoSession
	}
	q, err := ParseQuery(r.URL.Query())
	if err != nil {
		return &webError{status: http.StatusBadRequest, msg: err.Error()}
	}
	ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
	defer cancel()
	v, err := h.view(ctx, q)
	if err != nil {
		return &webError{status: http.StatusServiceUnavailable, msg: "composing the view", err: err}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// login starts a session, sets its cookie and sends the browser to the
// page, with no token left in its address bar or history. Each login has a
// value of its own, random, that lives sessionAge or until its logout.
func (h *webHandler) login(w http.ResponseWriter, r *http.Request) {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	value := base64.RawURLEncoding.EncodeToString(b)
	now := h.now()
	h.mu.Lock()
	for k, exp := range h.sessions {
		if !now.Before(exp) {
			delete(h.sessions, k)
		}
	}
	if len(h.sessions) >= maxSessions {
		var oldest string
		var at time.Time
		for k, exp := range h.sessions {
			if oldest == "" || exp.Before(at) {
				oldest, at = k, exp
			}
		}
		delete(h.sessions, oldest)
	}
	h.sessions[sessionKey(value)] = now.Add(sessionAge)
	h.mu.Unlock()
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    value,
		Path:     mountPath(r),
		MaxAge:   int(sessionAge.Seconds()),
		HttpOnly: true,
		Secure:   r.TLS != nil,
		SameSite: http.SameSiteStrictMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "./")
	w.WriteHeader(http.StatusSeeOther)
}

// tokenOK compares a candidate with the admin token in constant time
// (hashed first, so not even the length leaks).
func (h *webHandler) tokenOK(candidate string) bool {
	if h.token == "" {
		return false
	}
	c := sha256.Sum256([]byte(candidate))
	admin, read := sha256.Sum256([]byte(h.token)), sha256.Sum256([]byte(h.readToken))
	ok := subtle.ConstantTimeCompare(c[:], admin[:]) == 1
	return subtle.ConstantTimeCompare(c[:], read[:]) == 1 && h.readToken != "" || ok
}

// hasSession reports whether r carries the cookie of a live session.
func (h *webHandler) hasSession(r *http.Request) bool {
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range r.CookiesNamed(SessionCookie) {
		k := sessionKey(c.Value)
		if exp, ok := h.sessions[k]; ok {
			if now.Before(exp) {
				return true
			}
			delete(h.sessions, k)
		}
	}
	return false
}

// sessionKey is what the handler keeps of a session's value: its hash, so
// the map holds nothing a reader of memory could send back.
func sessionKey(value string) string {
	sum := sha256.Sum256([]byte(value))
	return string(sum[:])
}

// mountPath is the path the handler is mounted at, with a trailing slash:
// what the request's original path has before the path the handler sees
// ("/_stickyd/monitor/" under http.StripPrefix("/_stickyd/monitor", h)).
// The session cookie is scoped to it, so it never reaches the hosted site.
func mountPath(r *http.Request) string {
	orig := r.URL.Path
	if u, err := url.ParseRequestURI(r.RequestURI); err == nil {
		orig = u.Path
	}
	if prefix, ok := strings.CutSuffix(orig, r.URL.Path); ok && strings.HasPrefix(r.URL.Path, "/") {
		return prefix + "/"
	}
	return "/"
}

// loginPage is the form shown to a browser without a session.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>stickyd monitor · log in</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="monitor.css">
</head>
<body class="login-page">
<form class="login" method="post" action="./">
  <h1>stickyd monitor</h1>
  <p>The monitor shows every worker and every person of the pool. Give the admin token to open it.</p>
  {{if .}}<p id="login-error" class="login-error" role="alert">{{.}}</p>{{end}}
  <label for="token">Admin token</label>
  <input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
  <button type="submit">Open the monitor</button>
</form>
</body>
</html>
`))

func (h *webHandler) writeLogin(w http.ResponseWriter, status int, msg string) error {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", contentSecurity)
	w.WriteHeader(status)
	_ = loginPage.Execute(w, msg) // only the client's write can fail, and the status is out
	return nil
}
