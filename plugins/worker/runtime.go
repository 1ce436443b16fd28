package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path"
	goruntime "runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// maxPullWait bounds how long a pull waits for its first delta.
const maxPullWait = 60 * time.Second

// runtime is one worker: its users and their mailboxes, on one channel.
type runtime struct {
	// storeIndex is the newest index of the global store this worker
	// knows: its commits and reads, and the table changes it received.
	// Its reads wait for it (read your writes).
	storeIndex atomic.Uint64
	app        App
	opts       Options
	log        hclog.Logger
	peer       *channel.Peer
	workerID   string
	ctx        context.Context
	// freed wakes the releaser: people left (see released).
	freed chan struct{}

	mu    sync.Mutex // guards users, conns, epochs and frozen
	users map[string]*user
	conns map[string]*Session
	// byUser indexes conns by their user key (addConnLocked and friends
	// keep it), so a freeze or a wake does not scan every connection.
	byUser map[string]map[*Session]struct{}
	// epochs is the newest epoch seen per user; older frames are refused.
	epochs map[string]uint64
	// frozen marks users whose state was handed over by a Freeze.
	frozen map[string]bool
	// yields signals the held requests of users whose freeze is on its
	// way (awaitBackends); the freeze removes the entry when it runs.
	yields map[string]*yielding
	// accounts is what each user consumed here; left names those dropped
	// since the previous probe (account.go).
	accounts map[string]*account
	left     []string
	// freezeWatches are the freezes waiting in mailboxes with bounds of
	// their own, by envelope id (freezewatch.go).
	freezeWatches map[uint64]*freezeWatch
	// evicted is when each person evicted here left: their fence
	// (epochs, frozen) goes tombstoneTTL later (tombstones.go); marks are
	// the maps' high-water marks.
	evicted map[string]time.Time
	marks   mapMarks
	// subs indexes the pages subscribed to each table; sentTables is the
	// set last told to the host (tables.go).
	subs       map[string]map[*Page]struct{}
	sentTables []string
	// tablesChanged says subs gained or lost a table since the last
	// syncTables; tablesMu orders the syncs (tables.go).
	tablesChanged atomic.Bool
	tablesMu      sync.Mutex

	// maint is the backends in maintenance; needs says which ones each
	// route and message needs (maintenance.go).
	maint *maintenance
	needs *Needs
	// gw routes the chunks of the AI gateway streams (gateway.go).
	gw gatewayStreams
	// site runs the HTTP requests of a Site on a pool of their own
	// (sitepool.go); nil for other Apps, whose requests run in the mailbox.
	site *sitePool
	// maxBody bounds a response body the recorder buffers (http.go).
	maxBody int64
	// streams are the site's streamed responses (stream.go); nil for
	// other Apps.
	streams *streams

	// ck is what changed since the last checkpoint (checkpoint.go).
	ck checkpoints
	// staged holds the precopies of people on their way here (precopy.go).
	staged staging

	frames atomic.Uint64
	pages  atomic.Int64
	// stateRefused counts the writes refused past a state bound.
	stateRefused atomic.Uint64
	// pagesRefused counts the page opens refused past a page-count bound.
	pagesRefused atomic.Uint64
	wg           sync.WaitGroup // mailbox runners, new-connection frames, checkpoint rounds
	// runq hands a mailbox to an idle runner (runMailbox); unbuffered, so
	// a mailbox is only ever handed to a runner waiting for one.
	runq chan *user
}

// user is one person in this worker, with a mailbox that runs their frames
// one at a time, in arrival order.
type user struct {
	key string
	rt  *runtime

	mu      sync.Mutex // guards queue and running
	queue   []*protocol.Envelope
	running bool
	// inRequest is set while the mailbox runs one of the person's site
	// requests (freezewatch.go: a freeze waits longer for it).
	inRequest atomic.Bool
}

func (rt *runtime) userLocked(key string) *user {
	u := rt.users[key]
	if u == nil {
		u = &user{key: key, rt: rt}
		rt.users[key] = u
		rt.grewLocked()
	}
	return u
}

