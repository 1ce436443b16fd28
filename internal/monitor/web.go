package monitor

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// The monitor web page: index.html, monitor.js and monitor.css, embedded so
// the page works offline with nothing to build. The page polls api/view
// every second and draws both views (processes, people) from the View.
//
//go:embed web
var webFS embed.FS

// SessionCookie names the cookie that opens the monitor page to a browser
// that gave the admin token once.
const SessionCookie = "stickyd_monitor"

const (
	// sessionLabel is what a session cookie signs with the admin token: the
	// cookie proves its holder knew the token without carrying it, and
	// changing the token logs every browser out.
	sessionLabel = "stickyd monitor session v1"
	// sessionAge is how long a browser keeps the session cookie.
	sessionAge = 12 * time.Hour
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
//	GET  /api/view      the View as JSON (Cache-Control: no-store); 401 JSON
//	                    {"error": ...} without the cookie.
//	GET  /monitor.js    the page's script and style, served to anyone: they
//	GET  /monitor.css   hold no data.
//
// Anything else is 404 (405 for a known path with another method). The
// session cookie is HttpOnly and SameSite=Strict, scoped to the mount point
// so the hosted site never sees it; its value is HMAC-SHA256(token, a fixed
// label), compared in constant time. An empty token opens no session.
// view is called once per /api/view request, with a deadline.
func WebHandler(token string, view func(ctx context.Context) (View, error)) http.Handler {
	h := &webHandler{token: token, view: view}
	if token != "" {
		h.session = sessionMAC(token)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", h.handle(h.serveIndex))
	mux.Handle("POST /{$}", h.handle(h.serveLogin))
	mux.Handle("GET /api/view", h.handle(h.serveView))
	mux.Handle("GET /monitor.js", h.asset("web/monitor.js", "text/javascript; charset=utf-8"))
	mux.Handle("GET /monitor.css", h.asset("web/monitor.css", "text/css; charset=utf-8"))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		mux.ServeHTTP(w, r)
	})
}

// webHandler is the monitor page's state: all of it fixed at construction.
type webHandler struct {
	token   string
	session []byte // the session cookie's MAC; nil: no session is valid
	view    func(ctx context.Context) (View, error)
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
		if !h.tokenOK(strings.Join(tok, "")) {
			return h.writeLogin(w, http.StatusForbidden, "That is not the admin token.")
		}
		h.login(w, r)
		return nil
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
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		return h.writeLogin(w, http.StatusBadRequest, "Could not read the form: "+err.Error())
	}
	if !h.tokenOK(r.PostForm.Get("token")) {
		return h.writeLogin(w, http.StatusForbidden, "That is not the admin token.")
	}
	h.login(w, r)
	return nil
}

func (h *webHandler) serveView(w http.ResponseWriter, r *http.Request) error {
	if !h.hasSession(r) {
		return errNoSession
	}
	ctx, cancel := context.WithTimeout(r.Context(), viewTimeout)
	defer cancel()
	v, err := h.view(ctx)
	if err != nil {
		return &webError{status: http.StatusServiceUnavailable, msg: "composing the view", err: err}
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// login sets the session cookie and sends the browser to the page, with
// no token left in its address bar or history.
func (h *webHandler) login(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    base64.RawURLEncoding.EncodeToString(h.session),
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
	a, b := sha256.Sum256([]byte(candidate)), sha256.Sum256([]byte(h.token))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// hasSession reports whether r carries a valid session cookie.
func (h *webHandler) hasSession(r *http.Request) bool {
	if h.session == nil {
		return false
	}
	for _, c := range r.CookiesNamed(SessionCookie) {
		mac, err := base64.RawURLEncoding.DecodeString(c.Value)
		if err == nil && hmac.Equal(mac, h.session) {
			return true
		}
	}
	return false
}

func sessionMAC(token string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(sessionLabel))
	return m.Sum(nil)
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
