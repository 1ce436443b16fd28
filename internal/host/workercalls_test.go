package host

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// tableLauncher runs workers that answer every request and pass the table
// changes they get on changes, naming themselves.
type tableLauncher struct {
	changes chan string
}

func (l *tableLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	host, wk := channel.Pipe()
	go func() {
		if _, err := channel.Greet(context.Background(), wk, &protocol.Hello{ProtocolVersion: protocol.Version, App: "tables"}); err != nil {
			wk.Close()
			return
		}
		var p *channel.Peer
		p = channel.NewIdlePeer(wk, func(env *protocol.Envelope) {
			if c := env.GetTableChange(); c != nil {
				l.changes <- id + " " + c.Table + " " + string(c.Data) + " from " + c.Origin
				_ = p.Reply(env.Id, &protocol.Envelope{})
				return
			}
			_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{}}})
		})
		p.Listen()
	}()
	return fakeProc{host}, host, nil
}

// replies is a Replier that keeps what it is told.
type replies struct {
	mu  sync.Mutex // guards got
	got map[uint64]*protocol.Envelope
	ch  chan uint64
}

func newReplies() *replies {
	return &replies{got: map[uint64]*protocol.Envelope{}, ch: make(chan uint64, 16)}
}

func (r *replies) Reply(id uint64, env *protocol.Envelope) error {
	r.mu.Lock()
	r.got[id] = env
	r.mu.Unlock()
	r.ch <- id
	return nil
}

func (r *replies) ReplyError(id uint64, code protocol.Error_Code, msg string) error {
	return r.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: code, Message: msg}}})
}

// wait returns the reply to id.
func (r *replies) wait(t *testing.T, id uint64) *protocol.Envelope {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		env := r.got[id]
		r.mu.Unlock()
		if env != nil {
			return env
		}
		select {
		case <-r.ch:
		case <-deadline:
			t.Fatalf("no reply to %d", id)
		}
	}
}

// waitFor polls cond until it holds, for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func startWorkerCalls(t *testing.T, cfg WorkerCallsConfig) *WorkerCalls {
	t.Helper()
	c, err := NewWorkerCalls(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Stop)
	return c
}

// A table's subscriptions are recorded in the maps; a change published by
// one worker reaches the others that watch the table, and only them; an
// ended worker's subscriptions go.
func TestWorkerCallsTables(t *testing.T) {
	l := newMemLog()
	tl := &tableLauncher{changes: make(chan string, 8)}
	pool := New(nil, []GroupSpec{{Name: "web", Workers: 3, Launcher: tl}})
	defer pool.Close()
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	router := NewRouter(RouterConfig{Name: "a1", Pool: pool, Maps: l.f})
	defer router.Close()
	c := startWorkerCalls(t, WorkerCallsConfig{Maps: l.f, Log: l, Router: router, Registry: prometheus.NewRegistry()})

	sub := func(worker string, tables ...string) {
		c.FromWorker(worker, 1, &protocol.Envelope{Body: &protocol.Envelope_Tables{Tables: &protocol.Tables{Tables: tables}}}, newReplies())
	}
	sub("web-1", "orders")
	sub("web-2", "orders")
	sub("web-3", "stock")
	waitFor(t, "the subscriptions are in the maps", func() bool {
		return len(l.f.Subscribers("orders")) == 2 && len(l.f.Subscribers("stock")) == 1
	})
	c.FromWorker("web-1", 1, &protocol.Envelope{Body: &protocol.Envelope_Publish{Publish: &protocol.Publish{Table: "orders", Data: []byte("7")}}}, newReplies())
	select {
	case got := <-tl.changes:
		if got != "web-2 orders 7 from web-1" {
			t.Fatalf("change %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher got no change")
	}
	c.Ended("web-2", 1)
	waitFor(t, "an ended worker's subscriptions go", func() bool { return len(l.f.Subscribers("orders")) == 1 })
	select {
	case got := <-tl.changes:
		t.Fatalf("a worker that does not watch got %q", got)
	default:
	}
}

// A grant is acquired, committed to and read back; another incarnation
// cannot commit with it, and the worker's end releases it.
func TestWorkerCallsStore(t *testing.T) {
	l := newMemLog()
	c := startWorkerCalls(t, WorkerCallsConfig{Maps: l.f, Log: l})
	r := newReplies()

	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 1, Body: &protocol.Envelope_GrantAcquire{GrantAcquire: &protocol.GrantAcquire{
		Paths: []string{"carts/ana"}, User: "ana", LeaseMs: 60_000}}}, r)
	g := r.wait(t, 1).GetGrantReply()
	if g == nil || g.Id == 0 {
		t.Fatalf("acquire answered %v", r.wait(t, 1))
	}
	commit := &protocol.GrantCommit{Id: g.Id, Token: g.Token, Set: map[string][]byte{"carts/ana/n": []byte("2")}}
	c.FromWorker("web-1", 2, &protocol.Envelope{Id: 2, Body: &protocol.Envelope_GrantCommit{GrantCommit: commit}}, r)
	if e := r.wait(t, 2).GetError(); e == nil || e.Code != protocol.Error_STALE_GRANT {
		t.Fatalf("another incarnation's commit: %v", r.wait(t, 2))
	}
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 3, Body: &protocol.Envelope_GrantCommit{GrantCommit: commit}}, r)
	if e := r.wait(t, 3).GetError(); e != nil {
		t.Fatalf("commit: %v", e)
	}
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 4, Body: &protocol.Envelope_StoreGet{StoreGet: &protocol.StoreGet{Paths: []string{"carts/ana/n"}}}}, r)
	if v := r.wait(t, 4).GetStoreValues(); v == nil || string(v.Values["carts/ana/n"]) != "2" {
		t.Fatalf("read back %v", r.wait(t, 4))
	}
	c.Ended("web-1", 1)
	waitFor(t, "the ended worker's grant is released", func() bool { return len(l.f.GrantsOf("web-1#1")) == 0 })
}