// handle is the Peer's handler: it routes each request without blocking.
func (rt *runtime) handle(env *protocol.Envelope) {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Frame:
		rt.frames.Add(1)
		f := b.Frame
		if rd := f.GetRead(); rd != nil {
			// A stream's read waits for its body, beside the mailboxes:
			// the stream is no one's frame.
			rt.wg.Add(1)
			go func() {
				defer rt.wg.Done()
				rt.readStream(env.Id, rd)
			}()
			return
		}
		if f.Conn == "" {
			// A new connection has no state yet, hence nothing to order
			// against: run it beside the mailboxes.
			rt.wg.Add(1)
			go func() {
				defer rt.wg.Done()
				rt.runFrame(env)
			}()
			return
		}
		rt.enqueue(f.User, env)
	case *protocol.Envelope_Freeze:
		if rt.site != nil {
			// The freeze waits for the person's frames queued before it:
			// their site requests go ahead of the pool's queue.
			rt.site.expedite(b.Freeze.User)
		}
		rt.freezing(b.Freeze.User)
		rt.watchFreeze(env.Id, b.Freeze)
		rt.enqueue(b.Freeze.User, env)
	case *protocol.Envelope_Thaw:
		rt.enqueue(b.Thaw.User, env)
	case *protocol.Envelope_Wake:
		rt.enqueue(b.Wake.User, env)
	case *protocol.Envelope_Precopy:
		if rt.sizeHint(b.Precopy.User) < precopyMin {
			_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Precopied{Precopied: &protocol.Precopied{Small: true}}})
			return
		}
		rt.enqueue(b.Precopy.User, env)
	case *protocol.Envelope_Stage:
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			if err := rt.stage(b.Stage); err != nil {
				_ = rt.peer.ReplyError(env.Id, protocol.Error_BAD_REQUEST, err.Error())
				return
			}
			_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{}}})
		}()
	case *protocol.Envelope_Evict:
		rt.evict(b.Evict)
		_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{}}})
	case *protocol.Envelope_TableChange:
		rt.deliverTable(b.TableChange)
		if env.Id != 0 {
			_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{}}})
		}
	case *protocol.Envelope_Maintenance:
		rt.maint.set(b.Maintenance)
		if env.Id != 0 {
			_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Maintenance{Maintenance: &protocol.Maintenance{}}})
		}
	case *protocol.Envelope_GatewayChunk:
		rt.gw.deliver(b.GatewayChunk)
	case *protocol.Envelope_Checkpoint:
		// It waits for mailboxes: never on the read loop.
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			rt.checkpoint(env.Id, b.Checkpoint)
		}()
	case *protocol.Envelope_Probe:
		_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: rt.probe()}})
	case *protocol.Envelope_Shutdown:
		rt.log.Info("shutting down", "reason", b.Shutdown.Reason)
		_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Shutdown{Shutdown: &protocol.Shutdown{}}})
		go rt.peer.Close()
	default:
		if env.Id != 0 {
			_ = rt.peer.ReplyError(env.Id, protocol.Error_BAD_REQUEST, fmt.Sprintf("worker does not handle %T", env.Body))
		}
	}
}

// enqueue puts env in the user's mailbox. It holds rt.mu: a mailbox that has
// just drained removes its user under the same lock, so an envelope never
// lands in a user that is no longer in the map (two mailboxes for one person).
func (rt *runtime) enqueue(user string, env *protocol.Envelope) {
	rt.mu.Lock()
	rt.userLocked(user).enqueue(env)
	rt.mu.Unlock()
}

func (u *user) enqueue(env *protocol.Envelope) {
	u.mu.Lock()
	u.queue = append(u.queue, env)
	start := !u.running
	u.running = true
	u.mu.Unlock()
	if start {
		u.rt.runMailbox(u)
	}
}

// runnerIdle is how long a mailbox runner with nothing to run waits for
// the next mailbox before it exits.
const runnerIdle = 5 * time.Second

// runMailbox hands u to an idle runner, or starts one. Runners outlive the
// mailboxes they drain by runnerIdle: a busy worker keeps a few goroutines
// whose stacks have grown to what frames need, instead of a new goroutine
// (and its stack's growth) for each frame of a person who waits between
// frames; an idle worker keeps none.
func (rt *runtime) runMailbox(u *user) {
	select {
	case rt.runq <- u:
		return
	default:
	}
	rt.wg.Add(1)
	go rt.runner(u)
}

