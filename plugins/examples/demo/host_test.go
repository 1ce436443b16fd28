package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/store"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// testHost is a stickyd host in one process, for the tests of what the demo
// does with the global store and the tables: it runs demo workers on
// in-memory channels (worker.ServeConn, as stickyd dev does), answers their
// store calls from one in-memory global store (internal/store, the state
// machine the supervisor replicates) and carries each table change a worker
// publishes to every other worker, as an agent does for the workers that
// watch the table. So the SDK's real Get, Acquire, Commit, Publish and
// OnTableChange run; what the agent adds (raft, leases expiring on their
// own, moves) is left out, and the tests make what they need of it happen.
type testHost struct {
	t *testing.T

	mu     sync.Mutex // guards st, nextID, wake, stale, onStale, lag, old
	st     *store.Store
	nextID uint64
	// wake is closed, and replaced, whenever the store changed: grants
	// waiting their turn look again.
	wake chan struct{}
	// stale is how many of the next commits find their grant gone, as when
	// its lease ran out; onStale runs then, to write what another person
	// did meanwhile.
	stale   int
	onStale func(h *testHost)
	// lag is how many of the next reads answer from old, a replica that
	// has not caught up yet.
	lag int
	old *store.Store

	workers []*testWorker
}

// testWorker is one demo worker of the host.
type testWorker struct {
	id   string
	h    *testHost
	peer *channel.Peer
}

// startHost runs n demo workers, w1 .. wn, until the test ends.
func startHost(t *testing.T, n int) *testHost {
	t.Helper()
	h := &testHost{t: t, st: store.New(), wake: make(chan struct{})}
	for i := 1; i <= n; i++ {
		h.workers = append(h.workers, h.startWorker(fmt.Sprintf("w%d", i)))
	}
	return h
}

func (h *testHost) startWorker(id string) *testWorker {
	h.t.Helper()
	hostEnd, workerEnd := channel.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	app := New()
	app.log = hclog.NewNullLogger()
	go func() {
		defer close(done)
		_ = worker.ServeConn(ctx, app, worker.Options{Name: "demo", Logger: hclog.NewNullLogger()}, workerEnd)
	}()
	if _, err := channel.Accept(h.t.Context(), hostEnd, &protocol.HelloAck{WorkerId: id}); err != nil {
		h.t.Fatalf("greeting worker %s: %v", id, err)
	}
	w := &testWorker{id: id, h: h}
	w.peer = channel.NewIdlePeer(hostEnd, w.handle)
	w.peer.Listen()
	h.t.Cleanup(func() {
		cancel()
		w.peer.Close()
		<-done
	})
	return w
}

// handle takes what the worker sends unasked; it must not block.
func (w *testWorker) handle(env *protocol.Envelope) {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Publish:
		for _, o := range w.h.workers {
			if o != w {
				w.h.tell(o, b.Publish.Table, b.Publish.Data, w.id)
			}
		}
	case *protocol.Envelope_StoreGet, *protocol.Envelope_GrantAcquire, *protocol.Envelope_GrantCommit, *protocol.Envelope_GrantRelease:
		go w.storeCall(env)
	}
}

// tell sends a table change to worker o; data nil is what a worker's pages
// hear after their person moved.
func (h *testHost) tell(o *testWorker, table string, data []byte, origin string) {
	_ = o.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: table, Data: data, Origin: origin}}})
}

func (w *testWorker) storeCall(env *protocol.Envelope) {
	h := w.h
	reply := func(body *protocol.Envelope, err error) {
		if err == nil {
			_ = w.peer.Reply(env.Id, body)
			return
		}
		code := protocol.Error_BAD_REQUEST
		if errors.Is(err, store.ErrStaleGrant) || errors.Is(err, store.ErrUnknownGrant) {
			code = protocol.Error_STALE_GRANT
		}
		_ = w.peer.ReplyError(env.Id, code, err.Error())
	}
	now := time.Now().UnixNano()
	switch b := env.Body.(type) {
	case *protocol.Envelope_StoreGet:
		h.mu.Lock()
		st := h.st
		if h.lag > 0 {
			h.lag--
			st = h.old
		}
		vals, err := st.Get(b.StoreGet.Paths)
		h.mu.Unlock()
		reply(&protocol.Envelope{Body: &protocol.Envelope_StoreValues{StoreValues: &protocol.StoreValues{Values: bytesOf(vals)}}}, err)
	case *protocol.Envelope_GrantAcquire:
		r, err := h.acquire(w.id, b.GrantAcquire)
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantReply{GrantReply: r}}, err)
	case *protocol.Envelope_GrantCommit:
		c := b.GrantCommit
		h.mu.Lock()
		if h.stale > 0 {
			h.stale--
			_, _ = h.st.Release(c.Id, now)
			if h.onStale != nil {
				h.onStale(h)
			}
		}
		_, err := h.st.Commit(c.Id, c.Token, rawOf(c.Set), c.Delete, now)
		h.changedLocked()
		h.mu.Unlock()
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantCommit{GrantCommit: &protocol.GrantCommit{}}}, err)
	case *protocol.Envelope_GrantRelease:
		h.mu.Lock()
		_, err := h.st.Release(b.GrantRelease.Id, now)
		h.changedLocked()
		h.mu.Unlock()
		if errors.Is(err, store.ErrUnknownGrant) {
			err = nil // it ended already
		}
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantRelease{GrantRelease: &protocol.GrantRelease{}}}, err)
	}
}

