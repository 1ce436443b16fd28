package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"iter"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// Slot shares (docs/gateway.md, "Calls run where they arrive"): a call
// runs on the server that received it, under that server's share of the
// model's limit. The leader hands out the shares; every server asks for
// its own every renewEvery, saying what it holds, runs and has waiting,
// and the leader answers with its share of each model for leaseFor.
//
// The shares never add up to more than the limit:
//   - A server starts a call only under a lease that has not lapsed (by
//     its own clock, counted from before it asked: the leader's count
//     starts later).
//   - The leader counts what each server may run as the most of what it
//     granted it, what the server says it holds and what it says it runs:
//     a share lowered takes effect as the server's calls end, and is
//     handed on only then.
//   - A server whose lease lapsed starts nothing, and cuts the calls it
//     still runs grace (call_timeout) later; the leader hands its share on
//     only once both have passed by its own clock.
//   - A new leader counts, for the servers it has not heard from, their
//     ceilings in the log (written before any grant past them) until their
//     calls must have ended, and its own calls as they are when its table
//     starts. While a rolling update still runs a server that does not
//     know shares, the leader runs every call under the whole limits, as
//     before shares.
//
// The shares themselves are not in the log (a share is a server's, for a
// few seconds, and the leader's table is rebuilt from the ceilings and the
// servers' renewals in every term); only the ceilings are, written as
// they rise and lowered lazily. A call's budgets, its key's limits and its
// charge are counted on the leader wherever it runs (remote_reserve.go,
// limits.go).

const (
	// renewEvery is how often a server renews its shares; a server whose
	// calls wait for a slot asks at once.
	renewEvery = 100 * time.Millisecond
	// leaseFor is how long a grant stands; leaseMargin what a server
	// takes off it against clock drift.
	leaseFor    = 2 * time.Second
	leaseMargin = 200 * time.Millisecond
)

// errLeaseLapsed ends a call that had its slot as its server's lease
// lapsed: it never started, and waits for the next lease.
var errLeaseLapsed = errors.New("this server's share of the gateway's limits lapsed")

// load is what a server says of one model as it renews.
type load struct {
	Capacity int `json:"capacity"`
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
}

// leaseAsk is a server's renewal: its name, its process (a new one means
// the last one died with its calls) and its load by model.
type leaseAsk struct {
	Server  string          `json:"server"`
	Process string          `json:"process"`
	Models  map[string]load `json:"models"`
	// Deployments counts the calls the server runs on each deployment,
	// by model: the others' least-busy routing counts them.
	Deployments map[string]map[string]int `json:"deployments,omitempty"`
	// Leaving: the process is stopping, runs no call and starts none
	// again; its share is handed on at once (a leader that does not know
	// the field takes it as a renewal, and the share lapses as before).
	Leaving bool `json:"leaving,omitempty"`
}

// leaseGrant is the leader's answer: each model's share, for ValidFor.
type leaseGrant struct {
	Shares   map[string]int `json:"shares"`
	ValidFor time.Duration  `json:"valid_for"`
	// Busy counts the calls the other servers with a live lease run on
	// each deployment, by model (as they last said).
	Busy map[string]map[string]int `json:"busy,omitempty"`
}

// shareTable is the leader's view of the shares in one term.
type shareTable struct {
	limits map[string]int // model → its aggregate concurrency
	grace  time.Duration  // how long a lapsed server's calls may run
	clock  func() time.Time

	mu      sync.Mutex // guards the rest
	start   time.Time  // the term's start
	holders map[string]*holder
	// ceilings are the log's ceilings, by server: until a server renews
	// in this term (or leaseFor + grace passed since the term began), it
	// may run up to its ceiling.
	ceilings map[string]fsm.GatewayShare
}

// holder is one server as the leader last heard from it in this term.
type holder struct {
	process string
	renewed time.Time
	load    map[string]load
	granted map[string]int
	busy    map[string]map[string]int // calls by model and deployment
}