// runner drains mailboxes, one at a time, until none comes for runnerIdle
// or the worker stops.
func (rt *runtime) runner(u *user) {
	defer rt.wg.Done()
	idle := time.NewTimer(runnerIdle)
	defer idle.Stop()
	var stop <-chan struct{}
	if rt.ctx != nil {
		stop = rt.ctx.Done()
	}
	for {
		u.run()
		idle.Reset(runnerIdle)
		select {
		case u = <-rt.runq:
		case <-idle.C:
			return
		case <-stop:
			// A mailbox handed over before the stop still runs.
			select {
			case u = <-rt.runq:
				continue
			default:
			}
			return
		}
	}
}

// run drains the mailbox; it returns when the mailbox is empty, so an idle
// person holds no runner and no map entry (their sessions stay in conns).
func (u *user) run() {
	for {
		u.rt.mu.Lock()
		u.mu.Lock()
		if len(u.queue) == 0 {
			u.running = false
			if u.rt.users[u.key] == u {
				delete(u.rt.users, u.key)
			}
			u.mu.Unlock()
			u.rt.mu.Unlock()
			return
		}
		u.rt.mu.Unlock()
		env := u.queue[0]
		u.queue[0] = nil
		u.queue = u.queue[1:]
		u.mu.Unlock()
		request := env.GetFrame().GetHttp() != nil
		u.inRequest.Store(request)
		u.rt.runEnvelope(u.key, env)
		u.inRequest.Store(false)
	}
}

// runEnvelope runs one mailbox item.
func (rt *runtime) runEnvelope(user string, env *protocol.Envelope) {
	defer rt.syncTables()
	switch b := env.Body.(type) {
	case *protocol.Envelope_TableChange:
		rt.applyTable(user, b.TableChange)
	case *protocol.Envelope_Frame:
		rt.runFrame(env)
	case *protocol.Envelope_Checkpoint:
		rt.runCheckpoint(user, env.Id)
	case *protocol.Envelope_Freeze:
		if rt.site != nil {
			defer rt.site.settle(b.Freeze.User)
		}
		answer := rt.freezeBegins(env.Id)
		fz, err := rt.freeze(b.Freeze)
		switch {
		case !answer:
			// Refused for being late: the mover rolled back, and its thaw
			// follows in the mailbox.
		case err != nil:
			_ = rt.peer.ReplyError(env.Id, protocol.Error_INTERNAL, err.Error())
		default:
			_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Frozen{Frozen: fz}})
		}
	case *protocol.Envelope_Precopy:
		rt.precopy(env.Id, b.Precopy)
	case *protocol.Envelope_Thaw:
		rt.thaw(b.Thaw)
		_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Thaw{Thaw: &protocol.Thaw{}}})
	case *protocol.Envelope_Wake:
		w, err := rt.wake(b.Wake)
		if err != nil {
			code := protocol.Error_BAD_REQUEST
			if _, ok := err.(*movedError); ok {
				code = protocol.Error_MOVED
			}
			if errors.Is(err, errNotStaged) {
				code = protocol.Error_NOT_FOUND
			}
			_ = rt.peer.ReplyError(env.Id, code, err.Error())
			return
		}
		_ = rt.peer.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Woken{Woken: w}})
	}
}

