package front

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// mapDir is a Directory over fixed routes.
type mapDir struct{ routes map[string]placement.Route }

func (d *mapDir) Lookup(conn string) (placement.Route, bool) {
	rt, ok := d.routes[conn]
	return rt, ok
}
func (d *mapDir) Place(context.Context) (string, error) { return "w1", nil }
func (d *mapDir) Connect(_ context.Context, conn, user, worker string) (placement.Route, error) {
	return placement.Route{Conn: conn, User: user, Worker: worker}, nil
}
func (d *mapDir) Login(_ context.Context, conn, user string, _ map[string]string) (placement.Route, string, error) {
	return placement.Route{Conn: conn, User: user, Worker: "w1"}, "w1", nil
}
func (d *mapDir) Watch(string) <-chan struct{} { return make(chan struct{}) }

// echoWorker is a Dispatcher whose one worker answers every frame at once:
// a message with its own data (`"sold out"` and `"refuse"` with the app's
// refusals, with a code and without), an HTTP request with 200 and the frame's
// connection. It counts the frames it served, by connection.
type echoWorker struct {
	client *channel.Peer
	mu     sync.Mutex
	served map[string]int
}

func newEchoWorker(t *testing.T) *echoWorker {
	a, b := channel.Pipe()
	w := &echoWorker{served: map[string]int{}}
	var srv *channel.Peer
	srv = channel.NewPeer(b, func(env *protocol.Envelope) {
		fr := env.GetFrame()
		w.mu.Lock()
		w.served[fr.Conn]++
		w.mu.Unlock()
		rep := &protocol.FrameReply{WorkerId: "w1"}
		switch k := fr.Kind.(type) {
		case *protocol.Frame_Message:
			res := &protocol.MessageResult{Data: k.Message.Data}
			switch string(k.Message.Data) {
			case `"sold out"`: // the app's refusal, with its code
				res = &protocol.MessageResult{Error: "the last one just went", Code: "sold_out", Retry: true}
			case `"refuse"`: // the app's refusal, without one
				res = &protocol.MessageResult{Error: "no such op"}
			}
			rep.Kind = &protocol.FrameReply_Message{Message: res}
		case *protocol.Frame_Http:
			rep.Kind = &protocol.FrameReply_Http{Http: &protocol.HTTPResponse{Status: 200, Body: []byte(fr.Conn)}}
		}
		_ = srv.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_FrameReply{FrameReply: rep}})
	})
	w.client = channel.NewPeer(a, nil)
	t.Cleanup(func() { _ = w.client.Close(); _ = srv.Close() })
	return w
}

func (w *echoWorker) Send(_ context.Context, _ string, f *protocol.Frame) (*channel.Call, error) {
	return w.client.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
}

func (w *echoWorker) count(conn string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.served[conn]
}

// testFront serves a Front over two people: conns "c1" and "c1b" are
// person "u1" (two tabs), "c2" is person "u2".
func testFront(t *testing.T, cfg Config) (*Front, *echoWorker, *httptest.Server) {
	t.Helper()
	w := newEchoWorker(t)
	cfg.Directory = &mapDir{routes: map[string]placement.Route{
		"c1":  {Conn: "c1", User: "u1", Worker: "w1", Epoch: 1},
		"c1b": {Conn: "c1b", User: "u1", Worker: "w1", Epoch: 1},
		"c2":  {Conn: "c2", User: "u2", Worker: "w1", Epoch: 1},
	}}
	cfg.Dispatcher = w
	if cfg.CookieKeys == nil {
		cfg.CookieKeys = [][]byte{[]byte(keyA)}
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(func() { f.Close(); srv.Close() })
	return f, w, srv
}

func dialAs(t *testing.T, srv *httptest.Server, cookie string) *websocket.Conn {
	t.Helper()
	h := http.Header{"Cookie": {"stickyd_conn=" + cookie}}
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+Prefix+"ws", h)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("dialing: %v (HTTP %d)", err, code)
	}
	t.Cleanup(func() { _ = ws.Close() })
	return ws
}

// sendOps sends n msg ops with ids from first and returns the answers by id.
func sendOps(t *testing.T, ws *websocket.Conn, first, n int) map[uint64]answer {
	t.Helper()
	for i := range n {
		o := op{Op: "msg", ID: uint64(first + i), Page: "p", Data: json.RawMessage(`{"n":1}`)}
		if err := ws.WriteJSON(o); err != nil {
			t.Fatal(err)
		}
	}
	got := map[uint64]answer{}
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for len(got) < n {
		var a answer
		if err := ws.ReadJSON(&a); err != nil {
			t.Fatalf("reading answers (%d of %d): %v", len(got), n, err)
		}
		got[a.ID] = a
	}
	return got
}

