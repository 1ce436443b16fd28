// Package workertest runs a stickyd App in a unit test, with no agent and no
// subprocess: the app's worker on an in-memory channel that carries the same
// encoded envelopes as a plugin's, driven the way the front drives it, and
// in-memory stand-ins for what the host provides: the global store and its
// grants, table changes between workers, the AI gateway and maintenance
// windows.
//
//	h := workertest.New(t, taskboard.New())
//	tab := h.Person("ana").Open("board")
//	if _, err := tab.Send(map[string]any{"op": "add", "title": "write the guide"}); err != nil {
//		t.Fatal(err)
//	}
//	var tasks map[string]taskboard.Task
//	h.Store.Decode("board/tasks", &tasks)
//
// A Host is for one test; its workers stop when the test ends.
package workertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// callTimeout bounds one frame's answer: a test that waits longer is stuck.
const callTimeout = 30 * time.Second

// Host is the app's workers, their people, and the host's stand-ins.
type Host struct {
	t       testing.TB
	workers []*hostWorker
	// Store is the global store the app's Get, Acquire and Update read and
	// write; a test seeds and checks it.
	Store *Store

	mu     sync.Mutex
	models map[string]func(worker.GatewayRequest) (worker.GatewayResponse, error)
	maint  uint64 // the last maintenance notice's version
	down   map[string]bool
	people int
}

type hostWorker struct {
	id   string
	peer *channel.Peer
	subs map[string]bool // the tables its pages subscribe to
}

// Option changes a Host.
type Option func(*config)

type config struct{ workers int }

// Workers runs n workers of the app (default 1): people are spread over
// them, and a table published on one reaches the pages of the others, as
// in a pool.
func Workers(n int) Option { return func(c *config) { c.workers = max(n, 1) } }

// New starts the app's workers for the test t.
func New(t testing.TB, app worker.App, opts ...Option) *Host {
	t.Helper()
	cfg := config{workers: 1}
	for _, o := range opts {
		o(&cfg)
	}
	h := &Host{t: t, Store: newStore(), models: map[string]func(worker.GatewayRequest) (worker.GatewayResponse, error){}, down: map[string]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for i := range cfg.workers {
		w := &hostWorker{id: fmt.Sprintf("test-%d", i+1), subs: map[string]bool{}}
		hostSide, workerSide := channel.Pipe()
		done := make(chan error, 1)
		go func() {
			done <- worker.ServeConn(ctx, app, worker.Options{Name: "test", Version: "test"}, workerSide)
		}()
		actx, acancel := context.WithTimeout(ctx, callTimeout)
		_, err := channel.Accept(actx, hostSide, &protocol.HelloAck{WorkerId: w.id, Group: "test"})
		acancel()
		if err != nil {
			t.Fatalf("workertest: starting worker %s: %v", w.id, err)
		}
		w.peer = channel.NewPeer(hostSide, func(env *protocol.Envelope) { h.serve(w, env) })
		w.peer.Listen()
		h.workers = append(h.workers, w)
		t.Cleanup(func() {
			w.peer.Close()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
			}
		})
	}
	return h
}