// runFrame runs one frame and answers it. An App panic is answered as an
// internal error for that frame only; the worker and other users go on.
func (rt *runtime) runFrame(env *protocol.Envelope) {
	defer func() {
		if r := recover(); r != nil {
			value, stack := r, debug.Stack()
			if hp, ok := r.(*handlerPanic); ok {
				value, stack = hp.value, hp.stack // a Site's handler, on the pool
			}
			rt.log.Error("app panicked", "panic", value, "stack", string(stack))
			_ = rt.peer.ReplyError(env.Id, protocol.Error_INTERNAL, fmt.Sprintf("application error: %v", r))
		}
	}()
	f := env.GetFrame()
	start := time.Now()
	// woken holds the answers of the pulls a message's deltas woke: they
	// leave with its reply, before it.
	var woken []*protocol.Envelope
	reply, err := func() (*protocol.FrameReply, error) {
		// Charged before the answer leaves (a probe after it sees the
		// frame), a panic included.
		defer rt.charge(f.User, start)
		return rt.frame(f, env.Id, &woken)
	}()
	if err != nil {
		e := &protocol.Error{Code: errCode(err), Message: err.Error()}
		if errors.Is(err, errConnTaken) {
			e.Kind = protocol.KindConnTaken
		}
		_ = rt.peer.SendTogether(append(woken, &protocol.Envelope{Id: env.Id, Reply: true,
			Body: &protocol.Envelope_Error{Error: e}})...)
		return
	}
	if reply != nil {
		// Read before the answer leaves: the connection's next frame may
		// run as soon as it has.
		forget := rt.askedToForget(reply.Identity)
		// With the pulls it woke, if any: one message to the host, and at
		// the front one write to the page (their answers say it follows).
		reply.WorkerId = rt.workerID
		_ = rt.peer.SendTogether(append(woken, &protocol.Envelope{Id: env.Id, Reply: true,
			Body: &protocol.Envelope_FrameReply{FrameReply: reply}})...)
		if forget != "" {
			if err := rt.peer.Notify(&protocol.Envelope{Body: &protocol.Envelope_Forget{Forget: &protocol.Forget{User: forget}}}); err != nil {
				rt.log.Warn("asking the host to forget a person", "user", forget, "error", err)
			}
		}
	}
}

// askedToForget returns the person to forget once the frame's answer is
// sent, if the site called Session.Forget during it ("" if not).
func (rt *runtime) askedToForget(id *protocol.Identity) string {
	if id == nil {
		return ""
	}
	rt.mu.Lock()
	s := rt.conns[id.Conn]
	rt.mu.Unlock()
	if s == nil || !s.forget.Swap(false) {
		return ""
	}
	return s.userKey()
}

func (rt *runtime) send(id uint64, r *protocol.FrameReply) {
	r.WorkerId = rt.workerID
	_ = rt.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_FrameReply{FrameReply: r}})
}

type badRequest struct{ error }

func (b badRequest) Unwrap() error { return b.error }

// unavailable refuses a frame that did not run and may be sent again soon
// (the site's pool is full): HTTP 503 with Retry-After at the front.
type unavailable struct{ error }

func errCode(err error) protocol.Error_Code {
	if _, ok := err.(badRequest); ok {
		return protocol.Error_BAD_REQUEST
	}
	if _, ok := err.(unavailable); ok {
		return protocol.Error_UNAVAILABLE
	}
	if _, ok := err.(*movedError); ok {
		return protocol.Error_MOVED
	}
	if _, ok := err.(*maintenanceError); ok {
		return protocol.Error_MAINTENANCE
	}
	return protocol.Error_INTERNAL
}

func badf(format string, args ...any) error { return badRequest{fmt.Errorf(format, args...)} }

// errConnTaken refuses a new connection the site named after one this
// worker holds: the newcomer would take that connection's person.
var errConnTaken = errors.New("the site named this new connection after one that exists")

// session finds or creates the connection of a frame.
func (rt *runtime) session(f *protocol.Frame) *Session {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if s := rt.conns[f.Conn]; s != nil {
		rt.setUserLocked(s, userOf(f.User))
		s.acct = rt.accountLocked(s.userKey())
		return s
	}
	s := newSession(rt, f.Conn, userOf(f.User))
	rt.addConnLocked(s)
	s.acct = rt.accountLocked(s.userKey())
	return s
}

// addConnLocked registers a connection (replacing one of the same name).
func (rt *runtime) addConnLocked(s *Session) {
	if old := rt.conns[s.name]; old != nil {
		rt.dropConnLocked(old)
	}
	rt.conns[s.name] = s
	k := s.userKey()
	if rt.byUser[k] == nil {
		rt.byUser[k] = map[*Session]struct{}{}
	}
	rt.byUser[k][s] = struct{}{}
	rt.grewLocked()
}

// dropConnLocked forgets a connection (and its pages' subscriptions).
func (rt *runtime) dropConnLocked(s *Session) {
	for _, p := range s.pages {
		rt.dropPageLocked(p)
	}
	if rt.conns[s.name] == s {
		delete(rt.conns, s.name)
	}
	k := s.userKey()
	delete(rt.byUser[k], s)
	if len(rt.byUser[k]) == 0 {
		delete(rt.byUser, k)
	}
}