// Gateway calls and logouts go to the agent's functions, a gateway call
// with the calls' stop; what the host does not handle is refused.
func TestWorkerCallsDispatch(t *testing.T) {
	l := newMemLog()
	stops := make(chan (<-chan struct{}), 1)
	forgot := make(chan string, 1)
	c := startWorkerCalls(t, WorkerCallsConfig{Maps: l.f, Log: l,
		Gateway: func(stop <-chan struct{}, worker string, env *protocol.Envelope, r Replier) { stops <- stop },
		Forget:  func(worker, user string) { forgot <- worker + " " + user }})
	r := newReplies()

	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 1, Body: &protocol.Envelope_GatewayCall{GatewayCall: &protocol.GatewayCall{}}}, r)
	c.FromWorker("web-1", 1, &protocol.Envelope{Body: &protocol.Envelope_Forget{Forget: &protocol.Forget{User: "ana"}}}, r)
	if got := <-forgot; got != "web-1 ana" {
		t.Fatalf("forgot %q", got)
	}
	stop := <-stops
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 2, Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}}, r)
	if e := r.wait(t, 2).GetError(); e == nil || e.Code != protocol.Error_BAD_REQUEST || !strings.Contains(e.Message, "does not handle") {
		t.Fatalf("an unhandled request: %v", r.wait(t, 2))
	}
	c.Stop()
	select {
	case <-stop:
	default:
		t.Fatal("the gateway's stop is open after Stop")
	}

	// Without the agent's functions, a gateway call is refused too.
	bare := startWorkerCalls(t, WorkerCallsConfig{Maps: l.f, Log: l})
	bare.FromWorker("web-1", 1, &protocol.Envelope{Id: 3, Body: &protocol.Envelope_GatewayCall{GatewayCall: &protocol.GatewayCall{}}}, r)
	if e := r.wait(t, 3).GetError(); e == nil || e.Code != protocol.Error_BAD_REQUEST {
		t.Fatalf("a gateway call without a gateway: %v", r.wait(t, 3))
	}
}

// Read your writes: a commit's answer says an index at which it is
// applied; a read that asks for an index this replica has not reached
// waits for it (the replica catching up answers it), and past the bound is
// refused, never answered stale.
func TestWorkerCallsReadYourWrites(t *testing.T) {
	l := newMemLog()
	c := startWorkerCalls(t, WorkerCallsConfig{Maps: l.f, Log: l})
	r := newReplies()
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 1, Body: &protocol.Envelope_GrantAcquire{GrantAcquire: &protocol.GrantAcquire{
		Paths: []string{"k"}, LeaseMs: 60_000}}}, r)
	g := r.wait(t, 1).GetGrantReply()
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 2, Body: &protocol.Envelope_GrantCommit{GrantCommit: &protocol.GrantCommit{
		Id: g.Id, Token: g.Token, Set: map[string][]byte{"k": []byte("1")}}}}, r)
	committed := r.wait(t, 2).GetGrantCommit().GetIndex()
	if committed == 0 || committed < l.f.Index() {
		t.Fatalf("the commit's answer says index %d; the maps are at %d", committed, l.f.Index())
	}
	// A read that needs an index the replica has not reached waits for it.
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 3, Body: &protocol.Envelope_StoreGet{StoreGet: &protocol.StoreGet{Paths: []string{"k"}, MinIndex: committed + 1}}}, r)
	time.Sleep(100 * time.Millisecond)
	r.mu.Lock()
	early := r.got[3]
	r.mu.Unlock()
	if early != nil {
		t.Fatalf("a read needing index %d was answered at %d: %v", committed+1, l.f.Index(), early)
	}
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 4, Body: &protocol.Envelope_GrantAcquire{GrantAcquire: &protocol.GrantAcquire{
		Paths: []string{"other"}, LeaseMs: 60_000}}}, r) // an entry: the replica moves on
	if v := r.wait(t, 3).GetStoreValues(); v == nil || v.Index < committed+1 || string(v.Values["k"]) != "1" {
		t.Fatalf("the waiting read: %v", r.wait(t, 3))
	}
	// Past the bound: refused.
	replicaWait = 50 * time.Millisecond
	t.Cleanup(func() { replicaWait = 5 * time.Second })
	c.FromWorker("web-1", 1, &protocol.Envelope{Id: 5, Body: &protocol.Envelope_StoreGet{StoreGet: &protocol.StoreGet{Paths: []string{"k"}, MinIndex: l.f.Index() + 100}}}, r)
	if e := r.wait(t, 5).GetError(); e == nil || e.Code != protocol.Error_UNAVAILABLE || !strings.Contains(e.Message, "behind") {
		t.Fatalf("a read its replica cannot reach: %v", r.wait(t, 5))
	}
}
