package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// serveHTTP runs the App's handler on a request carried by a frame. The web
// interface is an adapter: the transport is always the channel. A Site's
// handler runs on the site's pool while the calling mailbox waits for it,
// until it returns or flushes (then the response streams: stream.go); any
// other App's runs here, in the mailbox, and is sent whole.
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
		// Its own end: a stream's client that leaves ends it.
		sctx, cancel := context.WithCancel(ctx)
		req = req.WithContext(sctx)
		w.streams, w.cancel, w.started, w.log = rt.streams, cancel, make(chan struct{}), rt.log
		waited, streamed, err := rt.site.serve(s.userKey(), func() { w.serve(rt.app, req) }, w.started)
		if !streamed {
			cancel()
		}
		if err != nil {
			return nil, err
		}
		// The person is charged (runFrame) for their handler, not for
		// the wait for a goroutine of the pool.
		if a := s.acct; a != nil {
			a.busy.Add(-int64(waited))
		}
		if streamed {
			out := &protocol.HTTPResponse{Status: int32(w.status), Body: w.head, Stream: w.st.id}
			for k, v := range w.headHeader {
				out.Headers = append(out.Headers, &protocol.Header{Name: k, Values: v})
			}
			return out, nil
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

// recorder is the ResponseWriter handed to the App. It buffers the
// response, which is sent whole when the handler returns; a Site's handler
// that flushes turns it into a stream (stream.go): the status, headers and
// body so far go at once, and its later writes go to the stream.
type recorder struct {
	header   http.Header
	status   int
	body     bytes.Buffer
	max      int64 // 0: no bound
	tooLarge bool

	// A Site's request can stream: streams opens one at the first flush,
	// cancel ends the handler's context, started is closed once the
	// response streams (st, head and headHeader set).
	streams    *streams
	cancel     context.CancelFunc
	started    chan struct{}
	log        hclog.Logger
	st         *stream
	head       []byte
	headHeader http.Header
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
	if r.st != nil {
		return r.st.write(b)
	}
	if r.max > 0 && int64(r.body.Len())+int64(len(b)) > r.max {
		r.tooLarge = true
		return 0, ErrBodyTooLarge
	}
	return r.body.Write(b)
}

// Flush implements http.Flusher (and so http.ResponseController's Flush).
// A Site's response streams from its first flush; any other App's is sent
// whole when the handler returns, and Flush does nothing.
func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.st != nil || r.streams == nil || r.tooLarge {
		return
	}
	st, first := r.streams.start(r.cancel)
	if st == nil {
		if first {
			r.log.Warn("a response that flushed is sent whole: too many streams are open", "max_streams", r.streams.max)
		}
		r.streams = nil
		return
	}
	r.head = bytes.Clone(r.body.Bytes())
	r.headHeader = r.header.Clone()
	r.body = bytes.Buffer{}
	r.st = st
	close(r.started)
}

// serve runs h on req with r. A response that streams is ended here, a
// panic included (the mailbox no longer waits for it); one that did not is
// left to the mailbox, panic and all.
func (r *recorder) serve(h http.Handler, req *http.Request) {
	defer func() {
		if r.st == nil {
			return
		}
		failure := ""
		if v := recover(); v != nil {
			failure = fmt.Sprintf("application error: %v", v)
			r.log.Error("app panicked in a streamed response", "panic", v, "stack", string(debug.Stack()))
		}
		r.st.end(failure)
		r.cancel()
	}()
	h.ServeHTTP(r, req)
}
