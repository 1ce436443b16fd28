package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/fsm"
)

// A call to another agent sends the token and the body as they are, and a
// refusal comes back with its status and the maps' sentinel error.
func TestRemoteCallsAndRefusals(t *testing.T) {
	var gotToken string
	var gotBody []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotToken = r.Header.Get("X-Stickyd-Token")
		gotBody, _ = io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/v1/internal/apply":
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"error": "moving", "kind": "busy"}`)
		case "/v1/broken":
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, "<html>proxy</html>")
		default:
			_, _ = io.WriteString(w, `{"name": "s1", "raft_addr": "127.0.0.1:1"}`)
		}
	}))
	defer srv.Close()
	r := NewRemote("tok", false, client.NewTransport(nil))
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	var s Self
	if err := r.Call(ctx, "GET", addr, "/v1/agent/self", nil, &s); err != nil || s.Name != "s1" {
		t.Fatalf("self: %+v, %v", s, err)
	}
	if gotToken != "tok" {
		t.Fatalf("token %q", gotToken)
	}
	entry := []byte{0x07, 0x00, 0xff, '{'}
	_, err := r.Fetch(ctx, "POST", addr, "/v1/internal/apply", entry)
	if !bytes.Equal(gotBody, entry) {
		t.Fatalf("body %x, want %x", gotBody, entry)
	}
	var re *Refusal
	if !errors.As(err, &re) || re.Status != http.StatusConflict || !errors.Is(err, fsm.ErrBusy) {
		t.Fatalf("refusal: %v (%T)", err, err)
	}
	_, err = r.Fetch(ctx, "GET", addr, "/v1/broken", nil)
	if !errors.As(err, &re) || re.Status != http.StatusBadGateway || !strings.Contains(err.Error(), "502") {
		t.Fatalf("a page that is not the API's: %v", err)
	}
	if _, err := r.Fetch(ctx, "GET", "127.0.0.1:1", "/v1/agent/self", nil); err == nil || errors.As(err, &re) {
		t.Fatalf("nobody listening: %v", err)
	}
}
