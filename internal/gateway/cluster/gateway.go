// Package cluster is the AI gateway in the server role (docs/gateway.md):
// the raft-backed half of internal/gateway. Every server builds the same
// router from the configuration and runs the calls it receives, under its
// share of each model's limit that the leader leases (shares.go): a
// model's limit is then the aggregate of every caller on every node. The
// budgets, the keys' limits and the charges are counted on the leader
// wherever calls run (remote_reserve.go, limits.go); submitted calls run
// on the leader. Submitted calls, the ceilings of the shares and the cost
// counters are in the maps (internal/fsm).
//
// It owns the gateway block, the queue of submitted calls, the ledger of
// charges, the leader lease, the forwarding to the leader, the
// transports' listeners, the gateway's admin routes and metrics, and the
// workers' gateway calls. It must never import internal/agent: what it
// needs of the server it runs on is Server, which the agent implements.
package cluster

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/anthropic"
	"github.com/stickyd/stickyd/internal/gateway/provider/azure"
	"github.com/stickyd/stickyd/internal/gateway/provider/bedrock"
	"github.com/stickyd/stickyd/internal/gateway/provider/gemini"
	"github.com/stickyd/stickyd/internal/gateway/provider/openai"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// Server is what the gateway needs of the server it runs on: its raft
// member, the way to the leader, and calls to the other agents' admin
// APIs. The agent implements it; every method is safe for concurrent use.
type Server interface {
	// Name is this server's name (its raft ID).
	Name() string
	// Raft is this server's raft member, nil before it is up (the
	// gateway starts after it is).
	Raft() *raftnode.Node
	// Apply writes a log entry through the leader, from any server: while
	// there is no leader, or it cannot be reached, it retries until ctx
	// ends. A leader's refusal of the entry is final.
	Apply(ctx context.Context, entry []byte) (any, error)
	// AdminOf is the admin API address of the server id at raftAddr as
	// this server knows it, "" when it does not (or knows another server
	// at that address); RefreshPeers learns the
	// servers' addresses again (a server that restarts may come back with
	// a new one).
	AdminOf(id, raftAddr string) string
	RefreshPeers(ctx context.Context)
	// Fetch calls the admin API of the agent at addr and returns the
	// answer's bytes; a refusal (an answer other than 200) is a Refusal.
	Fetch(ctx context.Context, method, addr, path string, body []byte) ([]byte, error)
	// AdminRequest is a request to the admin API of the agent at addr,
	// with this agent's credentials. StreamClient sends such requests
	// with no timeout but their context's: an answer may stream for as
	// long as its call runs.
	AdminRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error)
	StreamClient() *http.Client
}

// Refusal is another agent's refusal of an admin call, as Server.Fetch
// returns it: the HTTP status it answered with, and its message as the
// error's.
type Refusal interface {
	error
	StatusCode() int
}

// Gateway is the gateway on this server: the router (used while this
// server leads), the submitted calls it runs, and the transports'
// listeners.
type Gateway struct {
	cfg    *Config
	srv    Server
	maps   *fsm.FSM
	log    hclog.Logger
	router *gateway.Router
	ledger *raftLedger
	access func(string) (gateway.Access, bool)
	// catchUp brings the replica up to the leader's before a key of
	// stickyd's format it does not know is refused (catchup.go).
	catchUp *catchUp

	// lead proves this server leads before it grants shares; lease is
	// this server's own share of the limits; shares is the table of
	// everyone's while this server leads (shares.go), sharesMu
	// serialises the writes of its ceilings.
	lead        *leaderLease
	lease       *leaseClient
	limitKeeper *clusterLimits
	shares      atomic.Pointer[shareTable]
	sharesMu    sync.Mutex

	mu      sync.Mutex // guards running
	running map[string]context.CancelFunc
	// rescan asks the runner to look at the whole queue again: a call
	// left it queued (this server lost the lead while it waited).
	rescan atomic.Bool

	// servers are the transports' listeners, addr and grpcAddr their
	// addresses (set by Start).
	servers        []server
	addr, grpcAddr string
	ledgerDone     chan struct{} // closed once the last charges are sent
}

var (
	_ gateway.Service      = (*Gateway)(nil)
	_ gateway.EmbedService = (*Gateway)(nil)
	_ gateway.ModelLister  = (*Gateway)(nil)
)

