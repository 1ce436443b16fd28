package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// siteMux is an ordinary net/http site for the tests. Its per-person state
// is the connection's Values.
type siteMux struct {
	*http.ServeMux
	gate    chan struct{} // /block waits for one token
	mu      sync.Mutex    // guards started
	started []string      // the conns whose /block started, in order
}

func newSiteMux() *siteMux {
	m := &siteMux{ServeMux: http.NewServeMux(), gate: make(chan struct{})}
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, SessionFrom(r.Context()).Conn())
	})
	// /append?i=N appends N to the connection's log, after a pause that
	// would reorder the requests if they ran side by side.
	m.HandleFunc("GET /append", func(w http.ResponseWriter, r *http.Request) {
		s := SessionFrom(r.Context())
		i, _ := strconv.Atoi(r.URL.Query().Get("i"))
		log, _ := s.Values().Get("log").([]any)
		time.Sleep(time.Duration(i%3) * time.Millisecond)
		if err := s.Values().Set("log", append(slices.Clone(log), i)); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	m.HandleFunc("GET /log", func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(SessionFrom(r.Context()).Values().Get("log"))
	})
	m.HandleFunc("GET /block", func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.started = append(m.started, SessionFrom(r.Context()).Conn())
		m.mu.Unlock()
		select {
		case <-m.gate:
		case <-r.Context().Done():
		}
	})
	m.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "first ")
		w.(http.Flusher).Flush()
		if err := http.NewResponseController(w).Flush(); err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		_, _ = io.WriteString(w, "second")
	})
	m.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(w, r.Body)
	})
	m.HandleFunc("GET /huge", func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				if !errors.Is(err, ErrBodyTooLarge) {
					panic(err)
				}
				return
			}
		}
	})
	m.HandleFunc("GET /boom", func(http.ResponseWriter, *http.Request) { panic("boom on the pool") })
	return m
}

func (m *siteMux) startedConns() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.started)
}

// person is a connection of the site, named by its first request.
type person struct{ user, conn string }

func newPerson(t *testing.T, h *host) person {
	t.Helper()
	conn := h.get("", "", "/").Identity.Conn
	return person{user: protocol.AnonymousUser(conn), conn: conn}
}

func (p person) request(method, url string, body []byte) *protocol.Frame {
	return &protocol.Frame{User: p.user, Conn: p.conn, Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: method, Url: url, Body: body}}}
}

// start sends a frame without waiting for its answer.
func (h *host) start(f *protocol.Frame) *channel.Call {
	h.t.Helper()
	c, err := h.peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// call sends env and waits for its answer within d.
func (h *host) call(env *protocol.Envelope, d time.Duration) (*protocol.Envelope, error) {
	ctx, cancel := context.WithTimeout(h.t.Context(), d)
	defer cancel()
	return h.peer.Call(ctx, env)
}

func (h *host) probe(d time.Duration) (*protocol.ProbeReply, error) {
	env, err := h.call(&protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}}, d)
	if err != nil {
		return nil, err
	}
	return env.GetProbeReply(), nil
}

func remoteCode(err error) protocol.Error_Code {
	var re *channel.RemoteError
	if errors.As(err, &re) {
		return re.Code
	}
	return -1
}

