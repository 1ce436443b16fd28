package worker

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// read sends one HTTPRead of stream and returns its answer.
func (h *host) read(stream uint64, wait time.Duration, cancel bool) (*protocol.HTTPBody, error) {
	h.t.Helper()
	r, err := h.frame(&protocol.Frame{Kind: &protocol.Frame_Read{Read: &protocol.HTTPRead{Stream: stream, WaitMs: uint32(wait / time.Millisecond), Cancel: cancel}}})
	if err != nil {
		return nil, err
	}
	if r.GetBody() == nil {
		h.t.Fatalf("a read answered %v", r)
	}
	return r.GetBody(), nil
}

// readAll reads a stream to its end: its body, and its error if it failed.
func (h *host) readAll(stream uint64) (string, string) {
	h.t.Helper()
	var b strings.Builder
	for {
		body, err := h.read(stream, time.Second, false)
		if err != nil {
			h.t.Fatalf("reading stream %d: %v", stream, err)
		}
		b.Write(body.Data)
		if body.End {
			return b.String(), body.Error
		}
	}
}

// streamMux is a site whose /events streams one event each time gate is
// sent to, until it is closed, and whose /hold writes 5 MiB.
type streamMux struct {
	*http.ServeMux
	gate     chan struct{}
	canceled atomic.Bool
	wrote    atomic.Int64
}

func newStreamMux() *streamMux {
	m := &streamMux{ServeMux: http.NewServeMux(), gate: make(chan struct{})}
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, SessionFrom(r.Context()).Conn())
	})
	m.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		SessionFrom(r.Context()).Values().Set("streaming", true)
		_, _ = io.WriteString(w, "event: hello\n\n")
		w.(http.Flusher).Flush()
		for i := 0; ; i++ {
			select {
			case _, ok := <-m.gate:
				if !ok {
					return
				}
				_, _ = io.WriteString(w, "data: tick\n\n")
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				m.canceled.Store(true)
				return
			}
		}
	})
	m.HandleFunc("GET /hold", func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		chunk := make([]byte, 64<<10)
		for range 80 {
			n, err := w.Write(chunk)
			m.wrote.Add(int64(n))
			if err != nil {
				return
			}
		}
	})
	m.HandleFunc("GET /late-panic", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "begun")
		w.(http.Flusher).Flush()
		panic("after the headers")
	})
	m.HandleFunc("GET /quick", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "quick")
	})
	return m
}

