package front

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
)

// holdWorker takes every frame and answers none: a request held by a
// maintenance window, or by a slow app.
type holdWorker struct{ client *channel.Peer }

func (w *holdWorker) Send(_ context.Context, _ string, f *protocol.Frame) (*channel.Call, error) {
	return w.client.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
}

// A site request still waiting when the front closes is answered 503 with
// Retry-After, not cut: the server's Shutdown lets the handler write it.
func TestStopAnswersHeldSiteRequests(t *testing.T) {
	a, b := channel.Pipe()
	held := make(chan struct{}, 1)
	srvPeer := channel.NewPeer(b, func(*protocol.Envelope) { held <- struct{}{} })
	w := &holdWorker{client: channel.NewPeer(a, nil)}
	t.Cleanup(func() { _ = w.client.Close(); _ = srvPeer.Close() })
	f, err := New(Config{
		Directory:    &mapDir{routes: map[string]placement.Route{"c1": {Conn: "c1", User: "u1", Worker: "w1", Epoch: 1}}},
		Dispatcher:   w,
		CookieKeys:   [][]byte{[]byte(keyA)},
		FrameTimeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: f}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	cookie := f.ring().sign("c1", f.userOf("c1"), time.Now())
	got := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest("POST", "http://"+ln.Addr().String()+"/orders", nil)
		req.Header.Set("Cookie", "stickyd_conn="+cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("the held request was cut: %v", err)
			got <- nil
			return
		}
		resp.Body.Close()
		got <- resp
	}()
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the worker")
	}
	// As the agent stops its front: close it, let the handlers answer,
	// then close what is left.
	f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	resp := <-got
	if resp == nil {
		return
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("the held request got %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}