// Each person's requests run one at a time, in arrival order, though the
// pool serves several people side by side.
func TestSiteKeepsEachPersonsOrder(t *testing.T) {
	h := startApp(t, Site(newSiteMux(), SiteOptions{Workers: 4}), "w1")
	people := []person{newPerson(t, h), newPerson(t, h), newPerson(t, h)}
	const n = 30
	var calls []*channel.Call
	for i := range n {
		for _, p := range people {
			calls = append(calls, h.start(p.request("GET", "/append?i="+strconv.Itoa(i), nil)))
		}
	}
	for _, c := range calls {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		_, err := c.Wait(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	for _, p := range people {
		r, err := h.frame(p.request("GET", "/log", nil))
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		if err := json.Unmarshal(r.GetHttp().Body, &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s's requests ran as %v", p.conn, got)
		}
	}
}

// A saturated pool: requests past the queue are refused at once as
// retryable, while probes and the freeze of an idle person answer at once;
// the freeze of a person whose request waits for the pool waits for it.
func TestSitePoolSaturated(t *testing.T) {
	m := newSiteMux()
	h := startApp(t, Site(m, SiteOptions{Workers: 2, QueueMax: 2}), "w1")
	var people []person
	for range 8 {
		people = append(people, newPerson(t, h))
	}
	// Nothing ends while the gate is shut: two run, two wait, and the
	// other four are refused, whatever the order they arrive in.
	type result struct {
		p   person
		err error
	}
	results := make(chan result, len(people))
	for _, p := range people {
		c := h.start(p.request("GET", "/block", nil))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := c.Wait(ctx)
			results <- result{p, err}
		}()
	}
	refused := map[string]bool{}
	for range len(people) - 4 {
		r := <-results
		if remoteCode(r.err) != protocol.Error_UNAVAILABLE || !strings.Contains(r.err.Error(), "busy") {
			t.Fatalf("a request past the queue: %v", r.err)
		}
		refused[r.p.conn] = true
	}
	waitUntil(t, "two requests running", func() bool { return len(m.startedConns()) == 2 })
	var waiting person
	for _, p := range people {
		if !refused[p.conn] && !slices.Contains(m.startedConns(), p.conn) {
			waiting = p
		}
	}
	newcomer := &protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/"}}}
	if _, err := h.frame(newcomer); remoteCode(err) != protocol.Error_UNAVAILABLE {
		t.Fatalf("a newcomer past the queue: %v", err)
	}
	// Service operations do not wait for the pool.
	for range 5 {
		r, err := h.probe(time.Second)
		if err != nil {
			t.Fatalf("probe while the pool is saturated: %v", err)
		}
		if r.MailboxDepth != 2 {
			t.Fatalf("probe counts %d waiting, want the 2 in the pool's queue", r.MailboxDepth)
		}
	}
	var idle person
	for _, p := range people {
		if refused[p.conn] {
			idle = p
		}
	}
	if _, err := h.call(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: idle.user, Epoch: 1}}}, time.Second); err != nil {
		t.Fatalf("freeze of an idle person while the pool is saturated: %v", err)
	}
	// The freeze of a waiting person waits for their request.
	fz, err := h.peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: waiting.user, Epoch: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		m.gate <- struct{}{}
	}
	for range 4 {
		if r := <-results; r.err != nil {
			t.Fatalf("%s's request: %v", r.p.conn, r.err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	env, err := fz.Wait(ctx)
	if err != nil || env.GetFrozen() == nil || env.GetFrozen().Conns != 1 {
		t.Fatalf("freeze after the person's request: %v %v", env, err)
	}
	if !slices.Contains(m.startedConns(), waiting.conn) {
		t.Fatalf("the frozen person's request never ran: %v", m.startedConns())
	}
}

// The pool itself: its bound, a freeze's hurry past the queue, and its
// close, which lets waiting requests go and waits for running ones.
func TestSitePoolQueue(t *testing.T) {
	p := newSitePool(1, 2)
	gate := make(chan struct{})
	var mu sync.Mutex // guards ran
	var ran []string
	type result struct {
		user string
		err  error
	}
	results := make(chan result, 3)
	serve := func(user string) {
		_, _, err := p.serve(user, func() {
			mu.Lock()
			ran = append(ran, user)
			mu.Unlock()
			<-gate
		}, nil)
		results <- result{user, err}
	}
	go serve("a")
	waitUntil(t, "a to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 1 })
	go serve("b")
	waitUntil(t, "b to wait", func() bool { return p.waiting() == 1 })
	go serve("c")
	waitUntil(t, "c to wait", func() bool { return p.waiting() == 2 })
	if _, _, err := p.serve("d", func() { t.Error("d ran past the bound") }, nil); err == nil || errCode(err) != protocol.Error_UNAVAILABLE {
		t.Fatalf("past the bound: %v", err)
	}
	p.expedite("c")
	gate <- struct{}{}
	waitUntil(t, "the next to run", func() bool { mu.Lock(); defer mu.Unlock(); return len(ran) == 2 })
	p.settle("c")
	if len(p.hurry) != 0 {
		t.Fatalf("hurry left: %v", p.hurry)
	}
	mu.Lock()
	if ran[1] != "c" {
		t.Fatalf("ran %v: c's freeze should have put it before b", ran)
	}
	mu.Unlock()
	// Close: b, still waiting, is let go; c, running, is waited for.
	closed := make(chan struct{})
	go func() {
		p.close()
		close(closed)
	}()
	got := map[string]error{}
	for range 2 {
		r := <-results
		got[r.user] = r.err
	}
	if err, ok := got["a"]; !ok || err != nil {
		t.Fatalf("a, which ran: %v", got)
	}
	if err, ok := got["b"]; !ok || err != errSiteStopping {
		t.Fatalf("b, waiting at close: %v", got)
	}
	select {
	case <-closed:
		t.Fatal("close did not wait for the running request")
	case <-time.After(20 * time.Millisecond):
	}
	gate <- struct{}{}
	<-closed
	if r := <-results; r.user != "c" || r.err != nil {
		t.Fatalf("c, running at close: %+v", r)
	}
	if _, _, err := p.serve("e", func() {}, nil); err != errSiteStopping {
		t.Fatalf("after close: %v", err)
	}
	p.close() // idempotent
}

// A flushing handler streams (stream_test.go has the rest), bodies of 8
// MiB cross both ways, and a response past MaxBodyBytes is refused.
func TestSiteBodies(t *testing.T) {
	h := startApp(t, Site(newSiteMux(), SiteOptions{MaxBodyBytes: 2 << 20}), "w1")
	p := newPerson(t, h)
	r, err := h.frame(p.request("GET", "/stream", nil))
	if err != nil || r.GetHttp().Status != 200 || string(r.GetHttp().Body) != "first " || r.GetHttp().Stream == 0 {
		t.Fatalf("flushing handler: %v %v", r, err)
	}
	if rest, failed := h.readAll(r.GetHttp().Stream); rest != "second" || failed != "" {
		t.Fatalf("the stream's rest: %q %q", rest, failed)
	}
	big := make([]byte, 8<<20)
	_, _ = rand.Read(big)
	h2 := startApp(t, Site(newSiteMux(), SiteOptions{}), "w2")
	p2 := newPerson(t, h2)
	r, err = h2.frame(p2.request("POST", "/echo", big))
	if err != nil || r.GetHttp().Status != 200 || !bytes.Equal(r.GetHttp().Body, big) {
		t.Fatalf("8 MiB echo: %v, %d bytes back", err, len(r.GetHttp().GetBody()))
	}
	if _, err := h.frame(p.request("GET", "/huge", nil)); remoteCode(err) != protocol.Error_INTERNAL || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("4 MiB past a 2 MiB bound: %v", err)
	}
	if r, err := h.frame(p.request("POST", "/echo", big[:1<<20])); err != nil || len(r.GetHttp().Body) != 1<<20 {
		t.Fatalf("the worker after a refused response: %v", err)
	}
}

// A handler's panic on the pool fails that request only; the pages of a
// site are empty and refuse messages unless the site handles them.
func TestSitePanicsAndPages(t *testing.T) {
	h := startApp(t, Site(newSiteMux(), SiteOptions{}), "w1")
	p := newPerson(t, h)
	if _, err := h.frame(p.request("GET", "/boom", nil)); remoteCode(err) != protocol.Error_INTERNAL || !strings.Contains(err.Error(), "boom on the pool") {
		t.Fatalf("panic: %v", err)
	}
	if r, err := h.frame(p.request("GET", "/", nil)); err != nil || string(r.GetHttp().Body) != p.conn {
		t.Fatalf("after a panic: %v %v", r, err)
	}
	open := &protocol.Frame{User: p.user, Conn: p.conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: SitePageKind}}}
	if r, err := h.frame(open); err != nil || r.GetOpened().Seq != 0 {
		t.Fatalf("open: %v %v", r, err)
	}
	msg := &protocol.Frame{User: p.user, Conn: p.conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`{}`)}}}
	if r, err := h.frame(msg); err != nil || r.GetMessage().Error != ErrHTTPOnly.Error() {
		t.Fatalf("message: %v %v", r, err)
	}

	echo := func(_ context.Context, pg *Page, m json.RawMessage) (any, error) { return pg.Kind() + string(m), nil }
	h2 := startApp(t, Site(newSiteMux(), SiteOptions{Message: echo}), "w2")
	p2 := newPerson(t, h2)
	open.User, open.Conn, msg.User, msg.Conn = p2.user, p2.conn, p2.user, p2.conn
	if _, err := h2.frame(open); err != nil {
		t.Fatal(err)
	}
	if r, err := h2.frame(msg); err != nil || string(r.GetMessage().Data) != `"site{}"` {
		t.Fatalf("message with SiteOptions.Message: %v %v", r, err)
	}
}