func newShareTable(limits map[string]int, ceilings map[string]fsm.GatewayShare, grace time.Duration, clock func() time.Time) *shareTable {
	return &shareTable{limits: limits, grace: grace, clock: clock, start: clock(), holders: map[string]*holder{}, ceilings: ceilings}
}

// holdsLocked is what server may run of model m at now: what the leader
// granted it, what it says it holds and what it says it runs, until its
// lease and the grace of its calls have passed; for a server not heard
// from in this term, its ceiling in the log until leaseFor + grace passed
// since the term began.
func (t *shareTable) holdsLocked(server, m string, now time.Time) int {
	if h := t.holders[server]; h != nil {
		if now.After(h.renewed.Add(leaseFor + t.grace)) {
			return 0
		}
		l := h.load[m]
		return max(h.granted[m], l.Capacity, l.InFlight)
	}
	if c, ok := t.ceilings[server]; ok && now.Before(t.start.Add(leaseFor+t.grace)) {
		return c.Models[m]
	}
	return 0
}

// grant renews a server's lease and returns its shares, and the ceilings
// to write to the log before the grant is answered (nil: none is raised).
func (t *shareTable) grant(ask leaseAsk) (leaseGrant, *fsm.GatewayShare) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock()
	h := t.holders[ask.Server]
	if h == nil || h.process != ask.Process {
		// New in this term, or a new process of the server: the last
		// one died, and its calls with it.
		h = &holder{process: ask.Process, granted: map[string]int{}}
		t.holders[ask.Server] = h
	}
	h.renewed, h.load, h.busy = now, ask.Models, ask.Deployments
	out := leaseGrant{Shares: make(map[string]int, len(t.limits)), ValidFor: leaseFor}
	for name, o := range t.holders {
		if name == ask.Server || now.After(o.renewed.Add(leaseFor)) {
			continue
		}
		for m, ds := range o.busy {
			for d, n := range ds {
				if n == 0 {
					continue
				}
				if out.Busy == nil {
					out.Busy = map[string]map[string]int{}
				}
				if out.Busy[m] == nil {
					out.Busy[m] = map[string]int{}
				}
				out.Busy[m][d] += n
			}
		}
	}
	ceil, hasCeil := t.ceilings[ask.Server]
	if ceil.Process != ask.Process {
		hasCeil = false
	}
	var raise *fsm.GatewayShare
	for m, limit := range t.limits {
		free := limit
		for name := range t.names() {
			if name != ask.Server {
				free -= t.holdsLocked(name, m, now)
			}
		}
		g := max(0, min(t.targetLocked(ask.Server, m, limit, now), free))
		h.granted[m] = g
		out.Shares[m] = g
		if g > 0 && (!hasCeil || g > ceil.Models[m]) {
			if raise == nil {
				raise = &fsm.GatewayShare{Process: ask.Process, Models: map[string]int{}}
				if hasCeil {
					maps.Copy(raise.Models, ceil.Models)
				}
			}
			raise.Models[m] = g
		}
	}
	return out, raise
}

// leave forgets a server whose process stops after its calls ended (its
// last renewal said so), so that its share is handed on at once rather
// than when its lease and grace have passed. It returns the entry that
// drops the server's ceiling from the log (nil: none is its process's),
// so that a leader elected next does not wait for it either. A leaving
// process that is not the one the table knows changes nothing: the
// newer one runs.
func (t *shareTable) leave(ask leaseAsk) *fsm.GatewaySharesRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.holders[ask.Server]; h != nil {
		if h.process != ask.Process {
			return nil
		}
		delete(t.holders, ask.Server)
	}
	if c, ok := t.ceilings[ask.Server]; ok && c.Process == ask.Process {
		return &fsm.GatewaySharesRequest{Drop: []string{ask.Server}}
	}
	return nil
}

// seed records what a server holds before it renews (the leader's own
// calls as the table starts).
func (t *shareTable) seed(ask leaseAsk) {
	t.mu.Lock()
	defer t.mu.Unlock()
	h := &holder{process: ask.Process, renewed: t.clock(), load: ask.Models, granted: map[string]int{}}
	for m, l := range ask.Models {
		h.granted[m] = l.Capacity
	}
	t.holders[ask.Server] = h
}