func postOp(t *testing.T, srv *httptest.Server, cookie string, id int) (*http.Response, answer) {
	t.Helper()
	req, _ := http.NewRequest("POST", srv.URL+Prefix+"op", strings.NewReader(`{"op":"msg","id":`+itoa(id)+`,"page":"p","data":{"n":1}}`))
	req.Header.Set("Cookie", "stickyd_conn="+cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a answer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	return resp, a
}

func getSite(t *testing.T, srv *httptest.Server, cookie string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", srv.URL+"/page", nil)
	req.Header.Set("Cookie", "stickyd_conn="+cookie)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}

// tracked is how many people have a bucket now.
func (l *frameLimiter) tracked() int { return l.buckets.size() }

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// One person's frames, all their tabs and transports together, are held to
// frame_rate with a burst: what is over it is refused with a retryable
// rate_limited error (429 on HTTP), never run and never dropped in silence,
// and counted; another person is not touched; time refills the bucket.
func TestFrameRateLimit(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, w, srv := testFront(t, Config{FrameRate: 1, FrameBurst: 3, Registry: reg})
	var clock atomic.Int64
	clock.Store(time.Unix(1000, 0).UnixNano())
	f.limiter.now = func() time.Time { return time.Unix(0, clock.Load()) }
	c1, c1b, c2 := f.ring().sign("c1", f.userOf("c1"), time.Now()), f.ring().sign("c1b", f.userOf("c1b"), time.Now()), f.ring().sign("c2", f.userOf("c2"), time.Now())

	// The burst of 3 on the first tab, then refusals, on either tab.
	got := sendOps(t, dialAs(t, srv, c1), 1, 5)
	for id := uint64(1); id <= 5; id++ {
		a := got[id]
		if id <= 3 && (a.Op != "reply" || string(a.Data) != `{"n":1}`) {
			t.Fatalf("op %d within the burst: %+v", id, a)
		}
		if id > 3 && (a.Op != "error" || a.Code != "rate_limited" || !a.Retry || a.Error == "") {
			t.Fatalf("op %d over the burst: %+v, want a retryable rate_limited error", id, a)
		}
	}
	tab2 := dialAs(t, srv, c1b)
	if a := sendOps(t, tab2, 10, 1)[10]; a.Code != "rate_limited" {
		t.Fatalf("the person's second tab has a bucket of its own: %+v", a)
	}
	resp, a := postOp(t, srv, c1, 20)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || a.Op != "error" || a.Code != "rate_limited" || a.ID != 20 {
		t.Fatalf("POST op over the limit: %d %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), a)
	}
	if resp := getSite(t, srv, c1); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("site request over the limit: %d", resp.StatusCode)
	}
	if n := w.count("c1") + w.count("c1b"); n != 3 {
		t.Fatalf("the worker served %d frames of u1, want the 3 of the burst", n)
	}

	// Another person has their own bucket.
	for id, a := range sendOps(t, dialAs(t, srv, c2), 1, 3) {
		if a.Op != "reply" {
			t.Fatalf("u2's op %d: %+v", id, a)
		}
	}

	// A second later one token is back: one frame passes, the next not.
	clock.Add(int64(time.Second))
	got = sendOps(t, tab2, 30, 2)
	if got[30].Op != "reply" || got[31].Code != "rate_limited" {
		t.Fatalf("after a second: %+v %+v, want one reply then rate_limited", got[30], got[31])
	}

	for via, want := range map[string]float64{viaWebSocket: 4, viaOp: 1, viaSite: 1} {
		if n := testutil.ToFloat64(f.limiter.refused.WithLabelValues(via)); n != want {
			t.Errorf("refusals via %s counted %v, want %v", via, n, want)
		}
	}

	// Quiet people's full buckets are forgotten at the next sweep.
	if n := f.limiter.tracked(); n != 2 {
		t.Fatalf("%d buckets, want u1's and u2's", n)
	}
	clock.Add(int64(2 * sweepEvery))
	if !f.limiter.allow("u3", viaWebSocket) {
		t.Fatal("a newcomer was refused")
	}
	if n := f.limiter.tracked(); n != 1 {
		t.Fatalf("%d buckets after the sweep, want only the newcomer's", n)
	}
}

// Without frame_rate (the default) nothing is limited: a closed-loop page
// far faster than a person types is never refused.
func TestFrameRateOffByDefault(t *testing.T) {
	f, w, srv := testFront(t, Config{})
	if f.limiter != nil {
		t.Fatal("a limiter without a frame_rate")
	}
	ws := dialAs(t, srv, f.ring().sign("c1", f.userOf("c1"), time.Now()))
	for round := range 20 {
		for id, a := range sendOps(t, ws, round*50, 50) {
			if a.Op != "reply" {
				t.Fatalf("op %d: %+v", id, a)
			}
		}
	}
	if n := w.count("c1"); n != 1000 {
		t.Fatalf("served %d frames, want 1000", n)
	}
}

func TestFrameRateChecks(t *testing.T) {
	for _, cfg := range []Config{{FrameRate: -1}, {FrameBurst: -1}} {
		cfg.Directory, cfg.Dispatcher, cfg.CookieKeys = &mapDir{}, &echoWorker{}, [][]byte{[]byte(keyA)}
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%+v: error %v", cfg, err)
		}
	}
	f, _, _ := testFront(t, Config{FrameRate: 50})
	if f.limiter.buckets.burst != 100 {
		t.Fatalf("default burst %d, want twice the rate", f.limiter.buckets.burst)
	}
}