// A streamed response: the first block is answered at once, later ones as
// they are written; the person's next request runs while the stream is
// open; the client's cancel ends the handler's context; the stream is then
// forgotten.
func TestSiteStreams(t *testing.T) {
	m := newStreamMux()
	h := startApp(t, Site(m, SiteOptions{Workers: 1}), "w1")
	p := newPerson(t, h)
	r, err := h.frame(p.request("GET", "/events", nil))
	if err != nil || r.GetHttp().Stream == 0 || string(r.GetHttp().Body) != "event: hello\n\n" {
		t.Fatalf("the stream's head: %v %v", r, err)
	}
	stream := r.GetHttp().Stream
	if ct := headerOf(r.GetHttp(), "Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	// Nothing written: a read waits its bound and answers nothing.
	if b, err := h.read(stream, 50*time.Millisecond, false); err != nil || len(b.Data) != 0 || b.End {
		t.Fatalf("an idle read: %v %v", b, err)
	}
	// The person's next request, on a pool of one goroutine: neither the
	// mailbox nor the pool waits for the stream.
	if r, err := h.frame(p.request("GET", "/quick", nil)); err != nil || string(r.GetHttp().Body) != "quick" {
		t.Fatalf("a request beside the stream: %v %v", r, err)
	}
	m.gate <- struct{}{}
	if b, err := h.read(stream, time.Second, false); err != nil || string(b.Data) != "data: tick\n\n" || b.End {
		t.Fatalf("an event: %v %v", b, err)
	}
	if b, err := h.read(stream, time.Second, true); err != nil || !b.End {
		t.Fatalf("the cancel: %v %v", b, err)
	}
	waitUntil(t, "the handler's context to end", m.canceled.Load)
	if _, err := h.read(stream, time.Second, false); remoteCode(err) != protocol.Error_NOT_FOUND {
		t.Fatalf("a read after the cancel: %v", err)
	}

	// A stream that ends: its last read says so, and it is forgotten.
	r, err = h.frame(p.request("GET", "/events", nil))
	if err != nil || r.GetHttp().Stream == 0 {
		t.Fatalf("a second stream: %v %v", r, err)
	}
	m.gate <- struct{}{}
	close(m.gate)
	if rest, failed := h.readAll(r.GetHttp().Stream); rest != "data: tick\n\n" || failed != "" {
		t.Fatalf("the second stream's rest: %q %q", rest, failed)
	}
	if _, err := h.read(r.GetHttp().Stream, time.Second, false); remoteCode(err) != protocol.Error_NOT_FOUND {
		t.Fatalf("a read after the end: %v", err)
	}

	// A panic after the headers fails that stream only.
	r, err = h.frame(p.request("GET", "/late-panic", nil))
	if err != nil || r.GetHttp().Stream == 0 || string(r.GetHttp().Body) != "begun" {
		t.Fatalf("the panicking stream's head: %v %v", r, err)
	}
	if rest, failed := h.readAll(r.GetHttp().Stream); rest != "" || !strings.Contains(failed, "after the headers") {
		t.Fatalf("the panicking stream: %q %q", rest, failed)
	}
	if r, err := h.frame(p.request("GET", "/quick", nil)); err != nil || string(r.GetHttp().Body) != "quick" {
		t.Fatalf("after a panicking stream: %v %v", r, err)
	}
}

// A stream holds at most streamBuffer bytes that were not read: its
// handler's writes wait for reads, and every byte arrives.
func TestSiteStreamBackpressure(t *testing.T) {
	m := newStreamMux()
	h := startApp(t, Site(m, SiteOptions{}), "w1")
	p := newPerson(t, h)
	r, err := h.frame(p.request("GET", "/hold", nil))
	if err != nil || r.GetHttp().Stream == 0 {
		t.Fatalf("the stream's head: %v %v", r, err)
	}
	waitUntil(t, "the buffer to fill", func() bool { return m.wrote.Load() >= streamBuffer })
	time.Sleep(50 * time.Millisecond)
	if n := m.wrote.Load(); n > streamBuffer {
		t.Fatalf("the handler wrote %d bytes with none read (bound %d)", n, streamBuffer)
	}
	rest, failed := h.readAll(r.GetHttp().Stream)
	if len(rest) != 80*64<<10 || failed != "" {
		t.Fatalf("read %d bytes (%q), want %d", len(rest), failed, 80*64<<10)
	}
}

// Past MaxStreams a flush does nothing: the response is sent whole.
func TestSiteStreamsBound(t *testing.T) {
	m := newStreamMux()
	h := startApp(t, Site(m, SiteOptions{MaxStreams: 1}), "w1")
	p := newPerson(t, h)
	r, err := h.frame(p.request("GET", "/events", nil))
	if err != nil || r.GetHttp().Stream == 0 {
		t.Fatalf("the first stream: %v %v", r, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	call := h.start(p.request("GET", "/events", nil))
	close(m.gate) // both handlers return
	env, err := call.Wait(ctx)
	if err != nil || env.GetFrameReply().GetHttp().Stream != 0 || string(env.GetFrameReply().GetHttp().Body) != "event: hello\n\n" {
		t.Fatalf("past the bound: %v %v", env, err)
	}
}

func headerOf(r *protocol.HTTPResponse, name string) string {
	for _, h := range r.Headers {
		if h.Name == name && len(h.Values) > 0 {
			return h.Values[0]
		}
	}
	return ""
}
