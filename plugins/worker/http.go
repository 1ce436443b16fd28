package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stickyd/stickyd/internal/protocol"
)

// serveHTTP runs the App's handler on a request carried by a frame. The web
// interface is an adapter: the transport is always the channel. A Site's
// handler runs on the site's pool while the calling mailbox waits for it;
// any other App's runs here, in the mailbox.
func (rt *runtime) serveHTTP(ctx context.Context, s *Session, in *protocol.HTTPRequest) (*protocol.HTTPResponse, error) {
	if in == nil {
		return nil, badf("http frame without a request")
	}
	req, err := http.NewRequestWithContext(ctx, in.Method, in.Url, bytes.NewReader(in.Body))
	if err != nil {
		return nil, badf("building request: %v", err)
	}
	for _, h := range in.Headers {
		req.Header[h.Name] = h.Values
	}
	req.RemoteAddr, req.Host = in.RemoteAddr, in.Host
	req.ContentLength = int64(len(in.Body))
	req.RequestURI = in.Url
	w := &recorder{header: http.Header{}, max: rt.maxBody}
	if rt.site == nil {
		rt.app.ServeHTTP(w, req)
	} else {
		waited, err := rt.site.serve(s.userKey(), func() { rt.app.ServeHTTP(w, req) })
		if err != nil {
			return nil, err
		}
		// The person is charged (runFrame) for their handler, not for
		// the wait for a goroutine of the pool.
		if a := s.acct; a != nil {
			a.busy.Add(-int64(waited))
		}
	}
	if w.tooLarge {
		return nil, fmt.Errorf("serving %s %s: %w (%d bytes)", in.Method, requestPath(in.Url), ErrBodyTooLarge, w.max)
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	out := &protocol.HTTPResponse{Status: int32(w.status), Body: w.body.Bytes()}
	for k, v := range w.header {
		out.Headers = append(out.Headers, &protocol.Header{Name: k, Values: v})
	}
	return out, nil
}

// ErrBodyTooLarge is returned by the ResponseWriter's Write past the
// response size a worker carries (SiteOptions.MaxBodyBytes); the request is
// then answered 500.
var ErrBodyTooLarge = errors.New("response body too large")

// recorder is the ResponseWriter handed to the App. The channel carries one
// reply per request, so it buffers the whole response; Flush does nothing
// (a streamed response arrives whole, at the end).
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int64 // 0: no bound
	tooLarge bool
}

var _ http.Flusher = (*recorder)(nil)

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		if code < 100 || code > 999 {
			panic(fmt.Sprintf("invalid WriteHeader code %v", code))
		}
		r.status = code
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.max > 0 && int64(r.body.Len())+int64(len(b)) > r.max {
		r.tooLarge = true
		return 0, ErrBodyTooLarge
	}
	return r.body.Write(b)
}

// Flush implements http.Flusher (and so http.ResponseController's Flush)
// as a no-op: the response is sent whole when the handler returns.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
}