// names are the servers the table knows: those heard from and those with
// a ceiling.
func (t *shareTable) names() iter.Seq[string] {
	return func(yield func(string) bool) {
		for name := range t.holders {
			if !yield(name) {
				return
			}
		}
		for name := range t.ceilings {
			if _, ok := t.holders[name]; !ok && !yield(name) {
				return
			}
		}
	}
}

// raised records a ceiling written to the log.
func (t *shareTable) raised(server string, c fsm.GatewayShare) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ceilings[server] = c
}

// refused takes back a grant whose ceiling could not be written: the
// server gets no more than its old ceiling.
func (t *shareTable) refused(server string, grant leaseGrant) leaseGrant {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.ceilings[server]
	h := t.holders[server]
	for m, g := range grant.Shares {
		if h != nil && c.Process != h.process {
			grant.Shares[m] = 0
		} else {
			grant.Shares[m] = min(g, c.Models[m])
		}
	}
	return grant
}

// lowered is the entry that lowers the ceilings well above what their
// servers may run now (by a tenth of the limit, so a share that wavers
// does not write each time) and drops those of servers gone; nil when
// none is.
func (t *shareTable) lowered() *fsm.GatewaySharesRequest {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock()
	var req fsm.GatewaySharesRequest
	for server, c := range t.ceilings {
		next := fsm.GatewayShare{Process: c.Process, Models: map[string]int{}}
		lower, any := false, false
		for m, limit := range t.limits {
			n := t.holdsLocked(server, m, now)
			if n > 0 {
				next.Models[m] = n
				any = true
			}
			if c.Models[m] > n+max(1, limit/10) || n == 0 && c.Models[m] > 0 {
				lower = true
			}
		}
		switch {
		case !any && now.After(t.start.Add(leaseFor+t.grace)):
			if _, live := t.holders[server]; !live || now.After(t.holders[server].renewed.Add(leaseFor+t.grace)) {
				req.Drop = append(req.Drop, server)
			}
		case lower && any:
			if h := t.holders[server]; h != nil {
				next.Process = h.process
			}
			if req.Set == nil {
				req.Set = map[string]fsm.GatewayShare{}
			}
			req.Set[server] = next
		}
	}
	if req.Set == nil && req.Drop == nil {
		return nil
	}
	return &req
}

// applyLowered records the entry lowered returned, once in the log.
func (t *shareTable) applyLowered(req *fsm.GatewaySharesRequest) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.Copy(t.ceilings, req.Set)
	for _, s := range req.Drop {
		delete(t.ceilings, s)
	}
}

// targetLocked is the share server should have of model m: the limit
// split among the servers with a live lease by what each runs and has
// waiting (none gets more than it asks while another asks for more), the
// rest spread evenly, so a server with no calls yet can start a few at
// once.
func (t *shareTable) targetLocked(server, m string, limit int, now time.Time) int {
	type want struct {
		name string
		n    int
	}
	var wants []want
	for name, h := range t.holders {
		if now.After(h.renewed.Add(leaseFor)) {
			continue // lapsed: holds what it runs, gets nothing more
		}
		l := h.load[m]
		wants = append(wants, want{name, l.InFlight + l.Queued})
	}
	slices.SortFunc(wants, func(a, b want) int { return cmp.Or(cmp.Compare(a.n, b.n), cmp.Compare(a.name, b.name)) })
	share := make(map[string]int, len(wants))
	left := limit
	for i, w := range wants {
		share[w.name] = min(w.n, left/(len(wants)-i))
		left -= share[w.name]
	}
	// What no one asks for is spread evenly, the remainder to the
	// busiest.
	for i := len(wants) - 1; i >= 0 && left > 0; i-- {
		extra := (left + i) / (i + 1)
		share[wants[i].name] += extra
		left -= extra
	}
	return share[server]
}