// serve answers what a worker asks of its host, or takes its notice.
func (h *Host) serve(w *hostWorker, env *protocol.Envelope) {
	switch b := env.Body.(type) {
	case *protocol.Envelope_StoreGet:
		h.reply(w, env.Id, &protocol.Envelope{Body: &protocol.Envelope_StoreValues{StoreValues: &protocol.StoreValues{Values: h.Store.get(b.StoreGet.Paths)}}}, nil)
	case *protocol.Envelope_GrantAcquire:
		go func() {
			g, err := h.Store.acquire(b.GrantAcquire)
			h.reply(w, env.Id, &protocol.Envelope{Body: &protocol.Envelope_GrantReply{GrantReply: g}}, err)
		}()
	case *protocol.Envelope_GrantCommit:
		err := h.Store.commit(b.GrantCommit)
		h.reply(w, env.Id, &protocol.Envelope{Body: &protocol.Envelope_GrantCommit{GrantCommit: &protocol.GrantCommit{}}}, err)
	case *protocol.Envelope_GrantRelease:
		h.Store.release(b.GrantRelease.Id)
		h.reply(w, env.Id, &protocol.Envelope{Body: &protocol.Envelope_GrantRelease{GrantRelease: &protocol.GrantRelease{}}}, nil)
	case *protocol.Envelope_Tables:
		h.mu.Lock()
		w.subs = map[string]bool{}
		for _, t := range b.Tables.Tables {
			w.subs[t] = true
		}
		h.mu.Unlock()
	case *protocol.Envelope_Publish:
		// The publishing worker told its own pages; the others hear of it.
		for _, o := range h.workers {
			h.mu.Lock()
			watches := o != w && o.subs[b.Publish.Table]
			h.mu.Unlock()
			if watches {
				_ = o.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: b.Publish.Table, Data: b.Publish.Data, Origin: w.id}}})
			}
		}
	case *protocol.Envelope_GatewayCall:
		go h.gateway(w, env.Id, b.GatewayCall)
	default:
		if env.Id != 0 {
			_ = w.peer.ReplyError(env.Id, protocol.Error_BAD_REQUEST, fmt.Sprintf("workertest does not stand in for %T", env.Body))
		}
	}
}

func (h *Host) reply(w *hostWorker, id uint64, env *protocol.Envelope, err error) {
	if err != nil {
		code := protocol.Error_BAD_REQUEST
		if err == errStale {
			code = protocol.Error_STALE_GRANT
		}
		_ = w.peer.ReplyError(id, code, err.Error())
		return
	}
	_ = w.peer.Reply(id, env)
}

// Model makes the gateway answer calls to model with answer (a stand-in
// for the providers); a call to a model nobody set is refused, as the
// gateway refuses an unknown model.
func (h *Host) Model(model string, answer func(worker.GatewayRequest) (worker.GatewayResponse, error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.models[model] = answer
}

func (h *Host) gateway(w *hostWorker, id uint64, c *protocol.GatewayCall) {
	var call struct {
		Request worker.GatewayRequest `json:"request"`
	}
	if err := json.Unmarshal(c.Call, &call); err != nil {
		_ = w.peer.ReplyError(id, protocol.Error_BAD_REQUEST, "decoding the gateway call: "+err.Error())
		return
	}
	h.mu.Lock()
	answer := h.models[call.Request.Model]
	h.mu.Unlock()
	if answer == nil {
		_ = w.peer.ReplyError(id, protocol.Error_NOT_FOUND, fmt.Sprintf("unknown model %q (workertest: set it with Host.Model)", call.Request.Model))
		return
	}
	resp, err := answer(call.Request)
	if err != nil {
		_ = w.peer.ReplyError(id, protocol.Error_UNAVAILABLE, err.Error())
		return
	}
	if resp.Model == "" {
		resp.Model = call.Request.Model
	}
	if c.Stream {
		// One chunk of content, then the last with the usage.
		for _, ch := range []worker.GatewayChunk{{Delta: resp.Content}, {Done: true, FinishReason: resp.FinishReason, Usage: resp.Usage, CostMicros: resp.CostMicros}} {
			b, _ := json.Marshal(ch)
			_ = w.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_GatewayChunk{GatewayChunk: &protocol.GatewayChunk{CallId: id, Chunk: b, Last: ch.Done}}})
		}
		_ = w.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{}}})
		return
	}
	b, _ := json.Marshal(resp)
	_ = w.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{Response: b}}})
}