// setUserLocked changes who a registered connection belongs to.
func (rt *runtime) setUserLocked(s *Session, user string) {
	if s.user == user {
		return
	}
	rt.dropConnLocked(s)
	s.user = user
	rt.addConnLocked(s)
	// The connection's pages stay: so do their subscriptions.
	for _, p := range s.pages {
		for t := range p.tables {
			rt.subscribeLocked(t, p)
		}
	}
	// Its checkpoint pieces are under the old user key: the next round
	// sends them again under the new one and drops the old.
	rt.changedUser(s.userKey())
}

func userOf(key string) string {
	if len(key) > 0 && key[:1] == protocol.AnonymousPrefix {
		return ""
	}
	return key
}

// frame runs f and returns its answer; a nil answer means the frame answers
// later (a waiting pull).
func (rt *runtime) frame(f *protocol.Frame, id uint64, woken *[]*protocol.Envelope) (*protocol.FrameReply, error) {
	if f.Conn == "" {
		if _, ok := f.Kind.(*protocol.Frame_Http); !ok {
			return nil, badf("a %T frame needs a connection", f.Kind)
		}
		return rt.newConnection(f)
	}
	if _, ok := f.Kind.(*protocol.Frame_Release); ok {
		rt.release(f.Conn)
		return &protocol.FrameReply{}, nil
	}
	if err := rt.fence(f); err != nil {
		return nil, err
	}
	s := rt.session(f)
	ctx := s.context()
	switch k := f.Kind.(type) {
	case *protocol.Frame_Http:
		if err := rt.awaitBackends(ctx, f.User, rt.routeNeeds(k.Http.GetUrl())); err != nil {
			return nil, err
		}
		resp, err := rt.serveHTTP(ctx, s, k.Http)
		if err != nil {
			return nil, err
		}
		return rt.httpReply(s, resp), nil
	case *protocol.Frame_Open:
		return rt.open(ctx, s, k.Open)
	case *protocol.Frame_Message:
		// A message is looked into for what it needs only while a window
		// is open: a message that arrives before the window's notice is not
		// held either way.
		if rt.maint != nil && rt.maint.open.Load() > 0 {
			if err := rt.awaitBackends(ctx, f.User, rt.needs.ForMessage(k.Message.GetData())); err != nil {
				return nil, err
			}
		}
		return rt.message(ctx, s, k.Message, woken)
	case *protocol.Frame_Pull:
		return rt.pull(s, k.Pull, id)
	case *protocol.Frame_Close:
		if p := s.pages[k.Close.Page]; p != nil {
			rt.pageGone(s, p)
			rt.mu.Lock()
			rt.dropPageLocked(p)
			rt.mu.Unlock()
			delete(s.pages, p.id)
			rt.countPages(s, -1)
			p.coll.cancel()
			if c, ok := rt.app.(PageCloser); ok {
				c.ClosePage(ctx, p)
			}
		}
		return &protocol.FrameReply{}, nil
	default:
		return nil, badf("unknown frame kind %T", f.Kind)
	}
}

func (rt *runtime) newConnection(f *protocol.Frame) (*protocol.FrameReply, error) {
	// The connection has a name from the start, so the site can show it
	// while serving the first request; NameConnection replaces it.
	s := newSession(rt, randomName(), "")
	s.isNew = true
	ctx := context.WithValue(rt.ctx, sessionKey{}, s)
	if err := rt.awaitBackends(ctx, "", rt.routeNeeds(f.GetHttp().GetUrl())); err != nil {
		return nil, err
	}
	resp, err := rt.serveHTTP(ctx, s, f.GetHttp())
	if err != nil {
		return nil, err
	}
	s.isNew = false
	if leavesNoTrace(s, f.GetHttp(), resp) {
		// No identity: no cookie, nothing in the maps, nothing here.
		return &protocol.FrameReply{Kind: &protocol.FrameReply_Http{Http: resp}}, nil
	}
	rt.mu.Lock()
	if rt.conns[s.name] != nil {
		rt.mu.Unlock()
		return nil, badRequest{fmt.Errorf("connection %q: %w", s.name, errConnTaken)}
	}
	rt.addConnLocked(s)
	rt.mu.Unlock()
	return rt.httpReply(s, resp), nil
}

