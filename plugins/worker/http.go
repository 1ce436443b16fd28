package worker

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/stickyd/stickyd/internal/protocol"
)

// serveHTTP runs the App's handler on a request carried by a frame. The web
// interface is an adapter: the transport is always the channel.
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
	w := &recorder{header: http.Header{}}
	rt.app.ServeHTTP(w, req)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	out := &protocol.HTTPResponse{Status: int32(w.status), Body: w.body.Bytes()}
	for k, v := range w.header {
		out.Headers = append(out.Headers, &protocol.Header{Name: k, Values: v})
	}
	return out, nil
}

// recorder is the ResponseWriter handed to the App.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

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
	return r.body.Write(b)
}
