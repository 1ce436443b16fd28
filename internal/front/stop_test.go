package front

import (
	"bytes"
	"context"
	"mime/multipart"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
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

// A multipart upload of a file of max_body_bytes goes through (its
// framing is not counted against the file); a file over it is refused.
func TestMultipartFileOfTheLimitUploads(t *testing.T) {
	const limit = 1 << 20
	f, _, srv := testFront(t, Config{MaxBodyBytes: limit})
	cookie := f.ring().sign("c1", f.userOf("c1"), time.Now())
	upload := func(size int) int {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		_ = mw.WriteField("title", "a report")
		fw, _ := mw.CreateFormFile("file", "report.bin")
		_, _ = fw.Write(bytes.Repeat([]byte("x"), size))
		_ = mw.Close()
		req, _ := http.NewRequest("POST", srv.URL+"/upload", &body)
		req.Header.Set("Content-Type", mw.FormDataContentType())
		req.Header.Set("Cookie", "stickyd_conn="+cookie)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := upload(limit); code != 200 {
		t.Fatalf("a file of max_body_bytes: HTTP %d, want 200", code)
	}
	if code := upload(limit + multipartSlack); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("a file over max_body_bytes and the slack: HTTP %d, want 413", code)
	}
}
