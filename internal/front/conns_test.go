package front

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// get sends one keep-alive request on c and reads the answer.
func get(t *testing.T, c net.Conn, br *bufio.Reader, path string) *http.Response {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to %s: %v", path, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// Up to the bound, connections are served and kept; past it a request is
// refused with 503 (a health check answered), each such connection closed
// after its answer; a connection closed frees its place.
func TestListenerBoundsConnections(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, _, _ := testFront(t, Config{Registry: reg})
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := f.Limit(raw, 3)
	srv := &http.Server{Handler: f}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := raw.Addr().String()

	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	var held []net.Conn
	for i := range 3 {
		c, br := dial()
		if resp := get(t, c, br, Prefix+"health"); resp.StatusCode != 200 {
			t.Fatalf("connection %d within the bound: HTTP %d", i+1, resp.StatusCode)
		}
		held = append(held, c)
	}
	c, br := dial()
	resp := get(t, c, br, "/")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !resp.Close {
		t.Fatalf("past the bound: HTTP %d, Retry-After %q, close %v", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Close)
	}
	c, br = dial()
	if resp := get(t, c, br, Prefix+"health"); resp.StatusCode != 200 {
		t.Fatalf("a health check past the bound: HTTP %d", resp.StatusCode)
	}
	if n := testutil.ToFloat64(ln.refused); n != 2 {
		t.Fatalf("%v refusals counted, want 2", n)
	}

	// A held connection closes: its place is free again.
	_ = held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for ln.Open() > 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	c, br = dial()
	if resp := get(t, c, br, "/"); resp.StatusCode == http.StatusServiceUnavailable {
		t.Fatalf("a place freed, yet refused: %d open", ln.Open())
	}
	if n := testutil.ToFloat64(ln.refused); n != 2 {
		t.Fatalf("%v refusals counted, want still 2", n)
	}
}

// A body slower than the body timeout is answered 408, not waited for.
func TestBodyTimeout(t *testing.T) {
	_, _, srv := testFront(t, Config{BodyTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// Half of a 100-byte body, then nothing.
	if _, err := io.WriteString(c, "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"+strings.Repeat("a", 50)); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("a stalled body: HTTP %d after %v, want 408", resp.StatusCode, time.Since(began))
	}
}

// The public health check says the status and whether a worker is ready;
// the details (workers, counts, the restart report) only to the token.
func TestHealthDetailsBehindTheToken(t *testing.T) {
	f, _, _ := testFront(t, Config{HealthToken: "tok", Health: func() map[string]any {
		return map[string]any{"ready": 2, "workers": []string{"w-pid-123"}, "users": 7}
	}})
	for _, tt := range []struct {
		auth string
		want string
	}{
		{"", `{"ready":true,"status":"ok"}`},
		{"Bearer wrong", `{"ready":true,"status":"ok"}`},
		{"Bearer tok", `{"ready":true,"status":"ok","users":7,"workers":["w-pid-123"]}`},
	} {
		req := httptest.NewRequest("GET", Prefix+"health", nil)
		if tt.auth != "" {
			req.Header.Set("Authorization", tt.auth)
		}
		rec := httptest.NewRecorder()
		f.ServeHTTP(rec, req)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != tt.want {
			t.Errorf("%q: %d %s, want %s", tt.auth, rec.Code, got, tt.want)
		}
	}
}