// leaseClient keeps this server's lease: the shares it runs calls under.
type leaseClient struct {
	g       *Gateway
	process string
	grace   time.Duration

	// expires is when the lease lapses (unix nanoseconds by this
	// server's clock); a call starts only before it.
	expires atomic.Int64
	kick    chan struct{}

	mu      sync.Mutex    // guards renewed and the calls
	renewed chan struct{} // closed at the next renewal
	calls   map[*callCut]struct{}
	nowhere atomic.Bool   // the leader has no share table (an older version): forward
	done    chan struct{} // closed when run returns: no renewal follows
}

// callCut is a running call the lease may cut.
type callCut struct{ cancel context.CancelCauseFunc }

func newLeaseClient(g *Gateway, process string, grace time.Duration) *leaseClient {
	return &leaseClient{g: g, process: process, grace: grace, kick: make(chan struct{}, 1), renewed: make(chan struct{}),
		calls: map[*callCut]struct{}{}, done: make(chan struct{})}
}

// valid reports whether the lease stands: MayStart.
func (c *leaseClient) valid() error {
	if time.Now().UnixNano() < c.expires.Load() {
		return nil
	}
	return errLeaseLapsed
}

// ask renews at once (a call is waiting for a slot).
func (c *leaseClient) ask() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// wait waits for the next renewal, or ctx.
func (c *leaseClient) wait(ctx context.Context) error {
	c.mu.Lock()
	ch := c.renewed
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// track registers a call to cut should the lease lapse for good; done
// deregisters it.
func (c *leaseClient) track(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	cc := &callCut{cancel: cancel}
	c.mu.Lock()
	c.calls[cc] = struct{}{}
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		delete(c.calls, cc)
		c.mu.Unlock()
		cancel(nil)
	}
}

