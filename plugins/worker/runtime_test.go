package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	goruntime "runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// testApp counts messages in its page tree and logs in on /login.
type testApp struct{}

func (testApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := SessionFrom(r.Context())
	switch r.URL.Path {
	case "/name":
		if err := s.NameConnection(r.URL.Query().Get("n")); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
	case "/login":
		if err := s.Login(r.URL.Query().Get("u")); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
	case "/boom":
		panic("boom")
	}
	_, _ = w.Write([]byte(s.Conn()))
}

func (testApp) OpenPage(ctx context.Context, p *Page) error { return p.Tree().Set("n", 0) }

func (testApp) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	if string(msg) == `"fail"` {
		return nil, errors.New("refused")
	}
	n := p.Tree().Number("n") + 1
	return n, p.Tree().Set("n", n)
}

// host is the test's side of one in-process worker.
type host struct {
	t    *testing.T
	peer *channel.Peer
	done chan struct{}
	// stop stops the worker and waits for it; idempotent.
	stop func()
}

func startWorker(t *testing.T) *host {
	t.Helper()
	return startApp(t, testApp{}, "w1")
}

// startApp serves app as the worker named id; the test's end stops it.
func startApp(t *testing.T, app App, id string) *host {
	t.Helper()
	return startAppWith(t, app, id, Options{Name: "test"})
}

func startAppWith(t *testing.T, app App, id string, opts Options) *host {
	t.Helper()
	h, w := channel.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ServeConn(ctx, app, opts, w)
	}()
	if _, err := channel.Accept(t.Context(), h, &protocol.HelloAck{WorkerId: id}); err != nil {
		t.Fatal(err)
	}
	hs := &host{t: t, peer: channel.NewPeer(h, nil), done: done}
	var once sync.Once
	hs.stop = func() {
		once.Do(func() {
			cancel()
			hs.peer.Close()
			<-done
		})
	}
	t.Cleanup(hs.stop)
	return hs
}

func (h *host) frame(f *protocol.Frame) (*protocol.FrameReply, error) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), 5*time.Second)
	defer cancel()
	env, err := h.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
	if err != nil {
		return nil, err
	}
	return env.GetFrameReply(), nil
}

func (h *host) get(user, conn, path string) *protocol.FrameReply {
	h.t.Helper()
	r, err := h.frame(&protocol.Frame{User: user, Conn: conn, Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: path}}})
	if err != nil {
		h.t.Fatalf("GET %s: %v", path, err)
	}
	return r
}

func TestNamingAndLogin(t *testing.T) {
	h := startWorker(t)
	r := h.get("", "", "/name?n=site-chosen")
	if r.Identity.Conn != "site-chosen" || r.WorkerId != "w1" {
		t.Fatalf("named connection: %+v", r.Identity)
	}
	r = h.get("", "", "/")
	if len(r.Identity.Conn) < 20 {
		t.Fatalf("SDK-chosen name %q is too short to be unguessable", r.Identity.Conn)
	}
	if r := h.get("", "", "/name?n=bad%20name"); r.GetHttp().Status != 400 {
		t.Fatalf("bad name accepted: %d", r.GetHttp().Status)
	}
	// Naming is only for the first request.
	if r := h.get("~site-chosen", "site-chosen", "/name?n=x"); r.GetHttp().Status != 400 {
		t.Fatalf("renaming accepted: %d", r.GetHttp().Status)
	}
	r = h.get("~site-chosen", "site-chosen", "/login?u=maria")
	if r.Identity.User != "maria" {
		t.Fatalf("login not reported: %+v", r.Identity)
	}
	for _, bad := range []string{"~maria", "", "a b"} {
		if r := h.get("~site-chosen", "site-chosen", "/login?u="+bad); r.GetHttp().Status != 400 {
			t.Fatalf("login as %q accepted", bad)
		}
	}
}