// New builds the router from c (a block Finish checked) for a gateway on
// srv, which reads the queue and the counters from the replica maps and
// logs to log.
func New(c *Config, srv Server, maps *fsm.FSM, log hclog.Logger) (*Gateway, error) {
	ledger := newRaftLedger(srv, maps, log)
	g := &Gateway{cfg: c, srv: srv, maps: maps, log: log, ledger: ledger, running: map[string]context.CancelFunc{},
		lead: &leaderLease{srv: srv}, access: accessOf(maps)}
	g.lease = newLeaseClient(g, ledger.id, g.grace())
	g.limitKeeper = &clusterLimits{g: g}
	g.catchUp = &catchUp{leaderIndex: g.leaderApplied, applied: maps.Index}
	ledger.post = g.postLeader
	rc := gateway.Config{QueueTimeout: duration(c.QueueTimeout), CallTimeout: duration(c.CallTimeout),
		RetryAfterCap: duration(c.RetryAfterCap), Ledger: ledger, MayStart: g.lease.valid,
		SessionBudget: int64(c.SessionBudget * 1e6), DayBudget: int64(c.DayBudget * 1e6), KeyBudget: int64(c.KeyBudget * 1e6),
		Access: g.access, Limits: g.limitKeeper, Logger: log.Named("gateway")}
	if len(c.KeyBudgets) > 0 {
		rc.KeyBudgets = map[string]int64{}
		for name, b := range c.KeyBudgets {
			rc.KeyBudgets[name] = int64(b * 1e6)
		}
	}
	if c.DayZone != "" {
		rc.Zone, _ = time.LoadLocation(c.DayZone)
	}
	for _, m := range c.Models {
		gm := gateway.Model{Name: m.Name, Concurrency: m.Concurrency, QueueMax: m.QueueMax, MaxOutputTokens: m.MaxOutputTokens,
			Routing: gateway.Routing(m.Routing)}
		if m.MaxOutputTokens == 0 {
			log.Info("gateway: a model without max_output_tokens: a call with a budget that names no max_tokens reserves its prompt alone, and its answer may pass the budget", "model", m.Name)
		}
		for _, d := range m.Deployments {
			ad, err := newAdapter(d)
			if err != nil {
				return nil, fmt.Errorf("gateway: model %q, deployment %q: %w", m.Name, d.Name, err)
			}
			gd := gateway.Deployment{Name: d.Name, Provider: d.Provider, Upstream: d.Model, Concurrency: d.Concurrency, Weight: d.Weight, Adapter: ad}
			if d.Price != nil {
				gd.Price = *d.Price
			}
			gm.Deployments = append(gm.Deployments, gd)
		}
		rc.Models = append(rc.Models, gm)
	}
	rc.TracerProvider = c.TracerProvider
	r, err := gateway.New(rc)
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// No call starts here before the leader grants a share.
	for _, m := range r.Models() {
		s, _ := r.Slots(m)
		s.SetCapacity(0)
	}
	g.router = r
	return g, nil
}

// Start registers the gateway's metrics on reg, sends the charges to the
// log until stop closes, and serves the transports. The submitted calls
// run in LeadJobs, a leader task of the server. After an error, what
// started is stopped as after a Start that succeeded: Drain, Close, Stop.
func (g *Gateway) Start(reg prometheus.Registerer, stop <-chan struct{}) error {
	if err := reg.Register(newCollector(g)); err != nil {
		return fmt.Errorf("gateway: registering its metrics: %w", err)
	}
	// Ask now whether every server applies the keys' and reservations'
	// entries: the answer comes in the background.
	g.maps.Allows(fsm.GatewayCeilingsRequestType)
	g.ledgerDone = make(chan struct{})
	reserving := make(chan struct{})
	go func() {
		defer close(reserving)
		g.ledger.runReservations(stop)
	}()
	go func() {
		defer close(g.ledgerDone)
		g.ledger.run(stop)
		<-reserving
	}()
	go g.lease.run(stop)
	go g.ledger.runRemote(stop)
	go g.ledger.runCeilings(stop)
	return g.serve()
}