// run renews the lease until stop closes.
func (c *leaseClient) run(stop <-chan struct{}) {
	defer close(c.done)
	t := time.NewTicker(renewEvery)
	defer t.Stop()
	var lapsedAt time.Time
	for {
		sent := time.Now()
		grant, err := c.renew()
		switch {
		case err == nil:
			c.apply(grant, sent)
			lapsedAt = time.Time{}
		case time.Now().UnixNano() >= c.expires.Load():
			if lapsedAt.IsZero() {
				lapsedAt = time.Now()
				c.setCapacity(nil)
				c.g.log.Warn("gateway: this server's share of the limits lapsed: it starts no call until the leader renews it", "error", err)
			}
			if time.Since(lapsedAt) > c.grace {
				c.cutAll()
			}
		}
		select {
		case <-stop:
			c.expires.Store(0)
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

// renew asks the leader (itself, when it leads) for this server's shares.
func (c *leaseClient) renew() (leaseGrant, error) {
	g := c.g
	return c.send(leaseAsk{Server: g.srv.Name(), Process: c.process, Models: g.loads(), Deployments: g.router.InFlight()})
}

// leave tells the leader that this process stops, so that its share is
// handed on at once instead of when its lease and grace have passed. Call
// it once the calls have ended (the gateway drained) and the lease's loop
// has stopped (no renewal follows). While a call still runs here (a stop
// that had to cut them), it says nothing: the share then lapses as after
// a crash.
func (c *leaseClient) leave() {
	select {
	case <-c.done:
	case <-time.After(leaseFor):
		return
	}
	g := c.g
	for m, l := range g.loads() {
		if l.InFlight > 0 {
			g.log.Info("gateway: calls still run here as it stops: its share of the limits lapses with its lease", "model", m, "in_flight", l.InFlight)
			return
		}
	}
	if _, err := c.send(leaseAsk{Server: g.srv.Name(), Process: c.process, Leaving: true}); err != nil {
		g.log.Info("gateway: could not hand this server's share of the limits back: it lapses with its lease", "error", err)
	}
}

// send sends ask to the leader (itself, when it leads).
func (c *leaseClient) send(ask leaseAsk) (leaseGrant, error) {
	g := c.g
	if g.srv.Raft().IsLeader() {
		return g.leaseFor(ask)
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaseFor/2)
	defer cancel()
	addr, id := g.srv.Raft().Leader()
	if addr == "" {
		return leaseGrant{}, errors.New("no leader known")
	}
	admin := g.srv.AdminOf(id, addr)
	if admin == "" {
		g.srv.RefreshPeers(ctx)
		if admin = g.srv.AdminOf(id, addr); admin == "" {
			return leaseGrant{}, errors.New("the leader's admin address is not known")
		}
	}
	body, err := json.Marshal(ask)
	if err != nil {
		return leaseGrant{}, err
	}
	b, err := g.srv.Fetch(ctx, http.MethodPost, admin, "/v1/internal/gateway/lease", body)
	if err != nil {
		var re Refusal
		if errors.As(err, &re) && (re.StatusCode() == http.StatusNotFound || re.StatusCode() == http.StatusMethodNotAllowed) {
			// A leader of an older version: calls go to it, as they
			// did then.
			c.nowhere.Store(true)
		}
		return leaseGrant{}, err
	}
	c.nowhere.Store(false)
	var grant leaseGrant
	return grant, json.Unmarshal(b, &grant)
}

// apply takes a grant asked for at sent.
func (c *leaseClient) apply(grant leaseGrant, sent time.Time) {
	c.setCapacity(grant.Shares)
	for m, ds := range c.g.router.InFlight() {
		for d := range ds {
			c.g.router.SetRemoteInFlight(m, d, grant.Busy[m][d])
		}
	}
	c.expires.Store(sent.Add(grant.ValidFor - leaseMargin).UnixNano())
	c.mu.Lock()
	close(c.renewed)
	c.renewed = make(chan struct{})
	c.mu.Unlock()
}

// setCapacity sets each model's slots to its share (none: zero).
func (c *leaseClient) setCapacity(shares map[string]int) {
	for _, m := range c.g.router.Models() {
		s, _ := c.g.router.Slots(m)
		s.SetCapacity(shares[m])
	}
}

// cutAll cuts the calls still running under a lease that lapsed grace ago:
// the leader hands their slots on.
func (c *leaseClient) cutAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.calls) > 0 {
		c.g.log.Warn("gateway: cutting the calls still running under a share that lapsed", "calls", len(c.calls))
	}
	for cc := range c.calls {
		cc.cancel(errLeaseLapsed)
		delete(c.calls, cc)
	}
}

// leaseFor answers a renewal on the leader.
func (g *Gateway) leaseFor(ask leaseAsk) (leaseGrant, error) {
	t := g.shares.Load()
	if t == nil {
		if ask.Server == g.srv.Name() && g.srv.Raft().IsLeader() && !g.maps.Allows(fsm.GatewaySharesRequestType) {
			// A rolling update still runs a server without shares: every
			// call runs here, as then, under the whole limits.
			if err := g.lead.check(); err != nil {
				return leaseGrant{}, err
			}
			return leaseGrant{Shares: g.limits(), ValidFor: leaseFor}, nil
		}
		if !g.maps.Allows(fsm.GatewaySharesRequestType) {
			return leaseGrant{}, errNoShares
		}
		return leaseGrant{}, gateway.ErrNotLeader // not leading, or the term's table not ready yet
	}
	// A leader cut off (or stopped) may not know yet that another leads:
	// it proves its lead before it grants.
	if err := g.lead.check(); err != nil {
		return leaseGrant{}, err
	}
	g.sharesMu.Lock()
	defer g.sharesMu.Unlock()
	if ask.Leaving {
		if drop := t.leave(ask); drop != nil {
			ctx, cancel := context.WithTimeout(context.Background(), leaseFor/2)
			_, err := g.srv.Apply(ctx, mustEncode(fsm.GatewaySharesRequestType, *drop))
			cancel()
			if err != nil {
				// The ceiling stays, counted by a next leader until it
				// lapses, as after a stop that said nothing.
				g.log.Warn("gateway: dropping a stopped server's ceiling from the log", "server", ask.Server, "error", err)
			} else {
				t.applyLowered(drop)
			}
		}
		g.log.Info("gateway: a server stopped and handed its share of the limits back", "server", ask.Server)
		return leaseGrant{}, nil
	}
	grant, raise := t.grant(ask)
	if raise != nil {
		ctx, cancel := context.WithTimeout(context.Background(), leaseFor/2)
		_, err := g.srv.Apply(ctx, mustEncode(fsm.GatewaySharesRequestType, fsm.GatewaySharesRequest{Set: map[string]fsm.GatewayShare{ask.Server: *raise}}))
		cancel()
		if err != nil {
			g.log.Warn("gateway: raising a server's share in the log", "server", ask.Server, "error", err)
			return t.refused(ask.Server, grant), nil
		}
		t.raised(ask.Server, *raise)
	}
	return grant, nil
}

// errNoShares answers a renewal on a leader that hands out no shares (a
// rolling update still runs a server that would skip their entries): the
// server forwards its calls to the leader.
var errNoShares = errors.New("this leader hands out no shares of the gateway's limits")

// mustEncode encodes an entry whose body always encodes.
func mustEncode(t fsm.MessageType, v any) []byte {
	b, err := fsm.Encode(t, v)
	if err != nil {
		panic(err)
	}
	return b
}

// Lead is the gateway's leader task (server.Leadership): it runs the
// submitted calls (LeadJobs) and hands out the shares (LeadShares) while
// this server leads.
func (g *Gateway) Lead(stop <-chan struct{}) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		g.LeadShares(stop)
	}()
	g.LeadJobs(stop)
	wg.Wait()
}

