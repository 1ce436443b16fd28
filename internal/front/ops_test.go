package front

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Every answer of the long-poll fallback is an op answer, refusals too:
// "op": "error" with a code a client can act on, and the HTTP status that
// goes with it (a client that took any JSON as a reply hammered the front
// with 401s as if they were answers).
func TestFallbackRefusalsAreOpAnswers(t *testing.T) {
	f, _, srv := testFront(t, Config{MaxMessageBytes: 1024})
	c1 := f.ring().sign("c1", f.userOf("c1"), time.Now())
	post := func(cookie, body string) (int, answer) {
		t.Helper()
		req, _ := http.NewRequest("POST", srv.URL+Prefix+"op", strings.NewReader(body))
		if cookie != "" {
			req.Header.Set("Cookie", "stickyd_conn="+cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var a answer
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
			t.Fatalf("%s: the answer is not JSON: %v", body, err)
		}
		return resp.StatusCode, a
	}
	msg := `{"op":"msg","id":7,"page":"p","data":{"n":1}}`
	for _, tc := range []struct {
		name, cookie, body string
		status             int
		code               string
	}{
		{"no cookie", "", msg, http.StatusUnauthorized, "no_connection"},
		{"a forged cookie", "c1.forged", msg, http.StatusUnauthorized, "no_connection"},
		{"over max_message_bytes", c1, `{"op":"msg","id":8,"page":"p","data":"` + strings.Repeat("x", 2048) + `"}`, http.StatusRequestEntityTooLarge, "too_large"},
		{"not JSON", c1, `{"op":`, http.StatusBadRequest, "bad_request"},
		{"an unknown op", c1, `{"op":"jump","id":9,"page":"p"}`, http.StatusBadRequest, "bad_request"},
	} {
		status, a := post(tc.cookie, tc.body)
		if status != tc.status || a.Op != "error" || a.Code != tc.code || a.Error == "" || a.Retry {
			t.Errorf("%s: %d %+v, want %d and an op error %q", tc.name, status, a, tc.status, tc.code)
		}
	}
	if status, a := post(c1, msg); status != http.StatusOK || a.Op != "reply" || a.ID != 7 {
		t.Fatalf("a good op: %d %+v", status, a)
	}
}

// A front that stops closes its sockets with 1001, going away, which
// client.js answers by reconnecting.
func TestStoppingFrontSaysGoingAway(t *testing.T) {
	f, _, srv := testFront(t, Config{})
	ws := dialAs(t, srv, f.ring().sign("c1", f.userOf("c1"), time.Now()))
	f.Close()
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
		t.Fatalf("a stopping front closed the socket with %v, want 1001", err)
	}
}

// An idle socket is pinged every PingInterval by the front's one pinger,
// and one whose client stops answering pongs is closed once the pong wait
// (twice the interval, and the write timeout) has gone by.
func TestIdleSocketsArePinged(t *testing.T) {
	f, _, srv := testFront(t, Config{PingInterval: 40 * time.Millisecond, WriteTimeout: 100 * time.Millisecond})
	answering := dialAs(t, srv, f.ring().sign("c1", f.userOf("c1"), time.Now()))
	silent := dialAs(t, srv, f.ring().sign("c2", f.userOf("c2"), time.Now()))
	var pings atomic.Int64
	answering.SetPingHandler(func(data string) error {
		pings.Add(1)
		return answering.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
	})
	// A client reads to see control frames; the silent one answers none.
	silent.SetPingHandler(func(string) error { return nil })
	silentEnd := make(chan error, 1)
	go func() {
		for {
			if _, _, err := silent.ReadMessage(); err != nil {
				silentEnd <- err
				return
			}
		}
	}()
	go func() {
		for {
			if _, _, err := answering.ReadMessage(); err != nil {
				return
			}
		}
	}()
	select {
	case <-silentEnd:
	case <-time.After(10 * time.Second):
		t.Fatal("a socket that answers no ping is still open after 10 s")
	}
	// The answering socket is pinged on, and kept.
	for deadline := time.Now().Add(5 * time.Second); pings.Load() < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the answering socket was pinged %d times in 5 s, want at least 3", pings.Load())
		}
	}
	// The answering socket is still open: an op goes through.
	if err := answering.WriteJSON(op{Op: "msg", ID: 1, Page: "p", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatalf("the answering socket: %v", err)
	}
}