// Maintenance puts backend in maintenance (on) or takes it out: the app's
// requests and messages that need it (worker.Needs) wait, as in a window.
func (h *Host) Maintenance(backend string, on bool) {
	h.mu.Lock()
	h.down[backend] = on
	h.maint++
	m := &protocol.Maintenance{Version: h.maint}
	for b, down := range h.down {
		if down {
			m.Backends = append(m.Backends, &protocol.MaintenanceBackend{Name: b, Reason: "workertest", MaxWaitMs: int64(callTimeout / time.Millisecond)})
		}
	}
	h.mu.Unlock()
	for _, w := range h.workers {
		ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
		_, err := w.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Maintenance{Maintenance: m}})
		cancel()
		if err != nil {
			h.t.Fatalf("workertest: telling %s of maintenance: %v", w.id, err)
		}
	}
}

// Person is someone with one connection (a browser), logged in as user
// ("" for someone who has not logged in).
type Person struct {
	h      *Host
	w      *hostWorker
	user   string
	conn   string
	pages  int
	cookie http.Header
}

// Person returns a new person: a connection logged in as user, on the
// next worker in turn.
func (h *Host) Person(user string) *Person {
	h.mu.Lock()
	h.people++
	n := h.people
	h.mu.Unlock()
	p := &Person{h: h, w: h.workers[(n-1)%len(h.workers)], user: user, conn: fmt.Sprintf("conn-%d", n)}
	if user == "" {
		p.user = "~" + p.conn
	}
	return p
}

// User is the person's user key as the worker knows it.
func (p *Person) User() string { return p.user }

func (p *Person) frame(f *protocol.Frame) (*protocol.FrameReply, error) {
	f.User, f.Conn, f.Epoch = p.user, p.conn, 1
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	env, err := p.w.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
	if err != nil {
		return nil, err
	}
	r := env.GetFrameReply()
	if r == nil {
		return nil, fmt.Errorf("the worker answered a frame with %T", env.Body)
	}
	if id := r.GetIdentity(); id != nil && id.User != "" && id.User != p.user {
		p.user = id.User // logged in by the app's site
	}
	return r, nil
}

// Do sends a site request to the app's ServeHTTP as the person's browser,
// and returns its answer (a streamed body read to its end).
func (p *Person) Do(method, url string, body string, headers http.Header) (*http.Response, error) {
	req := &protocol.HTTPRequest{Method: method, Url: url, Body: []byte(body), RemoteAddr: "127.0.0.1:1", Host: "workertest"}
	for k, vs := range headers {
		req.Headers = append(req.Headers, &protocol.Header{Name: k, Values: vs})
	}
	r, err := p.frame(&protocol.Frame{Kind: &protocol.Frame_Http{Http: req}})
	if err != nil {
		return nil, err
	}
	hr := r.GetHttp()
	if hr == nil {
		return nil, fmt.Errorf("the worker answered a site request with %T", r.Kind)
	}
	resp := &http.Response{StatusCode: int(hr.Status), Header: http.Header{}}
	for _, hd := range hr.Headers {
		resp.Header[http.CanonicalHeaderKey(hd.Name)] = hd.Values
	}
	out := append([]byte(nil), hr.Body...)
	for hr.Stream != 0 {
		b, err := p.frame(&protocol.Frame{Kind: &protocol.Frame_Read{Read: &protocol.HTTPRead{Stream: hr.Stream, WaitMs: uint32(callTimeout / time.Millisecond)}}})
		if err != nil {
			return nil, err
		}
		body := b.GetBody()
		out = append(out, body.GetData()...)
		if body.GetError() != "" {
			return nil, fmt.Errorf("the streamed body failed: %s", body.Error)
		}
		if body.GetEnd() {
			break
		}
	}
	resp.Body = nopCloser{strings.NewReader(string(out))}
	resp.ContentLength = int64(len(out))
	return resp, nil
}

// Open opens a page of kind (a browser tab).
func (p *Person) Open(kind string) *Tab {
	p.h.t.Helper()
	p.pages++
	t := &Tab{p: p, id: fmt.Sprintf("%s-page-%d", p.conn, p.pages), tree: map[string]any{}}
	r, err := p.frame(&protocol.Frame{Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: t.id, Kind: kind}}})
	if err != nil {
		p.h.t.Fatalf("workertest: opening a %s page: %v", kind, err)
	}
	if r.GetOpened() == nil {
		p.h.t.Fatalf("workertest: opening a %s page: answered %T", kind, r.Kind)
	}
	t.pull()
	return t
}