func TestPagesAndPanics(t *testing.T) {
	h := startWorker(t)
	conn := h.get("", "", "/").Identity.Conn
	u := "~" + conn
	open := func(page string, after uint64) *protocol.PageState {
		r, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "k", After: after}}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetOpened()
	}
	msg := func(page, data string) (*protocol.FrameReply, error) {
		return h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: page, Data: []byte(data)}}})
	}
	if st := open("p1", 0); st.Seq != 1 || st.Resync {
		t.Fatalf("new page: %+v", st)
	}
	for i := 0; i < 3; i++ {
		if _, err := msg("p1", `{}`); err != nil {
			t.Fatal(err)
		}
	}
	if r, _ := msg("p1", `"fail"`); r.GetMessage().Error != "refused" {
		t.Fatalf("app refusal: %+v", r)
	}
	if _, err := msg("nope", `{}`); err == nil || !strings.Contains(err.Error(), "not open") {
		t.Fatalf("message to an unknown page: %v", err)
	}
	// Resuming with a sequence the page never had asks for a resync.
	if st := open("p1", 99); !st.Resync {
		t.Fatalf("resume beyond the last sequence: %+v", st)
	}
	// A page unknown here but known to the client restarted clean.
	if st := open("p2", 7); !st.Resync || st.Notice == "" || st.Base != 0 {
		t.Fatalf("lost page: %+v", st)
	}
	// An app panic fails that frame only.
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/boom"}}}); err == nil {
		t.Fatal("panic not reported")
	}
	if _, err := msg("p1", `{}`); err != nil {
		t.Fatalf("worker unusable after a panic: %v", err)
	}
	env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := env.GetProbeReply(); p.Pages != 2 || p.Conns != 1 || p.Frames == 0 || p.RssBytes == 0 || p.CpuSeconds <= 0 {
		t.Fatalf("probe %+v", p)
	}
	// Release forgets the connection.
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Release{Release: &protocol.Release{}}}); err != nil {
		t.Fatal(err)
	}
	env, _ = h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if p := env.GetProbeReply(); p.Pages != 0 || p.Conns != 0 {
		t.Fatalf("probe after release %+v", p)
	}
}

func TestProbeReportsWhatEachUserConsumed(t *testing.T) {
	h := startWorker(t)
	probe := func() *protocol.ProbeReply {
		t.Helper()
		env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
		if err != nil {
			t.Fatal(err)
		}
		return env.GetProbeReply()
	}
	users := map[string]string{} // user key → conn
	for _, n := range []int{6, 1} {
		conn := h.get("", "", "/").Identity.Conn
		u := "~" + conn
		users[u] = conn
		if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
			t.Fatal(err)
		}
		for range n {
			if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(`{}`)}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[string]*protocol.UserUsage{}
	for _, u := range probe().PerUser {
		got[u.User] = u
	}
	if len(got) != 2 {
		t.Fatalf("per-user usage for %d users, want 2: %v", len(got), got)
	}
	var heavy, light *protocol.UserUsage
	for _, u := range got {
		if heavy == nil || u.Frames > heavy.Frames {
			heavy, light = u, heavy
		} else {
			light = u
		}
	}
	if heavy.Frames != 7 || light.Frames != 2 || heavy.StateBytes <= light.StateBytes || heavy.BusySeconds <= 0 {
		t.Fatalf("heavy %+v, light %+v", heavy, light)
	}
	// Nothing changed: nothing reported.
	if p := probe(); len(p.PerUser) != 0 || len(p.Left) != 0 {
		t.Fatalf("idle probe reports %v, left %v", p.PerUser, p.Left)
	}
	// Releasing the light user's only connection closes their account.
	if _, err := h.frame(&protocol.Frame{User: light.User, Conn: users[light.User], Kind: &protocol.Frame_Release{Release: &protocol.Release{}}}); err != nil {
		t.Fatal(err)
	}
	if p := probe(); len(p.Left) != 1 || p.Left[0] != light.User {
		t.Fatalf("left %v, want [%s]", p.Left, light.User)
	}
}