// newAdapter builds a deployment's provider adapter.
func newAdapter(d *Deployment) (gateway.Adapter, error) {
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
	case "gemini":
		return gemini.New(gemini.Config{BaseURL: d.BaseURL, APIVersion: d.APIVersion, APIKey: key, StallTimeout: stall})
	case "azure":
		return azure.New(azure.Config{Endpoint: d.BaseURL, APIVersion: d.APIVersion, APIKey: key, StallTimeout: stall, Name: d.Name})
	case "bedrock":
		return bedrock.New(bedrock.Config{Region: d.Region, Endpoint: d.BaseURL, Profile: d.AWSProfile, StallTimeout: stall})
	default: // openai, compat
		return openai.New(openai.Config{BaseURL: d.BaseURL, APIKey: key, StallTimeout: stall, Name: d.Name,
			Headers: d.Headers, AuthHeader: d.AuthHeader, NoStreamOptions: d.NoStreamOptions, ContinuousUsage: d.ContinuousUsage})
	}
}

// Complete runs the call on this server, under its share of the model's
// limit; a call that counts against a budget or a key's limits runs on
// the leader, whose ledger and limiter hold them.
func (g *Gateway) Complete(ctx context.Context, call gateway.Call) (gateway.Response, error) {
	if call.IdempotencyKey != "" {
		// A key makes the call a submitted one, whose key the maps
		// record: the same call sent again (a retry after a lost answer)
		// gets the first run's answer, and never runs twice.
		return gateway.CompleteOnce(ctx, g, call)
	}
	if g.runsHere(call) {
		return g.completeHere(ctx, call)
	}
	var resp gateway.Response
	err := g.forward(ctx, "/v1/internal/gateway/complete", call, func(body []byte) error { return json.Unmarshal(body, &resp) })
	return resp, err
}

// runsHere says whether call runs on this server: always on the leader;
// elsewhere unless the leader hands out no shares (a rolling update still
// runs an older server). A call's budgets and its key's limits are
// counted on the leader (remote_reserve.go, limits.go).
func (g *Gateway) runsHere(call gateway.Call) bool {
	if g.srv.Raft().IsLeader() {
		return true
	}
	return !g.lease.nowhere.Load()
}

// here runs fn, a call on this server's router, under this server's
// lease: a call that had its slot as the lease lapsed never started, and
// waits for the next lease (or its context); one cut because the lease
// lapsed for good (cutAll) says so.
func here[T any](ctx context.Context, g *Gateway, model string, fn func(ctx context.Context, end func()) (T, bool, error)) (T, error) {
	for {
		if s, ok := g.router.Slots(model); ok {
			if st := s.Stats(); st.InFlight >= st.Capacity {
				g.lease.ask() // a share is needed, or a bigger one
			}
		}
		cctx, done := g.lease.track(ctx)
		out, ends, err := fn(cctx, done)
		if !ends {
			// Not a stream that started: its end calls done.
			done()
		}
		if errors.Is(err, errLeaseLapsed) {
			if err := g.lease.wait(ctx); err != nil {
				return out, err
			}
			continue
		}
		if err != nil && errors.Is(context.Cause(cctx), errLeaseLapsed) && ctx.Err() == nil {
			err = fmt.Errorf("%w: the call was cut: this server lost touch with the cluster's leader", gateway.ErrUnavailable)
		}
		return out, err
	}
}

// completeHere runs the call on this server.
func (g *Gateway) completeHere(ctx context.Context, call gateway.Call) (gateway.Response, error) {
	return here(ctx, g, call.Request.Model, func(ctx context.Context, _ func()) (gateway.Response, bool, error) {
		resp, err := g.router.Complete(ctx, call)
		return resp, false, err
	})
}

// Stream runs the call on this server (or the leader, as Complete),
// streaming its answer.
func (g *Gateway) Stream(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	if g.runsHere(call) {
		return g.streamHere(ctx, call)
	}
	return g.forwardStream(ctx, call)
}

// streamHere streams the call from this server: the lease tracks the
// call until its stream ends.
func (g *Gateway) streamHere(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	return here(ctx, g, call.Request.Model, func(ctx context.Context, end func()) (<-chan gateway.Chunk, bool, error) {
		if prev := call.OnEnd; prev != nil {
			call.OnEnd = func() { end(); prev() }
		} else {
			call.OnEnd = end
		}
		out, err := g.router.Stream(ctx, call)
		return out, err == nil, err
	})
}

// Embed runs an embedding call on this server (or the leader, as
// Complete).
func (g *Gateway) Embed(ctx context.Context, call gateway.EmbedCall) (gateway.Embedding, error) {
	if g.runsHere(gateway.Call{Key: call.Key, Session: call.Session}) {
		return g.embedHere(ctx, call)
	}
	body, err := json.Marshal(call)
	if err != nil {
		return gateway.Embedding{}, err
	}
	b, err := g.postLeader(ctx, "/v1/internal/gateway/embed", body)
	if err != nil {
		return gateway.Embedding{}, err
	}
	var out gateway.Embedding
	return out, json.Unmarshal(b, &out)
}

// embedHere runs an embedding call on this server.
func (g *Gateway) embedHere(ctx context.Context, call gateway.EmbedCall) (gateway.Embedding, error) {
	return here(ctx, g, call.Request.Model, func(ctx context.Context, _ func()) (gateway.Embedding, bool, error) {
		out, err := g.router.Embed(ctx, call)
		return out, false, err
	})
}

// Models lists the configured models (every server has the same).
func (g *Gateway) Models() []string { return g.router.Models() }

// ModelsFor lists the models an API key may call: those its model list
// and its tenant's allow.
func (g *Gateway) ModelsFor(key string) []string {
	acc, ok := g.access(key)
	if !ok {
		return g.router.Models()
	}
	var out []string
	for _, m := range g.router.Models() {
		if acc.KeyAllowance.Allows(m) && (acc.Tenant == "" || acc.TenantAllowance.Allows(m)) {
			out = append(out, m)
		}
	}
	return out
}

// Submit records the call in the maps; the leader runs it.
func (g *Gateway) Submit(ctx context.Context, call gateway.Call) (string, error) {
	slots, ok := g.router.Slots(call.Request.Model)
	if !ok {
		return "", fmt.Errorf("%w %q", gateway.ErrUnknownModel, call.Request.Model)
	}
	// The persisted queue has the model's bound: running plus waiting.
	if st := slots.Stats(); g.maps.GatewayActive(call.Request.Model) >= g.limits()[call.Request.Model]+st.QueueMax {
		return "", gateway.ErrQueueFull
	}
	if len(call.Request.Messages) == 0 {
		return "", &gateway.ProviderError{Kind: gateway.KindBadRequest, Message: "a call needs at least one message"}
	}
	id := newID()
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
func (g *Gateway) Job(ctx context.Context, id string) (gateway.Job, error) {
	j, ok := g.maps.GatewayJob(id)
	if !ok {
		return gateway.Job{}, gateway.ErrNoJob
	}
	return j.Job, nil
}

// Cancel records the cancellation; the leader stops the call if it runs.
func (g *Gateway) Cancel(ctx context.Context, id string) error {
	if _, ok := g.maps.GatewayJob(id); !ok {
		return gateway.ErrNoJob
	}
	_, err := g.apply(ctx, fsm.GatewayJobRequest{Op: fsm.JobOpCancel, ID: id, At: time.Now().UTC()})
	return err
}

func (g *Gateway) apply(ctx context.Context, req fsm.GatewayJobRequest) (any, error) {
	entry, err := fsm.Encode(fsm.GatewayJobRequestType, req)
	if err != nil {
		return nil, err
	}
	return g.srv.Apply(ctx, entry)
}

// LeadJobs runs the submitted calls while this server leads: it is a
// leader task (server.Leadership), started as a term begins and stopped,
// by stop, as it ends. It first rejects the calls a dead leader had
// started (they may have run: they are never run twice), then starts the
// queued ones in order, each recorded as started before its provider is
// called.
func (g *Gateway) LeadJobs(stop <-chan struct{}) {
	g.rejectOrphans()
	// Every queued call up to seq has been started here (each waits in
	// the router for its slot); cancels is the count last acted on.
	var seq, cancels uint64
	for {
		changed := g.maps.WatchGateway()
		if g.rescan.Swap(false) {
			seq = 0
		}
		seq = g.startQueued(seq)
		if c := g.maps.GatewayCancels(); c != cancels {
			cancels = c
			g.stopCancelled()
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
func (g *Gateway) rejectOrphans() {
	// A new leader may not have applied every committed start yet.
	bctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	err := g.srv.Raft().Barrier(bctx)
	cancel()
	if err != nil {
		g.log.Warn("waiting for the log before rejecting orphaned gateway calls", "error", err)
	}
	for _, j := range g.maps.GatewayJobs(gateway.JobRunning) {
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
			g.log.Warn("rejecting a gateway call a dead leader started", "id", j.ID, "error", err)
		}
	}
}

// startQueued starts the calls queued after seq, in order, and returns
// the last one's place.
func (g *Gateway) startQueued(seq uint64) uint64 {
	for _, j := range g.maps.GatewayQueuedAfter(seq) {
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

func (g *Gateway) run(ctx context.Context, j fsm.GatewayJob) {
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
		if !g.srv.Raft().IsLeader() {
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
		if errors.Is(err, errNotLeading) || errors.Is(err, errLeaseLapsed) || !g.srv.Raft().IsLeader() || errors.Is(ctx.Err(), context.Canceled) {
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
		g.log.Error("recording a gateway call's outcome", "id", j.ID, "error", err)
	}
}

// stopCancelled cancels the running calls the maps say are cancelled.
func (g *Gateway) stopCancelled() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, cancel := range g.running {
		if g.maps.GatewayJobState(id) == gateway.JobCancelled {
			cancel()
		}
	}
}

// errNotLeading stops a queued call on a server that lost the lead.
var errNotLeading = errors.New("this server no longer leads")

// forward posts a call to the leader's internal gateway endpoint.
func (g *Gateway) forward(ctx context.Context, path string, call gateway.Call, decode func([]byte) error) error {
	body, err := json.Marshal(call)
	if err != nil {
		return err
	}
	b, err := g.postLeader(ctx, path, body)
	if err != nil {
		return err
	}
	return decode(b)
}

// postLeader posts body to the leader's path. A server that answers it no
// longer leads (421: deposed since this server last heard) is not the
// end: the call goes to the new leader once one is known, within
// electionWait.
func (g *Gateway) postLeader(ctx context.Context, path string, body []byte) ([]byte, error) {
	deadline := time.Now().Add(electionWait)
	for {
		admin, err := g.leaderAdmin(ctx)
		if err != nil {
			return nil, err
		}
		b, err := g.srv.Fetch(ctx, http.MethodPost, admin, path, body)
		var re Refusal
		if err != nil && errors.As(err, &re) && re.StatusCode() == http.StatusMisdirectedRequest && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return nil, gatewayError(err)
		}
		return b, nil
	}
}

// leaderAdmin is the leader's admin address. During an election (none
// known yet, or this server, deposed, still named) it waits for one, for
// at most electionWait and ctx: a call waits out a leader change rather
// than failing.
func (g *Gateway) leaderAdmin(ctx context.Context) (string, error) {
	deadline := time.Now().Add(electionWait)
	for {
		addr, id := g.srv.Raft().Leader()
		admin := ""
		if id != g.srv.Name() || g.srv.Raft().IsLeader() {
			admin = g.srv.AdminOf(id, addr)
			if admin == "" && addr != "" {
				g.srv.RefreshPeers(ctx)
				admin = g.srv.AdminOf(id, addr)
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
	var re Refusal
	if !errors.As(err, &re) {
		return err
	}
	return refused(re.StatusCode(), re.Error())
}

// refused is the gateway's error for a leader's refusal with status and
// msg.
func refused(status int, msg string) error {
	if err, ok := gateway.DecodeFailure(msg); ok {
		return err
	}
	for _, s := range []error{gateway.ErrUnknownModel, gateway.ErrQueueFull, gateway.ErrQueueTimeout, gateway.ErrBudget,
		gateway.ErrNoDeployment, gateway.ErrInterrupted, gateway.ErrNoJob, gateway.ErrRateLimit, gateway.ErrModelNotAllowed} {
		if strings.HasPrefix(msg, s.Error()) {
			return fmt.Errorf("%w%s", s, strings.TrimPrefix(msg, s.Error()))
		}
	}
	return &gateway.ProviderError{Kind: gateway.ErrorKind(kindFromStatus(status)), Status: status, Message: msg}
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

var randRead = rand.Read

func newID() string {
	var b [12]byte
	_, _ = randRead(b[:])
	return fmt.Sprintf("gw-%x", b)
}

// Wait waits until a submitted call ends or ctx does, and reports it (the
// transports' long poll).
func (g *Gateway) Wait(ctx context.Context, id string) (gateway.Job, error) {
	for {
		changed := g.maps.WatchGatewayJob(id)
		j, ok := g.maps.GatewayJob(id)
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