// Tab is one open page, its tree kept as client.js keeps it.
type Tab struct {
	p    *Person
	id   string
	last uint64
	tree map[string]any
	msgs int
}

// Error is a message's refusal, as the page's promise rejects with it.
type Error struct {
	Code    string
	Message string
	Retry   bool
}

func (e *Error) Error() string { return e.Message }

// Send sends a page message (JSON-encoded) and returns its answer; a
// refusal is an *Error. The deltas it made are applied to Tree first.
func (t *Tab) Send(msg any) (json.RawMessage, error) {
	data, err := json.Marshal(msg)
	if err != nil {
		return nil, fmt.Errorf("encoding the message: %w", err)
	}
	t.msgs++
	r, err := t.p.frame(&protocol.Frame{Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: t.id, Data: data, MsgId: fmt.Sprintf("%s-%d", t.id, t.msgs)}}})
	if err != nil {
		return nil, err
	}
	t.pull()
	res := r.GetMessage()
	if res == nil {
		return nil, fmt.Errorf("the worker answered a message with %T", r.Kind)
	}
	if res.Error != "" {
		code := res.Code
		if code == "" {
			code = "refused"
		}
		return nil, &Error{Code: code, Message: res.Error, Retry: res.Retry}
	}
	return res.Data, nil
}

// Tree is the page's tree as its client holds it: every delta the worker
// has for it applied (changes other people caused included).
func (t *Tab) Tree() map[string]any {
	t.pull()
	return t.tree
}

// Get is the value at path of Tree ("tasks/7/title"), nil if there is none.
func (t *Tab) Get(path string) any {
	var cur any = t.Tree()
	for _, seg := range strings.Split(path, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[seg]
	}
	return cur
}

// pull takes the deltas the page has now and applies them.
func (t *Tab) pull() {
	t.p.h.t.Helper()
	for {
		r, err := t.p.frame(&protocol.Frame{Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{Page: t.id, After: t.last}}})
		if err != nil {
			t.p.h.t.Fatalf("workertest: pulling page %s: %v", t.id, err)
		}
		ds := r.GetDeltas()
		if ds == nil || len(ds.Deltas) == 0 {
			return
		}
		for _, d := range ds.Deltas {
			if d.Seq <= t.last {
				continue
			}
			apply(t, d)
			t.last = d.Seq
		}
		if !r.More {
			return
		}
	}
}

func apply(t *Tab, d *protocol.Delta) {
	var v any
	if len(d.Value) > 0 {
		if err := json.Unmarshal(d.Value, &v); err != nil {
			t.p.h.t.Fatalf("workertest: a delta of %q is not JSON: %v", d.Path, err)
		}
	}
	if d.Op == protocol.Delta_RESET || d.Path == "" {
		m, _ := v.(map[string]any)
		if m == nil {
			m = map[string]any{}
		}
		t.tree = m
		return
	}
	segs := strings.Split(d.Path, "/")
	var cur any = t.tree
	for i, s := range segs {
		last := i == len(segs)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if d.Op == protocol.Delta_DELETE {
					delete(c, s)
				} else {
					c[s] = v
				}
				return
			}
			next, ok := c[s].(map[string]any)
			if l, isList := c[s].([]any); isList {
				cur = l
				continue
			}
			if !ok {
				next = map[string]any{}
				c[s] = next
			}
			cur = next
		case []any:
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n >= len(c) {
				t.p.h.t.Fatalf("workertest: a delta of %q indexes past a list", d.Path)
			}
			if last {
				c[n] = v
				return
			}
			cur = c[n]
		default:
			t.p.h.t.Fatalf("workertest: a delta of %q goes under a value", d.Path)
		}
	}
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }
