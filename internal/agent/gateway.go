package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/anthropic"
	"github.com/stickyd/stickyd/internal/gateway/provider/openai"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// The AI gateway in the server role (docs/gateway.md). Every server builds
// the same router from the configuration, but only the leader runs calls:
// a model's limit is then the aggregate of every caller on every node, and
// its queue one line. A follower's transports forward each call to the
// leader's admin API. Submitted calls and the cost counters are in the
// maps.

// GatewayConfig is the gateway block.
type GatewayConfig struct {
	// Address serves the async REST API and the OpenAI-compatible
	// /v1/chat/completions (default 127.0.0.1:4660); GRPCAddress the
	// Gateway gRPC service (default 127.0.0.1:4661).
	Address     string `hcl:"address,optional"`
	GRPCAddress string `hcl:"grpc_address,optional"`
	// APIKeys maps a caller's name to its API key (sent as a bearer
	// token); the name is the session its costs go to unless the caller
	// names one. Empty: the gateway listener takes every caller.
	APIKeys map[string]string `hcl:"api_keys,optional"`
	// QueueTimeout bounds a call's wait for a slot ("1m"); CallTimeout one
	// attempt ("2m"); RetryAfterCap the longest retry-after honoured
	// before failing over ("10s").
	QueueTimeout  string `hcl:"queue_timeout,optional"`
	CallTimeout   string `hcl:"call_timeout,optional"`
	RetryAfterCap string `hcl:"retry_after_cap,optional"`
	// DayZone is the calendar of the day counters (IANA name, default
	// UTC).
	DayZone string `hcl:"day_zone,optional"`
	// SessionBudget and DayBudget, in US dollars, refuse the calls of a
	// session or a day that spent them (0: none).
	SessionBudget float64 `hcl:"session_budget,optional"`
	DayBudget     float64 `hcl:"day_budget,optional"`
	// KeyBudget, in US dollars, refuses the calls of an API key that spent
	// it, over its life (0: none); KeyBudgets sets it for a key by name
	// (a key named there with 0 has none).
	KeyBudget  float64            `hcl:"key_budget,optional"`
	KeyBudgets map[string]float64 `hcl:"key_budgets,optional"`
	Models     []*GatewayModel    `hcl:"model,block"`
}

// GatewayModel is a model callers ask for by name.
type GatewayModel struct {
	Name string `hcl:"name,label"`
	// Concurrency is the aggregate limit: calls of this model running at
	// once, cluster-wide. QueueMax bounds the calls waiting (1000).
	Concurrency int                  `hcl:"concurrency"`
	QueueMax    int                  `hcl:"queue_max,optional"`
	Deployments []*GatewayDeployment `hcl:"deployment,block"`
}

// GatewayDeployment is one provider account serving a model, tried in the
// order written.
type GatewayDeployment struct {
	Name string `hcl:"name,label"`
	// Provider is "openai" (also any OpenAI-compatible server: vLLM,
	// Ollama, LM Studio) or "anthropic".
	Provider string `hcl:"provider"`
	BaseURL  string `hcl:"base_url,optional"`
	// Model is the provider's name of the model.
	Model string `hcl:"model"`
	// APIKeyEnv names the environment variable holding the key, or
	// APIKeyFile a file holding it. Neither: no key (local servers).
	APIKeyEnv   string         `hcl:"api_key_env,optional"`
	APIKeyFile  string         `hcl:"api_key_file,optional"`
	Concurrency int            `hcl:"concurrency,optional"`
	Price       *gateway.Price `hcl:"price,block"`
	// StallTimeout is how long a stream may send nothing (not even the
	// provider's pings) before it fails as a timeout (default "30s"); the
	// gateway's call_timeout bounds the whole stream.
	StallTimeout string `hcl:"stall_timeout,optional"`
}

// finishGateway checks the gateway block and fills its defaults.
func (c *Config) finishGateway() error {
	g := c.Gateway
	if g == nil {
		return nil
	}
	if !c.IsServer() {
		return fmt.Errorf("gateway: only servers run the gateway")
	}
	if g.Address == "" {
		g.Address = "127.0.0.1:4660"
	}
	if g.GRPCAddress == "" {
		g.GRPCAddress = "127.0.0.1:4661"
	}
	for name, d := range map[string]string{"queue_timeout": g.QueueTimeout, "call_timeout": g.CallTimeout, "retry_after_cap": g.RetryAfterCap} {
		if d == "" {
			continue
		}
		if v, err := time.ParseDuration(d); err != nil || v <= 0 {
			return fmt.Errorf("gateway: %s %q: want a positive duration like \"30s\"", name, d)
		}
	}
	if g.DayZone != "" {
		if _, err := time.LoadLocation(g.DayZone); err != nil {
			return fmt.Errorf("gateway: day_zone %q: %w", g.DayZone, err)
		}
	}
	if g.SessionBudget < 0 || g.DayBudget < 0 || g.KeyBudget < 0 {
		return fmt.Errorf("gateway: budgets must not be negative")
	}
	for name, b := range g.KeyBudgets {
		if _, ok := g.APIKeys[name]; !ok {
			return fmt.Errorf("gateway: key_budgets names %q, which is not in api_keys", name)
		}
		if b < 0 {
			return fmt.Errorf("gateway: key_budgets: %q's budget must not be negative", name)
		}
	}
	if len(g.Models) == 0 {
		return fmt.Errorf("gateway: configure at least one model block")
	}
	seen := map[string]bool{}
	for _, m := range g.Models {
		if seen[m.Name] {
			return fmt.Errorf("gateway: model %q is configured twice", m.Name)
		}
		seen[m.Name] = true
		if m.Concurrency < 1 {
			return fmt.Errorf("gateway: model %q: concurrency must be at least 1", m.Name)
		}
		if len(m.Deployments) == 0 {
			return fmt.Errorf("gateway: model %q: add a deployment block", m.Name)
		}
		for _, d := range m.Deployments {
			if d.Provider != "openai" && d.Provider != "anthropic" {
				return fmt.Errorf("gateway: model %q, deployment %q: provider %q: want \"openai\" or \"anthropic\"", m.Name, d.Name, d.Provider)
			}
			if d.Model == "" {
				return fmt.Errorf("gateway: model %q, deployment %q: model (the provider's name of it) is empty", m.Name, d.Name)
			}
			if d.APIKeyEnv != "" && d.APIKeyFile != "" {
				return fmt.Errorf("gateway: model %q, deployment %q: set api_key_env or api_key_file, not both", m.Name, d.Name)
			}
			if d.StallTimeout != "" {
				if v, err := time.ParseDuration(d.StallTimeout); err != nil || v <= 0 {
					return fmt.Errorf("gateway: model %q, deployment %q: stall_timeout %q: want a positive duration like \"30s\"", m.Name, d.Name, d.StallTimeout)
				}
			}
		}
	}
	return nil
}

// startGateway builds the router (every server) and serves the
// transports.
func (a *Agent) startGateway() error {
	g := a.cfg.Gateway
	if g == nil {
		return nil
	}
	ledger := newRaftLedger(a)
	lease := &leaderLease{a: a}
	rc := gateway.Config{QueueTimeout: duration(g.QueueTimeout), CallTimeout: duration(g.CallTimeout),
		RetryAfterCap: duration(g.RetryAfterCap), Ledger: ledger, MayStart: lease.check,
		SessionBudget: int64(g.SessionBudget * 1e6), DayBudget: int64(g.DayBudget * 1e6), KeyBudget: int64(g.KeyBudget * 1e6),
		Logger: a.log.Named("gateway")}
	if len(g.KeyBudgets) > 0 {
		rc.KeyBudgets = map[string]int64{}
		for name, b := range g.KeyBudgets {
			rc.KeyBudgets[name] = int64(b * 1e6)
		}
	}
	if g.DayZone != "" {
		rc.Zone, _ = time.LoadLocation(g.DayZone)
	}
	for _, m := range g.Models {
		gm := gateway.Model{Name: m.Name, Concurrency: m.Concurrency, QueueMax: m.QueueMax}
		for _, d := range m.Deployments {
			ad, err := newAdapter(d)
			if err != nil {
				return fmt.Errorf("gateway: model %q, deployment %q: %w", m.Name, d.Name, err)
			}
			gd := gateway.Deployment{Name: d.Name, Provider: d.Provider, Upstream: d.Model, Concurrency: d.Concurrency, Adapter: ad}
			if d.Price != nil {
				gd.Price = *d.Price
			}
			gm.Deployments = append(gm.Deployments, gd)
		}
		rc.Models = append(rc.Models, gm)
	}
	r, err := gateway.New(rc)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	a.gw = &gatewayNode{a: a, router: r, ledger: ledger, running: map[string]context.CancelFunc{}}
	if err := a.registry.Register(newGatewayCollector(a)); err != nil {
		return fmt.Errorf("gateway: registering its metrics: %w", err)
	}
	go a.gw.runJobs(a.stopLeader)
	a.gwLedgerDone = make(chan struct{})
	go func() {
		defer close(a.gwLedgerDone)
		ledger.run(a.stopLeader)
	}()
	return a.serveGateway()
}

// newAdapter builds a deployment's provider adapter.
func newAdapter(d *GatewayDeployment) (gateway.Adapter, error) {
	key := ""
	switch {
	case d.APIKeyEnv != "":
		key = os.Getenv(d.APIKeyEnv)
		if key == "" {
			return nil, fmt.Errorf("the environment variable %s (api_key_env) is empty", d.APIKeyEnv)
		}
	case d.APIKeyFile != "":
		b, err := os.ReadFile(d.APIKeyFile)
		if err != nil {
			return nil, fmt.Errorf("reading api_key_file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	stall := duration(d.StallTimeout)
	switch d.Provider {
	case "anthropic":
		return anthropic.New(anthropic.Config{BaseURL: d.BaseURL, APIKey: key, StallTimeout: stall})
	default:
		return openai.New(openai.Config{BaseURL: d.BaseURL, APIKey: key, StallTimeout: stall})
	}
}

// gatewayNode is the gateway on this agent: the router (used while this
// server leads) and the submitted calls it runs.
type gatewayNode struct {
	a      *Agent
	router *gateway.Router
	ledger *raftLedger

	mu      sync.Mutex // guards running
	running map[string]context.CancelFunc
	// rescan asks the runner to look at the whole queue again: a call
	// left it queued (this server lost the lead while it waited).
	rescan atomic.Bool
}

var _ gateway.Service = (*gatewayNode)(nil)

// Complete runs the call on the leader.
func (g *gatewayNode) Complete(ctx context.Context, call gateway.Call) (gateway.Response, error) {
	if call.IdempotencyKey != "" {
		// A key makes the call a submitted one, whose key the maps
		// record: the same call sent again (a retry after a lost answer)
		// gets the first run's answer, and never runs twice.
		return gateway.CompleteOnce(ctx, g, call)
	}
	if g.a.raft.IsLeader() {
		resp, err := g.router.Complete(ctx, call)
		if !errors.Is(err, gateway.ErrNotLeader) {
			return resp, err
		}
		// Deposed while the call waited for its slot: it never started,
		// and the new leader runs it.
	}
	var resp gateway.Response
	err := g.forward(ctx, "/v1/internal/gateway/complete", call, func(body []byte) error { return json.Unmarshal(body, &resp) })
	return resp, err
}

// Stream runs the call on the leader, streaming its answer.
func (g *gatewayNode) Stream(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	if g.a.raft.IsLeader() {
		ch, err := g.router.Stream(ctx, call)
		if !errors.Is(err, gateway.ErrNotLeader) {
			return ch, err
		}
	}
	return g.forwardStream(ctx, call)
}

// leaderLease says whether this server still leads, for the router's
// MayStart: the model's limit is the leader's, so a server that lost the
// lead (a new leader elected while it was stopped or cut off) must start
// no call, even one already waiting in its queue. Raft's own state may lag
// (a leader that was SIGSTOPped believes it leads until it hears the new
// term), so the lead is verified with a quorum (raft's VerifyLeader, one
// round trip) at most once per leaseFresh: a call starts within leaseFresh
// of a proof that this server led.
type leaderLease struct {
	a  *Agent
	mu sync.Mutex // one verification at a time; the others wait for it
	// verified is when the lead was last proved (unix nanoseconds), read
	// without the lock: a call in a fresh lease takes no lock at all.
	verified   atomic.Int64
	refreshing atomic.Bool
}

// leaseFresh is how long a verification of the lead stands. Past half of
// it, a call starts a verification in the background, so that under a
// steady flow of calls none waits for one.
const leaseFresh = 100 * time.Millisecond

func (l *leaderLease) check() error {
	r := l.a.raftNode()
	if r == nil || !r.IsLeader() {
		return gateway.ErrNotLeader
	}
	age := time.Duration(time.Now().UnixNano() - l.verified.Load())
	if age < leaseFresh {
		if age > leaseFresh/2 && l.refreshing.CompareAndSwap(false, true) {
			go func() {
				defer l.refreshing.Store(false)
				_ = l.verify(r)
			}()
		}
		return nil
	}
	return l.verify(r)
}

// verify proves the lead with a quorum, unless another verification just
// did.
func (l *leaderLease) verify(r *raftnode.Node) error {
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.verified.Load() >= start.UnixNano() {
		return nil // proved while this one waited for the lock
	}
	if err := r.Raft.VerifyLeader().Error(); err != nil {
		return gateway.ErrNotLeader
	}
	// The proof stands from before it was asked for.
	l.verified.Store(start.UnixNano())
	return nil
}

// Submit records the call in the maps; the leader runs it.
func (g *gatewayNode) Submit(ctx context.Context, call gateway.Call) (string, error) {
	slots, ok := g.router.Slots(call.Request.Model)
	if !ok {
		return "", fmt.Errorf("%w %q", gateway.ErrUnknownModel, call.Request.Model)
	}
	// The persisted queue has the model's bound: running plus waiting.
	if st := slots.Stats(); g.a.fsm.GatewayActive(call.Request.Model) >= st.Capacity+st.QueueMax {
		return "", gateway.ErrQueueFull
	}
	if len(call.Request.Messages) == 0 {
		return "", &gateway.ProviderError{Kind: gateway.KindBadRequest, Message: "a call needs at least one message"}
	}
	id := newGatewayID()
	if call.IdempotencyKey == "" {
		call.IdempotencyKey = id
	}
	j := &fsm.GatewayJob{Job: gateway.Job{ID: id, Model: call.Request.Model, Session: call.Session, Submitted: time.Now().UTC()},
		Call: call, Key: call.IdempotencyKey}
	res, err := g.apply(ctx, fsm.GatewayJobRequest{Op: fsm.JobOpSubmit, Job: j})
	if err != nil {
		if gateway.FailureKind(err) == string(gateway.KindNetwork) {
			// Raft's, not the gateway's: a leader change, a write timed out.
			return "", fmt.Errorf("%w: %v", gateway.ErrUnavailable, err)
		}
		return "", err
	}
	if s, ok := res.(string); ok && s != "" {
		return s, nil
	}
	return id, nil
}

// Job reports a submitted call from the replica.
func (g *gatewayNode) Job(ctx context.Context, id string) (gateway.Job, error) {
	j, ok := g.a.fsm.GatewayJob(id)
	if !ok {
		return gateway.Job{}, gateway.ErrNoJob
	}
	return j.Job, nil
}

// Cancel records the cancellation; the leader stops the call if it runs.
func (g *gatewayNode) Cancel(ctx context.Context, id string) error {
	if _, ok := g.a.fsm.GatewayJob(id); !ok {
		return gateway.ErrNoJob
	}
	_, err := g.apply(ctx, fsm.GatewayJobRequest{Op: fsm.JobOpCancel, ID: id, At: time.Now().UTC()})
	return err
}

func (g *gatewayNode) apply(ctx context.Context, req fsm.GatewayJobRequest) (any, error) {
	entry, err := fsm.Encode(fsm.GatewayJobRequestType, req)
	if err != nil {
		return nil, err
	}
	return forwardingLog{g.a}.Apply(ctx, entry)
}

// runJobs runs the submitted calls while this server leads: on taking the
// lead it rejects the calls a dead leader had started (they may have run:
// they are never run twice), then starts the queued ones in order, each
// recorded as started before its provider is called.
func (g *gatewayNode) runJobs(stop <-chan struct{}) {
	leading := false
	// Every queued call up to seq has been started here (each waits in
	// the router for its slot); cancels is the count last acted on.
	var seq, cancels uint64
	for {
		changed := g.a.fsm.WatchGateway()
		if g.a.raft.IsLeader() {
			if !leading {
				leading, seq = true, 0
				g.rejectOrphans()
			}
			if g.rescan.Swap(false) {
				seq = 0
			}
			seq = g.startQueued(seq)
			if c := g.a.fsm.GatewayCancels(); c != cancels {
				cancels = c
				g.stopCancelled()
			}
		} else {
			leading = false
		}
		select {
		case <-stop:
			return
		case <-changed:
		case <-time.After(time.Second):
		}
	}
}

// rejectOrphans fails the calls marked running that this node does not
// run: the leader that started them is gone.
func (g *gatewayNode) rejectOrphans() {
	// A new leader may not have applied every committed start yet.
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := g.a.raft.Barrier(bctx)
	cancel()
	if err != nil {
		g.a.log.Warn("waiting for the log before rejecting orphaned gateway calls", "error", err)
	}
	for _, j := range g.a.fsm.GatewayJobs(gateway.JobRunning) {
		g.mu.Lock()
		_, mine := g.running[j.ID]
		g.mu.Unlock()
		if mine {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := g.apply(ctx, fsm.GatewayJobRequest{Op: fsm.JobOpFinish, ID: j.ID, Error: gateway.ErrInterrupted.Error(),
			ErrorKind: gateway.FailInterrupted, At: time.Now().UTC()})
		cancel()
		if err != nil {
			g.a.log.Warn("rejecting a gateway call a dead leader started", "id", j.ID, "error", err)
		}
	}
}

// startQueued starts the calls queued after seq, in order, and returns
// the last one's place.
func (g *gatewayNode) startQueued(seq uint64) uint64 {
	for _, j := range g.a.fsm.GatewayQueuedAfter(seq) {
		seq = j.Seq
		g.mu.Lock()
		_, mine := g.running[j.ID]
		if !mine {
			jctx, jcancel := context.WithCancel(context.Background())
			g.running[j.ID] = jcancel
			go g.run(jctx, j)
		}
		g.mu.Unlock()
	}
	return seq
}

func (g *gatewayNode) run(ctx context.Context, j fsm.GatewayJob) {
	defer func() {
		g.mu.Lock()
		if c := g.running[j.ID]; c != nil {
			c()
		}
		delete(g.running, j.ID)
		g.mu.Unlock()
	}()
	// The start is recorded once the call has its slot, before the
	// provider is called: a leader dying after it leaves a call that may
	// have run, which is rejected, never run again.
	started := false
	call := j.Call
	call.Accepted = true
	call.OnStart = func(ctx context.Context) error {
		if !g.a.raft.IsLeader() {
			return errNotLeading
		}
		_, err := g.apply(ctx, fsm.GatewayJobRequest{Op: fsm.JobOpStart, ID: j.ID})
		started = err == nil
		return err
	}
	resp, err := g.router.Complete(ctx, call)
	if !started && err != nil {
		// Never started here: it stays queued for whoever leads (or is
		// cancelled, which the maps already say).
		if errors.Is(err, errNotLeading) || !g.a.raft.IsLeader() || errors.Is(ctx.Err(), context.Canceled) {
			g.rescan.Store(true)
			return
		}
	}
	req := fsm.GatewayJobRequest{Op: fsm.JobOpFinish, ID: j.ID, At: time.Now().UTC()}
	if err != nil {
		req.Error, req.ErrorKind = err.Error(), gateway.FailureKind(err)
	} else {
		req.Response = &resp
	}
	// The outcome must reach the log even as this node loses the lead.
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := g.apply(fctx, req); err != nil {
		g.a.log.Error("recording a gateway call's outcome", "id", j.ID, "error", err)
	}
}

// stopCancelled cancels the running calls the maps say are cancelled.
func (g *gatewayNode) stopCancelled() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, cancel := range g.running {
		if g.a.fsm.GatewayJobState(id) == gateway.JobCancelled {
			cancel()
		}
	}
}

// errNotLeading stops a queued call on a server that lost the lead.
var errNotLeading = errors.New("this server no longer leads")

// raftLedger keeps the cost counters in the maps. A charge is taken at
// once, in the path that returns the answer, into a pending batch that
// budgets already see; the batch reaches the log within flushEvery, as one
// entry. A charge is applied once even if its batch is sent twice.
type raftLedger struct {
	a *Agent
	// id names this ledger in the log (the server and this process's
	// start), and batch numbers its batches, so a batch sent again after
	// it was applied is skipped.
	id    string
	batch uint64

	mu       sync.Mutex // guards pending and inflight
	pending  []gateway.Charge
	inflight *fsm.GatewayChargesRequest // sent, not known applied
	kick     chan struct{}
}

// flushEvery bounds how long a charge waits for the log; maxBatch how
// many charges one entry carries.
const (
	flushEvery = 20 * time.Millisecond
	maxBatch   = 512
)

func newRaftLedger(a *Agent) *raftLedger {
	return &raftLedger{a: a, id: a.cfg.Name + "/" + newGatewayID(), kick: make(chan struct{}, 1)}
}

// Add takes a charge.
func (l *raftLedger) Add(ctx context.Context, c gateway.Charge) error {
	l.mu.Lock()
	l.pending = append(l.pending, c)
	full := len(l.pending) >= maxBatch
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// Spent reads the replica and adds the charges taken here it has not
// applied yet: every charge counts from the moment it is taken.
func (l *raftLedger) Spent(session, day, key string) gateway.Spend {
	// l.mu is held across the replica's read: the batch in flight is
	// then either applied (the replica's mark says so) or still held.
	l.mu.Lock()
	defer l.mu.Unlock()
	s, applied := l.a.fsm.GatewaySpent(session, day, key, l.id)
	return s.Add(session, day, key, l.unappliedLocked(applied)...)
}

// Counters are the cost counters with every charge taken here counted:
// the leader's answer is exact at once (every call runs on the leader).
func (l *raftLedger) Counters() gateway.Counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, applied := l.a.fsm.GatewayCountersOf(l.id)
	for _, ch := range l.unappliedLocked(applied) {
		c.Apply(ch)
	}
	return c
}

// Sessions are the named sessions' counters with every charge taken here
// counted.
func (l *raftLedger) Sessions(names iter.Seq[string]) map[string]gateway.Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, applied := l.a.fsm.GatewaySessions(names, l.id)
	unapplied := map[string]gateway.Tally{} // a batch's worth at most
	for _, ch := range l.unappliedLocked(applied) {
		t := unapplied[ch.Session]
		t.Micros += ch.Micros
		t.Calls++
		t.Usage = t.Usage.Add(ch.Usage)
		unapplied[ch.Session] = t
	}
	if len(unapplied) == 0 {
		return out
	}
	for n := range names {
		if u, ok := unapplied[n]; ok {
			t := out[n]
			t.Micros, t.Calls, t.Usage = t.Micros+u.Micros, t.Calls+u.Calls, t.Usage.Add(u.Usage)
			out[n] = t
		}
	}
	return out
}

// unappliedLocked are the charges taken here that the replica has not
// applied, given the last batch it applied.
func (l *raftLedger) unappliedLocked(applied uint64) []gateway.Charge {
	if l.inflight == nil || l.inflight.Batch <= applied {
		return l.pending
	}
	return append(slices.Clip(l.inflight.Charges), l.pending...)
}

// run sends the pending charges to the log until stop closes, then sends
// what is left.
func (l *raftLedger) run(stop <-chan struct{}) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for l.flush(ctx) {
			}
			cancel()
			return
		case <-t.C:
		case <-l.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for l.flush(ctx) {
		}
		cancel()
	}
}

// flush sends one batch; it reports whether it sent a full one (more may
// wait). A batch that failed is sent again as it was, under its number,
// before any new one.
func (l *raftLedger) flush(ctx context.Context) bool {
	l.mu.Lock()
	if l.inflight == nil {
		n := min(len(l.pending), maxBatch)
		if n == 0 {
			l.mu.Unlock()
			return false
		}
		l.batch++
		l.inflight = &fsm.GatewayChargesRequest{Ledger: l.id, Batch: l.batch, At: time.Now().UTC(),
			Charges: slices.Clone(l.pending[:n])}
		l.pending = l.pending[n:]
	}
	req := l.inflight
	l.mu.Unlock()
	entry, err := fsm.Encode(fsm.GatewayChargesRequestType, req)
	if err == nil {
		_, err = forwardingLog{l.a}.Apply(ctx, entry)
	}
	if err != nil {
		l.a.log.Warn("recording gateway charges; kept to send again", "charges", len(req.Charges), "error", err)
		return false
	}
	l.mu.Lock()
	l.inflight = nil
	l.mu.Unlock()
	return len(req.Charges) == maxBatch
}

// forward posts a call to the leader's internal gateway endpoint.
func (g *gatewayNode) forward(ctx context.Context, path string, call gateway.Call, decode func([]byte) error) error {
	body, err := json.Marshal(call)
	if err != nil {
		return err
	}
	admin, err := g.leaderAdmin(ctx)
	if err != nil {
		return err
	}
	b, err := g.a.fetch(ctx, http.MethodPost, admin, path, body)
	if err != nil {
		return gatewayError(err)
	}
	return decode(b)
}

// leaderAdmin is the leader's admin address. During an election (none
// known yet, or this server, deposed, still named) it waits for one, for
// at most electionWait and ctx: a call waits out a leader change rather
// than failing.
func (g *gatewayNode) leaderAdmin(ctx context.Context) (string, error) {
	deadline := time.Now().Add(electionWait)
	for {
		addr, id := g.a.raft.Leader()
		admin := ""
		if id != g.a.cfg.Name || g.a.raft.IsLeader() {
			admin = g.a.peers.adminOf(addr)
			if admin == "" && addr != "" {
				g.a.refreshPeers(ctx)
				admin = g.a.peers.adminOf(addr)
			}
		}
		if admin != "" {
			return admin, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("%w: no leader known to forward the call to", gateway.ErrNoDeployment)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// electionWait bounds how long a call waits for a leader to be known.
const electionWait = 15 * time.Second

// gatewayError turns a leader's refusal back into the gateway's error.
func gatewayError(err error) error {
	var re *remoteErr
	if !errors.As(err, &re) {
		return err
	}
	msg := re.err.Error()
	for _, s := range []error{gateway.ErrUnknownModel, gateway.ErrQueueFull, gateway.ErrQueueTimeout, gateway.ErrBudget,
		gateway.ErrNoDeployment, gateway.ErrInterrupted, gateway.ErrNoJob} {
		if strings.HasPrefix(msg, s.Error()) {
			return fmt.Errorf("%w%s", s, strings.TrimPrefix(msg, s.Error()))
		}
	}
	return &gateway.ProviderError{Kind: gateway.ErrorKind(kindFromStatus(re.status)), Status: re.status, Message: msg}
}

func kindFromStatus(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return string(gateway.KindBadRequest)
	case status == http.StatusTooManyRequests:
		return string(gateway.KindRateLimited)
	case status == http.StatusGatewayTimeout:
		return string(gateway.KindTimeout)
	}
	return string(gateway.KindServer)
}

func newGatewayID() string {
	var b [12]byte
	_, _ = randRead(b[:])
	return fmt.Sprintf("gw-%x", b)
}

// Wait waits until a submitted call ends or ctx does, and reports it (the
// transports' long poll).
func (g *gatewayNode) Wait(ctx context.Context, id string) (gateway.Job, error) {
	for {
		changed := g.a.fsm.WatchGatewayJob(id)
		j, ok := g.a.fsm.GatewayJob(id)
		if !ok {
			return gateway.Job{}, gateway.ErrNoJob
		}
		switch j.State {
		case gateway.JobDone, gateway.JobFailed, gateway.JobCancelled:
			return j.Job, nil
		}
		select {
		case <-ctx.Done():
			return j.Job, nil
		case <-changed:
		}
	}
}
