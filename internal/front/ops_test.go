package front

import (
	"bytes"
	"encoding/json"
	"io"
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

// The front says the largest message it reads, and holds to it: a batching
// socket's hello and every fallback answer carry front.max_message_bytes;
// a WebSocket message of that size is read, one byte more closes the socket
// with 1009; a fallback op past it is answered 413 too_large whole, its
// body still being sent (with a length, or chunked), never a reset.
func TestMessageLimitIsSaidAndHeld(t *testing.T) {
	const limit = 1024
	f, _, srv := testFront(t, Config{MaxMessageBytes: limit})
	c1 := f.ring().sign("c1", f.userOf("c1"), time.Now())
	// sized is a msg op of exactly n bytes.
	sized := func(id, n int) []byte {
		o := `{"op":"msg","id":` + itoa(id) + `,"page":"p","data":"`
		return []byte(o + strings.Repeat("x", n-len(o)-2) + `"}`)
	}

	h := http.Header{"Cookie": {"stickyd_conn=" + c1}}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+Prefix+"ws?batch=1", h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.Close() })
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hello struct {
		Op              string `json:"op"`
		MaxMessageBytes int64  `json:"max_message_bytes"`
	}
	if err := ws.ReadJSON(&hello); err != nil || hello.Op != "hello" || hello.MaxMessageBytes != limit {
		t.Fatalf("hello %+v (%v), want max_message_bytes %d", hello, err, limit)
	}
	if err := ws.WriteMessage(websocket.TextMessage, sized(1, limit)); err != nil {
		t.Fatal(err)
	}
	var a answer
	if err := ws.ReadJSON(&a); err != nil || a.Op != "reply" || a.ID != 1 {
		t.Fatalf("a message of the limit: %+v %v", a, err)
	}
	if err := ws.WriteMessage(websocket.TextMessage, sized(2, limit+1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ws.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
		t.Fatalf("a message one byte over the limit: %v, want close 1009", err)
	}

	big := sized(3, 2<<20)
	for _, chunked := range []bool{false, true} {
		var body io.Reader = bytes.NewReader(big)
		if chunked {
			body = io.MultiReader(body) // no length known: sent chunked
		}
		req, _ := http.NewRequest("POST", srv.URL+Prefix+"op", body)
		req.Header.Set("Cookie", "stickyd_conn="+c1)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("chunked %v: a 2 MiB op: %v, want its 413", chunked, err)
		}
		var a answer
		err = json.NewDecoder(resp.Body).Decode(&a)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge || a.Code != "too_large" || a.Retry {
			t.Fatalf("chunked %v: a 2 MiB op: %d %+v %v, want 413 too_large", chunked, resp.StatusCode, a, err)
		}
		if got := resp.Header.Get(maxMessageHeader); got != itoa(limit) {
			t.Fatalf("chunked %v: %s %q, want %d", chunked, maxMessageHeader, got, limit)
		}
	}
}

// An app's refusal reaches the page as a reply with the app's error, code
// ("refused" when the app said none) and retry, on the WebSocket and on the
// fallback alike.
func TestAppRefusalCarriesCodeAndRetry(t *testing.T) {
	f, _, srv := testFront(t, Config{})
	c1 := f.ring().sign("c1", f.userOf("c1"), time.Now())
	ws := dialAs(t, srv, c1)
	for i, tc := range []struct {
		data, code string
		retry      bool
	}{
		{`"sold out"`, "sold_out", true},
		{`"refuse"`, "refused", false},
	} {
		body := `{"op":"msg","id":` + itoa(i+1) + `,"page":"p","data":` + tc.data + `}`
		if err := ws.WriteMessage(websocket.TextMessage, []byte(body)); err != nil {
			t.Fatal(err)
		}
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		var onWS answer
		if err := ws.ReadJSON(&onWS); err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("POST", srv.URL+Prefix+"op", strings.NewReader(body))
		req.Header.Set("Cookie", "stickyd_conn="+c1)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var onPost answer
		err = json.NewDecoder(resp.Body).Decode(&onPost)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on the fallback: %d %v", tc.data, resp.StatusCode, err)
		}
		for via, a := range map[string]answer{"the WebSocket": onWS, "the fallback": onPost} {
			if a.Op != "reply" || a.Error == "" || a.Code != tc.code || a.Retry != tc.retry {
				t.Errorf("%s on %s: %+v, want a reply with error, code %q, retry %v", tc.data, via, a, tc.code, tc.retry)
			}
		}
	}
}