// LeadShares keeps the share table while this server leads: a leader task
// (server.Leadership). It starts from the ceilings in the log, and lowers
// them as servers run less.
func (g *Gateway) LeadShares(stop <-chan struct{}) {
	// Until every server applies the ceilings' entries (a rolling update
	// still runs an older one, or this leader has not heard yet), every
	// call runs here, under the whole limits (leaseFor).
	for !g.maps.Allows(fsm.GatewaySharesRequestType) {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	// A new leader may not have applied every ceiling yet.
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := g.srv.Raft().Barrier(bctx)
	cancel()
	if err != nil {
		g.log.Warn("waiting for the log before handing out gateway shares", "error", err)
		return
	}
	t := newShareTable(g.limits(), g.maps.GatewayShares(), g.grace(), time.Now)
	// This server may run calls under the whole limits it took while the
	// cluster could not record shares (leaseFor): the table holds them
	// before it grants anyone else.
	t.seed(leaseAsk{Server: g.srv.Name(), Process: g.lease.process, Models: g.loads()})
	g.shares.Store(t)
	defer g.shares.Store(nil)
	tick := time.NewTicker(lowerEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		g.sharesMu.Lock()
		if req := t.lowered(); req != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := g.srv.Apply(ctx, mustEncode(fsm.GatewaySharesRequestType, *req))
			cancel()
			if err == nil {
				t.applyLowered(req)
			}
		}
		g.sharesMu.Unlock()
	}
}

// lowerEvery is how often the leader lowers the ceilings in the log.
const lowerEvery = 5 * time.Second

// loads is what this server holds, runs and has waiting of each model.
func (g *Gateway) loads() map[string]load {
	out := map[string]load{}
	for _, m := range g.router.Models() {
		s, _ := g.router.Slots(m)
		st := s.Stats()
		out[m] = load{Capacity: st.Capacity, InFlight: st.InFlight, Queued: st.Queued}
	}
	return out
}

// limits are the models' aggregate limits.
func (g *Gateway) limits() map[string]int {
	out := make(map[string]int, len(g.cfg.Models))
	for _, m := range g.cfg.Models {
		out[m.Name] = m.Concurrency
	}
	return out
}

// grace is how long a call may run once its lease lapsed: call_timeout.
func (g *Gateway) grace() time.Duration {
	return cmp.Or(duration(g.cfg.CallTimeout), drainDefault)
}
