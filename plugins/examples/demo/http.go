package demo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The site's routes:
//
//	GET  /                the app page (grid, document, login box, status bar)
//	GET  /customers/{id}  a customer page (customer.go); id is 1-9 digits
//	GET  /assets/{name}   app.js, customer.js, app.css and icon.svg
//	GET  /favicon.ico     icon.svg, for the browsers that ask for it
//	POST /login           form field "user": logs the connection in, 303 to
//	                      the form's "next" (/ or a customer page; default /)
//	GET  /whoami          {"conn", "user", "worker"} of the connection
//
// Anything else is 404 (405 for a known path with another method).

// httpError is a route's refusal: its status, the message the browser may
// see, and the cause for the log.
type httpError struct {
	status int
	msg    string
	err    error
}

func (e *httpError) Error() string {
	if e.err != nil {
		return e.msg + ": " + e.err.Error()
	}
	return e.msg
}

func (e *httpError) Unwrap() error { return e.err }

// handlerFunc is a route that returns its error instead of writing it.
type handlerFunc func(http.ResponseWriter, *http.Request) error

func (a *App) newRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", a.handle(a.serveIndex))
	mux.Handle("GET /customers/{id}", a.handle(a.serveCustomer))
	mux.Handle("GET /assets/{name}", a.handle(a.serveAsset))
	mux.Handle("GET /favicon.ico", a.handle(a.serveFavicon))
	mux.Handle("POST /login", a.handle(a.serveLogin))
	mux.Handle("GET /whoami", a.handle(a.serveWhoami))
	return mux
}

// handle writes a route's error: an *httpError as it says, anything else as
// a 500 whose cause is logged, not shown.
func (a *App) handle(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := h(w, r)
		if err == nil {
			return
		}
		var he *httpError
		if !errors.As(err, &he) {
			he = &httpError{status: http.StatusInternalServerError, msg: "internal error", err: err}
		}
		if he.status >= 500 {
			a.log.Error("serving a request", "method", r.Method, "path", r.URL.Path, "error", err)
		}
		hdr := w.Header()
		hdr.Set("Content-Type", "text/plain; charset=utf-8")
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("Cache-Control", "no-store")
		w.WriteHeader(he.status)
		fmt.Fprintln(w, he.msg)
	})
}

func (a *App) serveIndex(w http.ResponseWriter, r *http.Request) error {
	body, err := renderIndex(a.pageData(r))
	if err != nil {
		return fmt.Errorf("rendering the page: %w", err)
	}
	return writePage(w, body)
}

func (a *App) serveCustomer(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !customerIDRE.MatchString(id) {
		return &httpError{status: http.StatusNotFound, msg: "no such customer: a customer id is 1-9 digits"}
	}
	d := a.pageData(r)
	d.Customer, d.Here = id, "/customers/"+id
	body, err := renderCustomer(d)
	if err != nil {
		return fmt.Errorf("rendering customer %s's page: %w", id, err)
	}
	return writePage(w, body)
}

// pageData is what a page shows of the request's connection.
func (a *App) pageData(r *http.Request) indexData {
	if s := a.sessionFrom(r.Context()); s != nil {
		return indexData{InStickyd: true, Worker: s.WorkerID(), Conn: s.Conn(), User: s.User()}
	}
	return indexData{}
}

// writePage writes a rendered HTML page.
func writePage(w http.ResponseWriter, body []byte) error {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'")
	_, err := w.Write(body)
	return err
}

func (a *App) serveAsset(w http.ResponseWriter, r *http.Request) error {
	f, ok := assets[r.PathValue("name")]
	if !ok {
		return &httpError{status: http.StatusNotFound, msg: "404 page not found"}
	}
	h := w.Header()
	h.Set("ETag", f.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	// No modification time: freshness rests on the ETag alone.
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
	return nil
}

// serveFavicon answers the browser's /favicon.ico with the site's icon
// (an SVG: the pages name it with <link rel="icon">, but a browser asks
// for /favicon.ico anyway, and a 404 on every load is noise).
func (a *App) serveFavicon(w http.ResponseWriter, r *http.Request) error {
	r.SetPathValue("name", "icon.svg")
	return a.serveAsset(w, r)
}

// maxLoginForm bounds the login form's body.
const maxLoginForm = 4 << 10

// loginNextRE is where a login may send the browser back to: the site's own
// pages, never another site (no open redirect).
var loginNextRE = regexp.MustCompile(`^/(customers/[1-9][0-9]{0,8})?$`)

func (a *App) serveLogin(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginForm)
	if err := r.ParseForm(); err != nil {
		return &httpError{status: http.StatusBadRequest, msg: "reading the login form: " + err.Error(), err: err}
	}
	user := strings.TrimSpace(r.PostForm.Get("user"))
	if user == "" {
		return &httpError{status: http.StatusBadRequest, msg: `logging in: the form needs a "user" field with a user name`}
	}
	next := r.PostForm.Get("next")
	if next == "" {
		next = "/"
	}
	if !loginNextRE.MatchString(next) {
		return &httpError{status: http.StatusBadRequest, msg: `logging in: "next" must be / or a customer page (/customers/ID)`}
	}
	s := a.sessionFrom(r.Context())
	if s == nil {
		return &httpError{status: http.StatusInternalServerError, msg: "logging in: " + errNoSession.Error(), err: errNoSession}
	}
	if err := s.Login(user); err != nil {
		if errors.Is(err, worker.ErrBadName) {
			return &httpError{status: http.StatusBadRequest, msg: err.Error(), err: err}
		}
		return fmt.Errorf("logging in %q: %w", user, err)
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// whoami is the answer of GET /whoami.
type whoami struct {
	Conn   string `json:"conn"`
	User   string `json:"user"`
	Worker string `json:"worker"`
}

func (a *App) serveWhoami(w http.ResponseWriter, r *http.Request) error {
	s := a.sessionFrom(r.Context())
	if s == nil {
		return &httpError{status: http.StatusInternalServerError, msg: "reading the connection: " + errNoSession.Error(), err: errNoSession}
	}
	b, err := json.Marshal(whoami{Conn: s.Conn(), User: s.User(), Worker: s.WorkerID()})
	if err != nil {
		return fmt.Errorf("encoding whoami: %w", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	_, err = w.Write(append(b, '\n'))
	return err
}