// The front verifies with every key of its ring and signs with the first:
// a cookie of the older key still opens its connection, one of a dropped
// key (or tampered) opens nothing, and each check is counted by result.
func TestFrontCookieKeyRing(t *testing.T) {
	older, dropped := mustRing(t, keyA), mustRing(t, keyC)
	reg := prometheus.NewRegistry()
	f, w, srv := testFront(t, Config{CookieKeys: [][]byte{[]byte(keyB), []byte(keyA)}, Registry: reg})

	if a := sendOps(t, dialAs(t, srv, older.sign("c1", "u1", time.Now())), 1, 1)[1]; a.Op != "reply" {
		t.Fatalf("the older key's cookie: %+v", a)
	}
	if a := sendOps(t, dialAs(t, srv, f.ring().sign("c2", f.userOf("c2"), time.Now())), 1, 1)[1]; a.Op != "reply" {
		t.Fatalf("the current key's cookie: %+v", a)
	}
	good := older.sign("c1", "u1", time.Now())
	for what, value := range map[string]string{
		"dropped key": dropped.sign("c1", "u1", time.Now()),
		"tampered":    tamper(good),
	} {
		h := http.Header{"Cookie": {"stickyd_conn=" + value}}
		_, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+Prefix+"ws", h)
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: websocket opened (err %v)", what, err)
		}
		// On the site it names nobody: the request is a newcomer's.
		if resp := getSite(t, srv, value); resp.StatusCode != 200 {
			t.Fatalf("%s: site request %d", what, resp.StatusCode)
		}
	}
	if n := w.count("c1"); n != 1 {
		t.Fatalf("c1 was served %d frames, want only its own cookie's", n)
	}
	for result, want := range map[string]float64{"current_key": 1, "older_key": 1, "invalid": 4} {
		if n := testutil.ToFloat64(f.cookieChecks.WithLabelValues(result)); n != want {
			t.Errorf("cookie checks %s = %v, want %v", result, n, want)
		}
	}

	// New cookies are signed with the first key.
	if _, _, _, ok := older.check(f.ring().sign("c9", f.userOf("c9"), time.Now())); ok {
		t.Fatal("the front signs new cookies with the older key")
	}
}

// A text frame that is not UTF-8 fails the WebSocket with 1007 (RFC 6455
// §8.1), after the frames before it were answered.
func TestWebSocketInvalidUTF8(t *testing.T) {
	f, _, srv := testFront(t, Config{})
	ws := dialAs(t, srv, f.ring().sign("c1", f.userOf("c1"), time.Now()))
	if a := sendOps(t, ws, 1, 1)[1]; a.Op != "reply" {
		t.Fatalf("a valid op: %+v", a)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte("{\"op\":\"msg\",\"id\":2,\"page\":\"p\",\"data\":\"\xff\xfe\"}")); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := ws.ReadMessage()
	if !websocket.IsCloseError(err, websocket.CloseInvalidFramePayloadData) {
		t.Fatalf("after an invalid UTF-8 text frame: %v, want close 1007", err)
	}
}

// tamper changes one character of a cookie's MAC, in its middle (the last
// characters of unpadded base64 may carry bits nobody decodes).
func tamper(cookie string) string {
	b := []byte(cookie)
	i := len(b) - 10
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	return string(b)
}
