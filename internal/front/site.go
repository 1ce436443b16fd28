package front

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// hopHeaders are connection-level headers that are not forwarded.
var hopHeaders = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// serveSite forwards a request of the hosted site to the worker holding the
// person, or, for a new connection, to the worker the supervisor chooses.
func (f *Front) serveSite(w http.ResponseWriter, r *http.Request) error {
	// A request still waiting when the front closes (held by a barrier, a
	// maintenance window, a slow worker) is answered 503 with Retry-After,
	// never cut: the agent lets the handlers write before it closes the
	// connections.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(f.root, cancel)()
	err := f.serveSiteCtx(ctx, w, r)
	if err != nil && f.root.Err() != nil && ctx.Err() != nil && r.Context().Err() == nil {
		return errStopping
	}
	return err
}

// errStopping answers a site request the front's stop cut short.
var errStopping = &HTTPError{Status: http.StatusServiceUnavailable, Message: "this server is stopping; retry shortly", Retry: true, RetryAfter: 5}

func (f *Front) serveSiteCtx(ctx context.Context, w http.ResponseWriter, r *http.Request) error {
	rt, known := f.route(w, r)
	if known && !f.allowFrame(rt.Conn, rt.User, viaSite) {
		return errRateLimited
	}
	if !known && !f.newcomers.allow(r.RemoteAddr) {
		return errTooManyNewcomers
	}
	body, release, err := f.readBody(w, r, bodyLimit(r, f.cfg.MaxBodyBytes))
	defer release()
	if err != nil {
		return err
	}
	req := &protocol.HTTPRequest{Method: r.Method, Url: r.URL.RequestURI(), Body: body, RemoteAddr: r.RemoteAddr, Host: r.Host}
	if !utf8.ValidString(r.Host) {
		return &HTTPError{Status: http.StatusBadRequest, Message: "the Host header is not valid UTF-8"}
	}
	for k, v := range r.Header {
		if hopHeaders[k] {
			continue
		}
		for _, s := range v {
			if !utf8.ValidString(s) {
				return &HTTPError{Status: http.StatusBadRequest, Message: fmt.Sprintf("header %s is not valid UTF-8", k)}
			}
		}
		if k == "Cookie" {
			v = f.stripOwnCookie(r)
			if len(v) == 0 {
				continue
			}
		}
		req.Headers = append(req.Headers, &protocol.Header{Name: k, Values: v})
	}
	fr := &protocol.Frame{Kind: &protocol.Frame_Http{Http: req}}
	var rep *protocol.FrameReply
	if known {
		rep, rt, err = f.deliver(ctx, rt.Conn, fr, f.cfg.RequestTimeout)
	} else {
		worker, perr := f.cfg.Directory.Place(ctx)
		if errors.Is(perr, placement.ErrDiskFull) {
			return &HTTPError{Status: http.StatusServiceUnavailable, Message: "this server's disk is full: no new session can start until it has room again; retry later", Retry: true, RetryAfter: 30, Err: perr}
		}
		if perr != nil {
			return &HTTPError{Status: http.StatusServiceUnavailable, Message: "no worker can take a new session now; retry shortly", Retry: true, Err: perr}
		}
		rep, err = f.call(ctx, worker, fr, f.cfg.RequestTimeout)
	}
	if err != nil {
		return err
	}
	if _, err := f.afterIdentity(ctx, w, rt, known, rep.WorkerId, rep.Identity); err != nil {
		return err
	}
	resp := rep.GetHttp()
	if resp == nil {
		return &HTTPError{Status: http.StatusBadGateway, Message: "worker answered an HTTP request without a response"}
	}
	h := w.Header()
	for _, hv := range resp.Headers {
		if hopHeaders[hv.Name] {
			continue
		}
		if http.CanonicalHeaderKey(hv.Name) == "Set-Cookie" {
			// The front's own connection cookie is already set: the
			// site's cookies go beside it, never over it.
			h[hv.Name] = append(h[hv.Name], hv.Values...)
			continue
		}
		h[hv.Name] = hv.Values
	}
	status := int(resp.Status)
	if status < 100 || status > 999 {
		status = http.StatusBadGateway
	}
	w.WriteHeader(status)
	_, _ = w.Write(resp.Body)
	if resp.Stream != 0 {
		if err := f.streamBody(ctx, w, rep.WorkerId, resp.Stream); err != nil {
			// Nothing can be said after the status: the connection is
			// cut, so the client sees the body was not whole.
			panic(http.ErrAbortHandler)
		}
	}
	return nil
}

// stripOwnCookie returns the request's Cookie headers without the front's
// own cookie, every other byte as the browser sent it: the site names its
// connection through the SDK, not by reading the cookie, and it must get
// its own cookies unchanged (net/http's parser drops values with a quote,
// a backslash or a byte past ASCII, which frameworks write: Werkzeug and
// Python's SimpleCookie quote a value with a comma or a space).
func (f *Front) stripOwnCookie(r *http.Request) []string {
	var out []string
	for _, line := range r.Header.Values("Cookie") {
		if !strings.Contains(line, f.cfg.CookieName) {
			out = append(out, line)
			continue
		}
		kept := make([]string, 0, strings.Count(line, ";")+1)
		for piece := range strings.SplitSeq(line, ";") {
			name, _, _ := strings.Cut(piece, "=")
			if strings.TrimSpace(name) == f.cfg.CookieName {
				continue
			}
			if piece = strings.TrimLeft(piece, " \t"); piece != "" {
				kept = append(kept, piece)
			}
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, "; "))
		}
	}
	return out
}

// multipartSlack is what a multipart body may hold beyond max_body_bytes:
// its framing (boundaries, each part's headers, the form's other fields),
// so that a file of max_body_bytes uploads as the operator expects.
const multipartSlack = 64 << 10

// bodyLimit is the bound of a site request's body: max_body_bytes, plus
// multipartSlack for a multipart form.
func bodyLimit(r *http.Request, limit int64) int64 {
	if mt, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(mt), "multipart/form-data") {
		return limit + multipartSlack
	}
	return limit
}