// assetExtensions are the paths' endings of static files.
var assetExtensions = map[string]bool{
	".css": true, ".js": true, ".mjs": true, ".map": true, ".png": true, ".jpg": true, ".jpeg": true,
	".gif": true, ".svg": true, ".ico": true, ".webp": true, ".avif": true, ".woff": true, ".woff2": true,
	".ttf": true, ".otf": true, ".eot": true, ".txt": true, ".xml": true, ".webmanifest": true,
}

// leavesNoTrace says whether a new connection's first request names
// nobody: a HEAD, or a GET of a static asset (by its path's ending) or
// answered with an error (a crawler's probe, a health check of a path the
// site does not serve), whose handler did not touch the session (named
// it, logged in, wrote a value or called Keep). A browser's first page
// view, any other method and anything the site touched name a connection
// as before.
func leavesNoTrace(s *Session, in *protocol.HTTPRequest, resp *protocol.HTTPResponse) bool {
	if s.keep || s.login != "" || len(s.values.root) > 0 {
		return false
	}
	switch in.GetMethod() {
	case http.MethodHead:
		return true
	case http.MethodGet:
		return resp.GetStatus() >= 400 || assetExtensions[strings.ToLower(path.Ext(requestPath(in.GetUrl())))]
	}
	return false
}

// httpReply closes a frame that may have changed the identity.
func (rt *runtime) httpReply(s *Session, resp *protocol.HTTPResponse) *protocol.FrameReply {
	r := &protocol.FrameReply{Kind: &protocol.FrameReply_Http{Http: resp}}
	r.Identity = rt.identity(s)
	return r
}

func (rt *runtime) identity(s *Session) *protocol.Identity {
	var attrs map[string]string
	if s.login != "" {
		attrs, s.attrs = s.attrs, nil
		rt.mu.Lock()
		if rt.conns[s.name] == s {
			rt.setUserLocked(s, s.login)
		} else {
			s.user = s.login // not registered yet: a new connection
		}
		s.login = ""
		rt.mu.Unlock()
	}
	return &protocol.Identity{Conn: s.name, User: s.user, Attributes: attrs}
}

func (rt *runtime) release(conn string) {
	rt.mu.Lock()
	s := rt.conns[conn]
	if s != nil {
		rt.dropConnLocked(s)
		if len(rt.byUser[s.userKey()]) == 0 {
			rt.dropAccountLocked(s.userKey())
		}
	}
	rt.mu.Unlock()
	if s == nil {
		return
	}
	rt.connGone(s)
	for _, p := range s.pages {
		p.coll.cancel()
		rt.countPages(s, -1)
	}
}

const noticeLost = "This page restarted clean: the worker that held its state is gone."

func (rt *runtime) open(ctx context.Context, s *Session, o *protocol.PageOpen) (*protocol.FrameReply, error) {
	if o.Page == "" || len(o.Page) > 128 {
		return nil, badf("opening a page: page id must be 1-128 bytes")
	}
	p := s.pages[o.Page]
	st := &protocol.PageState{Page: o.Page}
	if p == nil {
		if err := rt.roomForPage(s); err != nil {
			return nil, err
		}
		p = newPage(s, o.Page, o.Kind)
		s.pages[o.Page] = p
		rt.countPages(s, 1)
		if err := rt.app.OpenPage(ctx, p); err != nil {
			// Whatever it subscribed to goes with it.
			rt.mu.Lock()
			rt.dropPageLocked(p)
			rt.mu.Unlock()
			delete(s.pages, o.Page)
			rt.countPages(s, -1)
			p.coll.cancel()
			return nil, badf("opening page %q: %v", o.Page, err)
		}
		p.changed() // a new page is checkpointed even if it wrote nothing
		if o.After > 0 {
			st.Notice, st.Resync, st.Base = noticeLost, true, 0
		}
	} else {
		p.coll.mu.Lock()
		floor, seq := p.coll.floor, p.coll.seq
		p.coll.mu.Unlock()
		if o.After < floor || o.After > seq {
			st.Resync, st.Base = true, p.coll.resync()
		}
		if p.restoredAt != 0 && o.After < p.restoredAt {
			// Restored from a checkpoint and not yet seen so: say so.
			st.Notice = noticeRestored
		}
	}
	st.Kind, st.Seq = p.kind, p.coll.last()
	r := &protocol.FrameReply{Kind: &protocol.FrameReply_Opened{Opened: st}}
	r.Identity = rt.identity(s)
	return r, nil
}