// acquire asks the store for a grant and waits until it is held.
func (h *testHost) acquire(owner string, req *protocol.GrantAcquire) (*protocol.GrantReply, error) {
	h.mu.Lock()
	h.nextID++
	id := h.nextID
	_, err := h.st.Acquire(id, store.Owner{Worker: owner, User: req.User}, req.Paths, time.Duration(req.LeaseMs)*time.Millisecond, time.Now().UnixNano())
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	timeout := time.NewTimer(time.Duration(req.WaitMs) * time.Millisecond)
	defer timeout.Stop()
	for {
		h.mu.Lock()
		g, ok := h.st.Grant(id)
		wake := h.wake
		h.mu.Unlock()
		switch {
		case !ok:
			return nil, fmt.Errorf("grant %d ended before it was held", id)
		case g.State == store.StateHeld:
			return &protocol.GrantReply{Id: g.ID, Token: g.Token, Values: bytesOf(g.Content), LeaseMs: g.Lease.Milliseconds()}, nil
		}
		select {
		case <-wake:
		case <-timeout.C:
			h.mu.Lock()
			_, _ = h.st.Release(id, time.Now().UnixNano())
			h.changedLocked()
			h.mu.Unlock()
			return nil, fmt.Errorf("no grant on %v in time", req.Paths)
		}
	}
}

func (h *testHost) changedLocked() {
	close(h.wake)
	h.wake = make(chan struct{})
}

// put writes the store as another person would, without telling anyone.
func (h *testHost) put(set map[string]any) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.putLocked(set); err != nil {
		h.t.Fatal(err)
	}
}

func (h *testHost) putLocked(set map[string]any) error {
	paths := make([]string, 0, len(set))
	raw := map[string]json.RawMessage{}
	for p, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		paths, raw[p] = append(paths, p), b
	}
	now := time.Now().UnixNano()
	h.nextID++
	res, err := h.st.Acquire(h.nextID, store.Owner{Worker: "test"}, paths, time.Minute, now)
	if err != nil || len(res.Granted) != 1 {
		return fmt.Errorf("putting %v: %v (granted %v)", set, err, res.Granted)
	}
	if _, err := h.st.Commit(h.nextID, res.Granted[0].Token, raw, nil, now); err != nil {
		return fmt.Errorf("putting %v: %w", set, err)
	}
	h.changedLocked()
	return nil
}

// lagBehind makes the next n reads answer from the store as it is now, as
// a replica that has not caught up with what comes next would.
func (h *testHost) lagBehind(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.old, h.lag = h.st.Clone(), n
}

// get reads the store: path → the value it holds, decoded.
func (h *testHost) get(paths ...string) map[string]any {
	h.t.Helper()
	h.mu.Lock()
	vals, err := h.st.Get(paths)
	h.mu.Unlock()
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]any{}
	for p, b := range vals {
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			h.t.Fatal(err)
		}
		out[p] = v
	}
	return out
}

func bytesOf(m map[string]json.RawMessage) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func rawOf(m map[string][]byte) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// testTab is one page of a person on a worker, as the page client holds it:
// its tree is built from the deltas it pulls.
type testTab struct {
	t          *testing.T
	w          *testWorker
	user, conn string
	page       string
	after      uint64
	tree       map[string]any
}