// A connection holds at most MaxPagesPerConn pages: the next open is
// refused with a message the page sees, an open page reopens, and closing
// one makes room.
func TestPageCountIsBounded(t *testing.T) {
	h := startWorker(t)
	conn := h.get("", "", "/").Identity.Conn
	u := "~" + conn
	open := func(page string) error {
		_, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: page, Kind: "k"}}})
		return err
	}
	for i := range DefaultMaxPagesPerConn {
		if err := open(fmt.Sprintf("p%d", i)); err != nil {
			t.Fatalf("page %d of %d: %v", i+1, DefaultMaxPagesPerConn, err)
		}
	}
	err := open("one-too-many")
	var re *channel.RemoteError
	if !errors.As(err, &re) || re.Code != protocol.Error_BAD_REQUEST || !strings.Contains(re.Message, "close one first") {
		t.Fatalf("page %d: %v, want a refusal that says why", DefaultMaxPagesPerConn+1, err)
	}
	env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil {
		t.Fatal(err)
	}
	if p := env.GetProbeReply(); p.PagesRefused != 1 || p.Pages != DefaultMaxPagesPerConn {
		t.Fatalf("probe: %d pages, %d opens refused; want %d and 1", p.Pages, p.PagesRefused, DefaultMaxPagesPerConn)
	}
	if err := open("p7"); err != nil {
		t.Fatalf("reopening an open page at the bound: %v", err)
	}
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Close{Close: &protocol.PageClose{Page: "p7"}}}); err != nil {
		t.Fatal(err)
	}
	if err := open("one-too-many"); err != nil {
		t.Fatalf("an open after a close made room: %v", err)
	}
}

// bigApp fills a page's tree with the number of bytes its message says.
type bigApp struct{ testApp }

func (bigApp) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	var n int
	if err := json.Unmarshal(msg, &n); err != nil {
		return nil, err
	}
	return n, p.Tree().Set("blob", strings.Repeat("x", n))
}

// A worker whose people all moved away gives their memory back: the
// probe's live heap and RSS return near where they were before they came
// (not when the heap next doubles, which an emptied worker may never do).
func TestEmptiedWorkerGivesMemoryBack(t *testing.T) {
	h := startApp(t, bigApp{}, "w1")
	probe := func() *protocol.ProbeReply {
		t.Helper()
		env, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
		if err != nil {
			t.Fatal(err)
		}
		return env.GetProbeReply()
	}
	debug.FreeOSMemory()
	base := probe()
	const people, size = 16, 4 << 20
	var users []string
	for i := range people {
		conn := h.get("", "", "/").Identity.Conn
		u := "~" + conn
		users = append(users, u)
		if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(strconv.Itoa(size))}}}); err != nil {
			t.Fatalf("filling person %d: %v", i, err)
		}
	}
	goruntime.GC()
	full := probe()
	if full.HeapBytes < base.HeapBytes+people*size {
		t.Fatalf("live heap %d MiB with %d people of 4 MiB, from %d MiB", full.HeapBytes>>20, people, base.HeapBytes>>20)
	}
	// Everyone moves away: frozen, then evicted, as the road does.
	for _, u := range users {
		if _, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: u, Epoch: 2}}}); err != nil {
			t.Fatal(err)
		}
		if err := h.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: u}}}); err != nil {
			t.Fatal(err)
		}
	}
	// The test's side let go of the packages; the worker's release comes
	// within about a second. The live heap must come back within 20 % of
	// the empty worker's (plus 4 MiB for this test's own garbage), and the
	// RSS within the same of where it was.
	deadline := time.Now().Add(15 * time.Second)
	var got *protocol.ProbeReply
	for {
		got = probe()
		heapOK := got.HeapBytes <= base.HeapBytes*12/10+4<<20
		// Under the race detector the process keeps its shadow memory.
		rssOK := raceEnabled || base.RssBytes == 0 || got.RssBytes <= base.RssBytes*12/10+16<<20
		if heapOK && rssOK && got.Users == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after everyone left: live heap %d MiB (empty %d, full %d), RSS %d MiB (empty %d, full %d), %d users",
				got.HeapBytes>>20, base.HeapBytes>>20, full.HeapBytes>>20, got.RssBytes>>20, base.RssBytes>>20, full.RssBytes>>20, got.Users)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("live heap %d → %d → %d MiB, RSS %d → %d → %d MiB", base.HeapBytes>>20, full.HeapBytes>>20, got.HeapBytes>>20,
		base.RssBytes>>20, full.RssBytes>>20, got.RssBytes>>20)
}