// roomForPage refuses a new page past the connection's or the person's
// bound (Options.MaxPagesPerConn, MaxPagesPerPerson).
func (rt *runtime) roomForPage(s *Session) error {
	perConn, perPerson := rt.opts.pageBounds()
	if perConn > 0 && len(s.pages) >= perConn {
		rt.pagesRefused.Add(1)
		return badf("opening a page: this connection has %d pages open, the most it may; close one first", len(s.pages))
	}
	if perPerson <= 0 {
		return nil
	}
	rt.mu.Lock()
	n := 0
	for other := range rt.byUser[s.user] {
		if other != s {
			n += len(other.pages)
		}
	}
	rt.mu.Unlock()
	if n += len(s.pages); n >= perPerson {
		rt.pagesRefused.Add(1)
		return badf("opening a page: this person has %d pages open, the most they may; close one first", n)
	}
	return nil
}

func (rt *runtime) page(s *Session, id string) (*Page, error) {
	p := s.pages[id]
	if p == nil {
		return nil, &pageUnknown{id}
	}
	return p, nil
}

type pageUnknown struct{ id string }

func (e *pageUnknown) Error() string {
	return fmt.Sprintf("page %q is not open here; open it again", e.id)
}

func (rt *runtime) message(ctx context.Context, s *Session, m *protocol.PageMessage, woken *[]*protocol.Envelope) (*protocol.FrameReply, error) {
	p, err := rt.page(s, m.Page)
	if err != nil {
		return nil, badf("%v", err)
	}
	if r, ok := p.answered.get(m.MsgId); ok && m.MsgId != "" {
		// Sent again (its answer was lost on the way): it ran once.
		rep := &protocol.FrameReply{Kind: &protocol.FrameReply_Message{Message: r}}
		rep.Identity = rt.identity(s)
		return rep, nil
	}
	res := &protocol.MessageResult{}
	// The message's deltas reach a waiting pull together, when it ends
	// (before its reply), not one at its first write.
	p.coll.hold()
	released := false
	defer func() {
		if !released {
			p.coll.release() // a panic: the pulls are answered alone
		}
	}()
	v, err := rt.app.Message(ctx, p, json.RawMessage(m.Data))
	// The pulls its deltas wake are answered with its reply (runFrame).
	*woken = p.coll.releaseTaking(*woken)
	released = true
	if err != nil {
		refusalOf(err, res)
	} else if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encoding the answer of page %q: %w", m.Page, err)
		}
		res.Data = b
	}
	if m.MsgId != "" {
		p.answered.put(m.MsgId, res)
		p.changed() // the memory is in the page's next checkpoint
	}
	r := &protocol.FrameReply{Kind: &protocol.FrameReply_Message{Message: res}}
	r.Identity = rt.identity(s)
	return r, nil
}

func (rt *runtime) pull(s *Session, pl *protocol.PagePull, id uint64) (*protocol.FrameReply, error) {
	p, err := rt.page(s, pl.Page)
	if err != nil {
		return nil, badf("%v", err)
	}
	if p.restoredAt != 0 && pl.After >= p.restoredAt {
		p.restoredAt = 0 // the client has the restored tree and its notice
	}
	wait := time.Duration(pl.WaitMs) * time.Millisecond
	if wait > maxPullWait {
		wait = maxPullWait
	}
	answer := func(ds []*protocol.Delta, last uint64) *protocol.FrameReply {
		return &protocol.FrameReply{Kind: &protocol.FrameReply_Deltas{Deltas: &protocol.Deltas{Page: pl.Page, Deltas: ds, Last: last}}}
	}
	p.coll.pull(pl.After, wait, func(ds []*protocol.Delta, last uint64) {
		rt.send(id, answer(ds, last))
	}, func(ds []*protocol.Delta, last uint64) *protocol.Envelope {
		r := answer(ds, last)
		r.WorkerId, r.More = rt.workerID, true
		return &protocol.Envelope{Id: id, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: r}}
	})
	return nil, nil
}