// open opens a page of kind for user (a connection of their own) on w.
func (w *testWorker) open(t *testing.T, user, kind string) *testTab {
	t.Helper()
	tb := &testTab{t: t, w: w, user: user, conn: "c-" + user + "-" + kind, page: "p-" + kind, tree: map[string]any{}}
	r := tb.frame(&protocol.Frame_Open{Open: &protocol.PageOpen{Page: tb.page, Kind: kind}})
	if r.GetOpened() == nil {
		t.Fatalf("opening a %s page for %s: %v", kind, user, r)
	}
	tb.pull(0)
	return tb
}

func (tb *testTab) frame(kind any) *protocol.FrameReply {
	tb.t.Helper()
	r, err := tb.call(kind)
	if err != nil {
		tb.t.Fatal(err)
	}
	return r
}

// call sends one frame of the page's connection; it may run on any
// goroutine.
func (tb *testTab) call(kind any) (*protocol.FrameReply, error) {
	f := &protocol.Frame{User: tb.user, Conn: tb.conn}
	switch k := kind.(type) {
	case *protocol.Frame_Open:
		f.Kind = k
	case *protocol.Frame_Message:
		f.Kind = k
	case *protocol.Frame_Pull:
		f.Kind = k
	case *protocol.Frame_Http:
		f.Kind = k
	default:
		return nil, fmt.Errorf("frame kind %T", kind)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env, err := tb.w.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", tb.user, tb.w.id, err)
	}
	return env.GetFrameReply(), nil
}

// message sends a message and returns its answer and the error the page
// sees; err is a failure to deliver it. It may run on any goroutine.
func (tb *testTab) message(msg string) (answer json.RawMessage, refused string, err error) {
	r, err := tb.call(&protocol.Frame_Message{Message: &protocol.PageMessage{Page: tb.page, Data: []byte(msg)}})
	if err != nil {
		return nil, "", err
	}
	m := r.GetMessage()
	if m == nil {
		return nil, "", fmt.Errorf("%s: message %s: no message result: %v", tb.user, msg, r)
	}
	return m.Data, m.Error, nil
}

// try sends a message and returns its answer or the error the page sees.
func (tb *testTab) try(msg string) (json.RawMessage, string) {
	tb.t.Helper()
	data, refused, err := tb.message(msg)
	if err != nil {
		tb.t.Fatal(err)
	}
	return data, refused
}

// staleNext makes the next n commits find their grant gone, as when its
// lease ran out; meanwhile (nil: nothing) runs at each, to write what
// another person did in the meantime.
func (h *testHost) staleNext(n int, meanwhile func(h *testHost)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stale, h.onStale = n, meanwhile
}

// send sends a message that must succeed and decodes its answer into v
// (nil: ignored); then the page pulls what the message wrote.
func (tb *testTab) send(msg string, v any) {
	tb.t.Helper()
	data, errText := tb.try(msg)
	if errText != "" {
		tb.t.Fatalf("%s: message %s: %s", tb.user, msg, errText)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			tb.t.Fatalf("%s: answer %s: %v", tb.user, data, err)
		}
	}
	tb.pull(0)
}

// pull applies the deltas the page has, waiting up to wait for a first one.
func (tb *testTab) pull(wait time.Duration) {
	tb.t.Helper()
	r := tb.frame(&protocol.Frame_Pull{Pull: &protocol.PagePull{Page: tb.page, After: tb.after, WaitMs: uint32(wait / time.Millisecond)}})
	for _, d := range r.GetDeltas().GetDeltas() {
		if d.Seq <= tb.after {
			continue
		}
		var v any
		if len(d.Value) > 0 {
			if err := json.Unmarshal(d.Value, &v); err != nil {
				tb.t.Fatal(err)
			}
		}
		switch {
		case d.Op == protocol.Delta_RESET || (d.Op == protocol.Delta_SET && d.Path == ""):
			m, _ := v.(map[string]any)
			if m == nil {
				m = map[string]any{}
			}
			tb.tree = m
		case d.Op == protocol.Delta_DELETE:
			delete(tb.tree, d.Path) // the customer page's tree is flat
		default:
			if strings.Contains(d.Path, "/") {
				tb.t.Fatalf("a nested delta %q: the customer page's tree is flat", d.Path)
			}
			tb.tree[d.Path] = v
		}
		tb.after = d.Seq
	}
}

// waitFor pulls until the page's tree satisfies cond, or fails the test.
func (tb *testTab) waitFor(what string, cond func(tree map[string]any) bool) {
	tb.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond(tb.tree) {
		if time.Now().After(deadline) {
			tb.t.Fatalf("%s on %s: timed out waiting for %s; tree %v", tb.user, tb.w.id, what, tb.tree)
		}
		tb.pull(100 * time.Millisecond)
	}
}