// What a site keeps in the connection's Values moves with the person.
func TestSiteValuesMove(t *testing.T) {
	from := startApp(t, Site(newSiteMux(), SiteOptions{}), "w1")
	to := startApp(t, Site(newSiteMux(), SiteOptions{}), "w2")
	p := newPerson(t, from)
	for i := range 3 {
		if _, err := from.frame(p.request("GET", fmt.Sprintf("/append?i=%d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	env, err := from.call(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: p.user, Epoch: 1}}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := to.call(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: p.user, Epoch: 1, Package: env.GetFrozen().Package}}}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	f := p.request("GET", "/log", nil)
	f.Epoch = 1
	r, err := to.frame(f)
	if err != nil || string(bytes.TrimSpace(r.GetHttp().Body)) != "[0,1,2]" || r.WorkerId != "w2" {
		t.Fatalf("after the move: %v %v", r, err)
	}
	if _, err := from.frame(f); remoteCode(err) != protocol.Error_MOVED {
		t.Fatalf("the old worker after the freeze: %v", err)
	}
}

// A worker that stops with requests running and waiting leaves no
// goroutine behind.
func TestSiteStopsCleanly(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	m := newSiteMux()
	h := startApp(t, Site(m, SiteOptions{Workers: 1, QueueMax: 4}), "w1")
	a, b := newPerson(t, h), newPerson(t, h)
	h.start(a.request("GET", "/block", nil))
	h.start(b.request("GET", "/block", nil))
	waitUntil(t, "one running, one waiting", func() bool {
		r, err := h.probe(time.Second)
		return err == nil && r.MailboxDepth == 1 && len(m.startedConns()) == 1
	})
	h.stop()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