// liveHeap is the heap the last garbage collection found live: what the
// worker's people and code hold, not the garbage waiting for the next
// collection (HeapAlloc floats up to twice the live heap between two).
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// releaseEvery bounds how often a worker that lost people gives their
// memory back at once.
const releaseEvery = 10 * time.Second

// released is called when people left this worker (evicted after their
// moves): the memory they held is collected and given back to the system
// soon (within a second, at most once per releaseEvery), rather than when
// the heap next doubles, which a worker that lost its people may never
// do. The probe then shows the heap and RSS of who is left.
func (rt *runtime) released() {
	select {
	case rt.freed <- struct{}{}:
	default:
	}
}

// releaser runs released's collections until ctx ends.
func (rt *runtime) releaser(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-rt.freed:
		}
		wait := max(time.Second, releaseEvery-time.Since(last))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		select {
		case <-rt.freed: // the evictions meanwhile are covered
		default:
		}
		// Two collections: the first moves what the pools kept (the
		// channel's buffers of the packages that left, sized to them) to
		// their victim caches, where it still counts as live; the second
		// frees it, and gives the memory back.
		goruntime.GC()
		debug.FreeOSMemory()
		last = time.Now()
	}
}

func (rt *runtime) probe() *protocol.ProbeReply {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var depth int64
	for _, u := range rt.users {
		u.mu.Lock()
		depth += int64(len(u.queue))
		u.mu.Unlock()
	}
	if rt.site != nil {
		// A site request waiting for the pool is a frame waiting too.
		depth += int64(rt.site.waiting())
	}
	if rt.tidyLocked(time.Now()) {
		rt.released()
	}
	cpu, rss := usage()
	perUser, left := rt.usageLocked()
	r := &protocol.ProbeReply{
		PerUser:      perUser,
		Left:         left,
		CpuSeconds:   cpu,
		RssBytes:     rss,
		MailboxDepth: depth,
		Users:        int64(len(rt.byUser)),
		Conns:        int64(len(rt.conns)),
		Goroutines:   int64(goruntime.NumGoroutine()),
		HeapBytes:    liveHeap(),
		Frames:       rt.frames.Load(),
		StateRefused: rt.stateRefused.Load(),
		PagesRefused: rt.pagesRefused.Load(),
		Pages:        rt.pages.Load(),
	}
	rt.maint.report(r)
	return r
}

// awaitBackends holds a request of user that needs a backend in
// maintenance (maintenance.go); a runtime built without one (tests) holds
// nothing. A freeze of the person that arrives meanwhile ends the wait: the
// request, which has not run, is answered MOVED, and the front sends it
// again to wherever the person is once the barrier drops (the same worker
// after a rollback, or a park and a restart), where it waits again. So a
// window never holds up a move, a drain or a stop, and the held request
// still runs once, after the window.
func (rt *runtime) awaitBackends(ctx context.Context, user string, backends []string) error {
	if rt.maint == nil || len(backends) == 0 {
		return nil
	}
	var yield <-chan struct{}
	if user != "" {
		yield = rt.yieldOf(user)
	}
	err := rt.maint.await(ctx, backends, yield)
	if errors.Is(err, errYielded) {
		rt.mu.Lock()
		epoch := rt.epochs[user]
		rt.mu.Unlock()
		return &movedError{user: user, epoch: epoch}
	}
	return err
}

// yieldOf is the channel a freeze of user closes when it arrives.
func (rt *runtime) yieldOf(user string) <-chan struct{} {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.yieldingLocked(user).ch
}

// freezing tells user's held requests that a freeze is on its way through
// their mailbox (before it runs: they are what it would wait for).
func (rt *runtime) freezing(user string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if y := rt.yieldingLocked(user); !y.closed {
		close(y.ch)
		y.closed = true
	}
}

func (rt *runtime) yieldingLocked(user string) *yielding {
	y := rt.yields[user]
	if y == nil {
		if rt.yields == nil {
			rt.yields = map[string]*yielding{}
		}
		y = &yielding{ch: make(chan struct{})}
		rt.yields[user] = y
		rt.grewLocked()
	}
	return y
}

// yielding is a person's held requests' signal to go with them.
type yielding struct {
	ch     chan struct{}
	closed bool
}
