package gateway

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
)

// Deployment is one place a model is served: a provider account and its
// upstream model name, what it costs, and its own concurrency bound.
type Deployment struct {
	Name     string
	Provider string
	// Upstream is the provider's name of the model.
	Upstream string
	Price    Price
	// Concurrency bounds the calls running on this deployment from this
	// node (0: only the model's limit).
	Concurrency int
	// Weight is the deployment's share of a weighted model's first
	// attempts, against the other deployments' (0: 1).
	Weight  int
	Adapter Adapter
}

// Model is a model callers ask for by name: its deployments, tried in
// the order its routing gives, and its aggregate concurrency limit.
type Model struct {
	Name string
	// Routing orders the deployments for each call (default
	// RoutingOrdered: as configured).
	Routing Routing
	// Concurrency is the number of calls of this model that may run at
	// once on this node (its share of the cluster's limit).
	Concurrency int
	// QueueMax bounds the calls waiting for a slot (default 1000).
	QueueMax int
	// MaxOutputTokens is the most tokens an answer of the model may hold
	// (its provider's cap): a call that names no max_tokens reserves
	// that many output tokens against its budgets. Zero: such a call
	// reserves its prompt alone.
	MaxOutputTokens int
	Deployments     []Deployment
}

// Ledger keeps the cost counters and the reservations of the calls under
// way: it adds each answer's cost to its session, its day, its API key,
// its tenant and the total as the answer returns, and holds each call's
// worst case from before it starts until its charge settles it.
type Ledger interface {
	// Add takes a charge. A charge naming a Reservation settles it: the
	// reservation is released as the charge counts, at once.
	Add(ctx context.Context, c Charge) error
	// Check refuses (ErrBudget, naming the budget) a call one of whose
	// budgets is already spent or held whole, before it waits for a
	// slot.
	Check(budgets []Budget) error
	// Reserve holds r.Micros in every budget it counts in if each fits
	// (FitBudgets: every charge taken and every reservation held
	// counted), and returns once the reservation holds wherever budgets
	// are read; a refusal wraps ErrBudget.
	Reserve(ctx context.Context, r Reservation, budgets []Budget) error
	// Release releases a reservation whose call ended without a charge.
	Release(id string)
}

// Config configures a Router.
type Config struct {
	Models []Model
	Health HealthConfig
	// RetryAfterCap is the longest retry-after honoured on a deployment
	// before failing over (default 10 s); Backoff the base of the jittered
	// backoff between attempts (default 100 ms).
	RetryAfterCap time.Duration
	Backoff       time.Duration
	// CallTimeout bounds one attempt (default 2 minutes); QueueTimeout a
	// call's wait for a slot when the call has no deadline (default 1
	// minute).
	CallTimeout  time.Duration
	QueueTimeout time.Duration
	Ledger       Ledger
	// MayStart, if set, is asked once a call has its slot, before any
	// provider is called: an error gives the slot back and ends the call
	// with it, never started. A cluster's gateway says here whether this
	// node still leads (ErrNotLeader): a deposed leader starts nothing,
	// so the model's limit holds across a leader change.
	MayStart func() error
	// SessionBudget and DayBudget, in micro-dollars, refuse calls of a
	// session or a day that has spent them (0: none).
	SessionBudget, DayBudget int64
	// KeyBudget refuses the calls of an API key that spent it, in
	// micro-dollars (0: none); KeyBudgets sets it for a key by name.
	KeyBudget  int64
	KeyBudgets map[string]int64
	// Limits, if set, counts calls against their keys' and tenants'
	// limits in place of the router's own memory.
	Limits LimitKeeper
	// Access, if set, says what an API key created through the admin API
	// may do (ok false: the key is not one of them, but a configured one,
	// which KeyBudget and KeyBudgets hold). Such a key's own budget
	// replaces KeyBudget; its tenant's budget holds too; their limits
	// (RPM, TPM, concurrency) refuse with a LimitError and their model
	// lists with ErrModelNotAllowed.
	Access func(key string) (Access, bool)
	// Zone is the calendar of the day counters (default UTC); Clock the
	// time (default time.Now; tests move it).
	Zone   *time.Location
	Clock  func() time.Time
	Logger hclog.Logger
	// TracerProvider, if set, traces every call (tracing.go): nil is
	// off, at the cost of a nil check.
	TracerProvider trace.TracerProvider
}

// Router is the gateway's Service on one node: limits, queue, failover,
// health and cost.
type Router struct {
	cfg    Config
	log    hclog.Logger
	tracer trace.Tracer // nil: calls are not traced
	models map[string]*model
	limits *limiter

	mu   sync.Mutex // guards jobs and keys
	jobs map[string]*job
	keys map[string]string // idempotency key → job id

	stop chan struct{}
	wg   sync.WaitGroup
}

type model struct {
	Model
	slots *Slots
	deps  []*deployment
	// accepted counts the submitted calls not yet finished: the queue
	// Submit bounds.
	accepted atomic.Int64
	// calls counts the calls latency routing ordered; probed is calls
	// when it last sent one to measure a deployment.
	calls, probed atomic.Int64
}

type deployment struct {
	Deployment
	health *health
	slots  *Slots // nil without a deployment bound
	// limitedUntil is when the provider's last 429 on this deployment
	// lifts (unix nanoseconds; 0: none): a rate limit is not ill health,
	// the deployment is only skipped while another can answer, and
	// waited for when none can.
	limitedUntil atomic.Int64
	// inFlight counts this node's attempts on the deployment, from their
	// start to their answer or their stream's end; remoteInFlight the
	// other servers' (SetRemoteInFlight). Least-busy routing adds them.
	inFlight, remoteInFlight atomic.Int64
	// timed says the model routes by latency: latency holds the
	// deployment's estimates, one per series.
	timed   bool
	latency [numSeries]latencyEstimate
}

// noRetryAfter is how long a 429 without a Retry-After holds a deployment.
const noRetryAfter = time.Second

// limited records a 429 on d, for its Retry-After (or noRetryAfter).
func (d *deployment) limited(now time.Time, err error) bool {
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Kind != KindRateLimited {
		return false
	}
	wait := pe.RetryAfter
	if wait <= 0 {
		wait = noRetryAfter
	}
	d.limitedUntil.Store(now.Add(wait).UnixNano())
	return true
}

// limitedFor is how long d's rate limit still holds at now.
func (d *deployment) limitedFor(now time.Time) time.Duration {
	return max(0, time.Duration(d.limitedUntil.Load()-now.UnixNano()))
}

// plan is the order to try a model's deployments in, for a call of
// series s: the healthy ones free of a rate limit, in the order the
// model's routing gives, then the healthy ones under one (soonest free
// first); the degraded ones only when none is healthy.
func (r *Router) plan(m *model, s series) []*deployment {
	now := r.cfg.Clock()
	ds := r.attempts(m)
	free := make([]*deployment, 0, len(ds))
	var held []*deployment
	for _, d := range ds {
		if d.limitedFor(now) > 0 {
			held = append(held, d)
		} else {
			free = append(free, d)
		}
	}
	route(m, free, s, now)
	slices.SortStableFunc(held, func(a, b *deployment) int { return cmp.Compare(a.limitedFor(now), b.limitedFor(now)) })
	return append(free, held...)
}

// waitLimit waits out d's rate limit before a try, when it holds and fits
// what is left of the call's budget for such waits (*left, at first the
// cap: a call waits out rate limits for at most retry_after_cap in all);
// it reports false when the call cannot wait it (past the budget, or ctx
// ended).
func (r *Router) waitLimit(ctx context.Context, d *deployment, left *time.Duration) bool {
	wait := d.limitedFor(r.cfg.Clock())
	if wait == 0 {
		return true
	}
	if wait > *left {
		return false
	}
	*left -= wait
	r.waitingOut(ctx, d, wait)
	return sleep(ctx, wait+jitter(r.cfg.Backoff))
}

type job struct {
	Job
	done   chan struct{}
	cancel context.CancelFunc
}

var _ Service = (*Router)(nil)

// New builds a router and starts its health probes; Close stops them.
func New(cfg Config) (*Router, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.RetryAfterCap <= 0 {
		cfg.RetryAfterCap = 10 * time.Second
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 2 * time.Minute
	}
	if cfg.QueueTimeout <= 0 {
		cfg.QueueTimeout = time.Minute
	}
	if cfg.Zone == nil {
		cfg.Zone = time.UTC
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Ledger == nil {
		cfg.Ledger = NewMemLedger()
	}
	cfg.Health = cfg.Health.withDefaults()
	r := &Router{cfg: cfg, log: cfg.Logger, models: map[string]*model{}, limits: newLimiter(), jobs: map[string]*job{}, keys: map[string]string{}, stop: make(chan struct{})}
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	for _, m := range cfg.Models {
		if m.Name == "" || len(m.Deployments) == 0 || m.Concurrency < 1 {
			return nil, fmt.Errorf("model %q: needs a name, a concurrency of at least 1 and a deployment", m.Name)
		}
		if _, dup := r.models[m.Name]; dup {
			return nil, fmt.Errorf("model %q is configured twice", m.Name)
		}
		if m.QueueMax <= 0 {
			m.QueueMax = 1000
		}
		routing, err := ParseRouting(string(m.Routing))
		if err != nil {
			return nil, fmt.Errorf("model %q: %w", m.Name, err)
		}
		m.Routing = routing
		mm := &model{Model: m, slots: NewSlots(m.Concurrency, m.QueueMax)}
		for _, d := range m.Deployments {
			if d.Adapter == nil || d.Name == "" {
				return nil, fmt.Errorf("model %q: deployment %q has no adapter", m.Name, d.Name)
			}
			if d.Weight < 0 {
				return nil, fmt.Errorf("model %q: deployment %q: a weight must not be negative", m.Name, d.Name)
			}
			dd := &deployment{Deployment: d, health: &health{cfg: cfg.Health}, timed: m.Routing == RoutingLatency}
			if d.Concurrency > 0 {
				dd.slots = NewSlots(d.Concurrency, 0)
			}
			mm.deps = append(mm.deps, dd)
		}
		r.models[m.Name] = mm
	}
	r.wg.Add(1)
	go r.probe()
	return r, nil
}

// Close stops the health probes and cancels submitted calls.
func (r *Router) Close() {
	select {
	case <-r.stop:
		return
	default:
		close(r.stop)
	}
	r.mu.Lock()
	for _, j := range r.jobs {
		j.cancel()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// Model returns a model's slots (for its share of a cluster's limit) and
// whether it is configured.
func (r *Router) Slots(name string) (*Slots, bool) {
	m, ok := r.models[name]
	if !ok {
		return nil, false
	}
	return m.slots, true
}

// Models lists the configured models' names, sorted.
func (r *Router) Models() []string {
	out := make([]string, 0, len(r.models))
	for n := range r.models {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Complete runs one call to its end.
func (r *Router) Complete(ctx context.Context, call Call) (Response, error) {
	ctx, span := r.startCall(ctx, opChat, call.Request.Model, false)
	resp, err := r.complete(ctx, call)
	if span != nil {
		o := outcome{err: err}
		if err == nil {
			o = answered(resp)
		}
		endSpan(span, o)
	}
	return resp, err
}

func (r *Router) complete(ctx context.Context, call Call) (Response, error) {
	m, ctx, release, err := r.admit(ctx, call)
	if err != nil {
		return Response{}, err
	}
	defer release()
	if call.OnStart != nil {
		if err := call.OnStart(ctx); err != nil {
			return Response{}, err
		}
	}
	var last, refusal error
	left := r.cfg.RetryAfterCap
	for round := 0; ; round++ {
		limitedAll := true
		plan := r.plan(m, seriesComplete)
		for i, d := range plan {
			next := i+1 < len(plan)
			// Another deployment is tried at once; only a deployment tried
			// again (a later round: its rate limit lifted) waits a backoff.
			if round > 0 && d.limitedFor(r.cfg.Clock()) == 0 && !sleep(ctx, jitter(r.cfg.Backoff)) {
				return Response{}, ctx.Err()
			}
			if !r.waitLimit(ctx, d, &left) {
				if ctx.Err() != nil {
					return Response{}, ctx.Err()
				}
				continue // held past the cap: only another may answer
			}
			resp, err := r.completeOn(ctx, d, call)
			if err != nil && next {
				r.failingOver(ctx, d, err)
			}
			if KindOf(err) == KindUnsupported {
				refusal = cmp.Or(refusal, err)
				continue // another deployment may carry it
			}
			if err == nil {
				resp.Provider, resp.Deployment = d.Provider, d.Name
				resp.CostMicros = d.Price.Cost(resp.Usage)
				if err := r.charge(ctx, call, m, d, resp.Usage, resp.CostMicros); err != nil {
					r.log.Error("recording a call's cost", "model", m.Name, "session", call.Session, "error", err)
				}
				return resp, nil
			}
			last = err
			if d.limited(r.cfg.Clock(), err) {
				continue // another deployment, or this one once its limit lifts
			}
			limitedAll = false
			if !failOver(err) || ctx.Err() != nil {
				return Response{}, err
			}
			r.log.Info("failing over", "model", m.Name, "deployment", d.Name, "error", err)
		}
		// Every deployment refused: only rate limits are waited out (the
		// next round waits for the first to lift, within the cap and the
		// call's deadline); anything else ends the call.
		if !limitedAll || last == nil || !r.anyWithin(m, left) {
			break
		}
	}
	return Response{}, gaveUp(last, refusal)
}

// gaveUp is the error of a call no deployment answered: last is the last
// provider's failure, refusal the first adapter's refusal of a parameter
// it cannot carry. The provider's failure is told as it is (its kind, its
// status and its message: the caller sees a 4xx as a 4xx, a 5xx as a
// 502 or 503 with the provider's words, a rate limit with its
// Retry-After); when every deployment refused a parameter, the refusal
// names it.
func gaveUp(last, refusal error) error {
	var pe *ProviderError
	switch {
	case last == nil && refusal != nil:
		return refusal
	case last == nil:
		return ErrNoDeployment
	case errors.As(last, &pe):
		return last
	}
	return fmt.Errorf("%w: last: %v", ErrNoDeployment, last)
}

// anyWithin says some deployment of m is free of a rate limit, or held by
// one that lifts within left.
func (r *Router) anyWithin(m *model, left time.Duration) bool {
	now := r.cfg.Clock()
	for _, d := range m.deps {
		if d.limitedFor(now) <= left {
			return true
		}
	}
	return false
}

// completeOn calls one deployment once (Complete waits out its rate
// limits).
func (r *Router) completeOn(ctx context.Context, d *deployment, call Call) (Response, error) {
	began := r.begin(d)
	defer d.end()
	ctx, span := r.startAttempt(ctx, opChat, d)
	release, err := d.acquire(ctx)
	if err != nil {
		endSpan(span, outcome{err: err})
		return Response{}, err
	}
	defer release()
	req := call.Request
	req.Model = d.Upstream
	start := r.cfg.Clock()
	actx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	resp, err := d.Adapter.Complete(actx, req)
	cancel()
	r.record(d, err)
	if err != nil {
		endSpan(span, outcome{err: err})
		return Response{}, err
	}
	r.answered(d, seriesComplete, began)
	resp.Latency = r.cfg.Clock().Sub(start)
	if span != nil {
		u := resp.Usage
		endSpan(span, outcome{model: resp.Model, id: resp.ID, finish: resp.FinishReason, usage: &u, cost: d.Price.Cost(u)})
	}
	return resp, nil
}

// Stream runs one call, streaming its answer. Failover happens only before
// the first chunk reached the caller; a failure after it ends the stream
// with Err (and counts against the deployment).
func (r *Router) Stream(ctx context.Context, call Call) (<-chan Chunk, error) {
	ctx, span := r.startCall(ctx, opChat, call.Request.Model, true)
	out, err := r.stream(ctx, call)
	if err != nil {
		endSpan(span, outcome{err: err})
	}
	// A stream's span ends with it (relay).
	return out, err
}

func (r *Router) stream(ctx context.Context, call Call) (<-chan Chunk, error) {
	m, ctx, release, err := r.admit(ctx, call)
	if err != nil {
		return nil, err
	}
	if call.OnStart != nil {
		if err := call.OnStart(ctx); err != nil {
			release()
			return nil, err
		}
	}
	var last, refusal error
	left := r.cfg.RetryAfterCap
	for round := 0; ; round++ {
		limitedAll := true
		plan := r.plan(m, seriesStream)
		for i, d := range plan {
			if round > 0 && d.limitedFor(r.cfg.Clock()) == 0 && !sleep(ctx, jitter(r.cfg.Backoff)) {
				release()
				return nil, ctx.Err()
			}
			if !r.waitLimit(ctx, d, &left) {
				if ctx.Err() != nil {
					release()
					return nil, ctx.Err()
				}
				continue
			}
			out, err := r.streamOn(ctx, call, m, d, release)
			if err == nil {
				return out, nil
			}
			if i+1 < len(plan) {
				r.failingOver(ctx, d, err)
			}
			if KindOf(err) == KindUnsupported {
				refusal = cmp.Or(refusal, err)
				continue
			}
			last = err
			if d.limited(r.cfg.Clock(), err) {
				continue
			}
			limitedAll = false
			if !failOver(err) || ctx.Err() != nil {
				release()
				return nil, err
			}
		}
		if !limitedAll || last == nil || !r.anyWithin(m, left) {
			break
		}
	}
	release()
	return nil, gaveUp(last, refusal)
}

// streamOn starts the stream on one deployment and waits for its first
// chunk (a stream that fails before it can still go elsewhere); then the
// stream is relayed, and done (the model's slot) released at its end.
func (r *Router) streamOn(ctx context.Context, call Call, m *model, d *deployment, done func()) (<-chan Chunk, error) {
	began := r.begin(d)
	actx, span := r.startAttempt(ctx, opChat, d)
	drelease, err := d.acquire(actx)
	if err != nil {
		d.end()
		endSpan(span, outcome{err: err})
		return nil, err
	}
	// call_timeout bounds the whole stream, as it bounds a whole answer.
	sctx, cancel := context.WithTimeout(actx, r.cfg.CallTimeout)
	req := call.Request
	req.Model = d.Upstream
	in, err := d.Adapter.Stream(sctx, req)
	if err != nil {
		cancel()
		drelease()
		d.end()
		r.record(d, err)
		endSpan(span, outcome{err: err})
		return nil, err
	}
	first, ok := <-in
	if !ok || first.Err != nil {
		cancel()
		drelease()
		d.end()
		err := first.Err
		if !ok || err == nil {
			err = &ProviderError{Kind: KindServer, Message: "the stream ended before its first chunk"}
		}
		r.record(d, err)
		endSpan(span, outcome{err: err})
		return nil, err
	}
	r.answered(d, seriesStream, began)
	firstChunk(ctx, span, r.cfg.Clock().Sub(began))
	out := make(chan Chunk, 16)
	go r.relay(ctx, sctx, call, m, d, first, in, out, span, func() { cancel(); drelease(); d.end(); done() })
	return out, nil
}

// relay forwards a stream to the caller, records its outcome and charges
// its usage when it ends well; sctx is the stream's own context (bounded
// by call_timeout). It ends the attempt's span (nil when not traced) and
// the call's.
func (r *Router) relay(ctx, sctx context.Context, call Call, m *model, d *deployment, first Chunk, in <-chan Chunk, out chan<- Chunk, attempt trace.Span, done func()) {
	defer close(out)
	if call.OnEnd != nil {
		defer call.OnEnd()
	}
	defer done()
	// o is the stream's outcome, for its spans.
	var o outcome
	if call := r.callSpan(ctx); call != nil {
		defer func() {
			o.provider, o.deployment = d.Provider, d.Name
			endSpan(attempt, o)
			endSpan(call, o)
		}()
	}
	// The first chunk and the last name who serves the stream.
	first.Provider, first.Deployment = d.Provider, d.Name
	c, ok := first, true
	var produced int // bytes of text the provider sent
	var reported *Usage
	for ok {
		if c.Usage != nil {
			reported = c.Usage
		}
		if c.Done || c.Err != nil {
			break
		}
		produced += len(c.Delta)
		select {
		case out <- c:
		case <-ctx.Done():
			r.record(d, nil) // the caller left: not the deployment's failure
			o.cost, o.usage, o.left = r.chargePartial(ctx, call, m, d, reported, produced), reported, true
			return
		}
		c, ok = <-in
	}
	switch {
	case ok && c.Done:
		r.record(d, nil)
		d.health.streamEnded()
		var u Usage
		if c.Usage != nil {
			u = *c.Usage
		}
		cost := d.Price.Cost(u)
		if err := r.charge(ctx, call, m, d, u, cost); err != nil {
			r.log.Error("recording a stream's cost", "model", m.Name, "session", call.Session, "error", err)
		}
		c.Usage = &u
		if c.Model == "" {
			c.Model = d.Upstream
		}
		c.Provider, c.Deployment, c.CostMicros = d.Provider, d.Name, cost
		o.model, o.id, o.finish, o.usage, o.cost = c.Model, c.ID, c.FinishReason, &u, cost
		out <- c
	case ctx.Err() != nil:
		// The caller left while the provider was still sending: not the
		// deployment's failure, and charged for what it used.
		r.record(d, nil)
		o.cost, o.usage, o.left = r.chargePartial(ctx, call, m, d, reported, produced), reported, true
	default:
		err := c.Err
		if !ok || err == nil {
			err = &ProviderError{Kind: KindServer, Message: "the stream ended without its last chunk"}
		}
		if errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil && KindOf(err) != KindTimeout {
			// The stream's own bound (call_timeout) ended it.
			err = &ProviderError{Kind: KindTimeout, Message: "the stream ran past call_timeout"}
		}
		if d.health.recordCut(r.cfg.Clock(), err) { // a mid-stream failure counts, and in a row degrades
			r.log.Warn("deployment degraded: skipped and probed until it answers", "deployment", d.Name, "reason", d.health.state(r.cfg.Clock()).Reason, "error", err)
		}
		cost := r.chargePartial(ctx, call, m, d, reported, produced)
		o.cost, o.usage, o.err = cost, reported, err
		out <- Chunk{Err: err, Provider: d.Provider, Deployment: d.Name, CostMicros: cost}
	}
}

// chargePartial charges a stream that did not end well (its caller left,
// or it was cut) for what it used: the usage the provider reported, or,
// failing that, the tokens counted, about four bytes of text each, of the
// prompt and of the text produced. It returns the cost.
func (r *Router) chargePartial(ctx context.Context, call Call, m *model, d *deployment, reported *Usage, produced int) int64 {
	var u Usage
	if reported != nil {
		u = *reported
	} else {
		prompt := 0
		for _, msg := range call.Request.Messages {
			prompt += len(msg.Text())
		}
		u = Usage{Input: estimateTokens(prompt), Output: estimateTokens(produced)}
	}
	if u == (Usage{}) {
		return 0
	}
	cost := d.Price.Cost(u)
	if err := r.charge(ctx, call, m, d, u, cost); err != nil {
		r.log.Error("recording a partial stream's cost", "model", m.Name, "session", call.Session, "error", err)
	}
	return cost
}

// estimateTokens counts the tokens of n bytes of text when the provider
// did not say: about four bytes each, rounded up.
func estimateTokens(n int) int64 { return int64((n + 3) / 4) }

// admit checks the model, the key's access, limits and budgets, takes a
// slot of the model (waiting in line) and reserves the call's worst case
// against its budgets; it returns the call's context (with its deadline
// and its admission) and what ends the call's hold on all of it.
func (r *Router) admit(ctx context.Context, call Call) (*model, context.Context, func(), error) {
	if _, ok := r.models[call.Request.Model]; ok && len(call.Request.Messages) == 0 {
		return nil, nil, nil, &ProviderError{Kind: KindBadRequest, Message: "a call needs at least one message"}
	}
	return r.admitModel(ctx, call, func(m *model) int64 {
		return m.worstCost(EstimatePrompt(call.Request), outputBound(call.Request, m.MaxOutputTokens))
	})
}

// admitModel is admit without the check of the messages (an embedding
// has none); worst is the call's worst-case cost on a model.
func (r *Router) admitModel(ctx context.Context, call Call, worst func(*model) int64) (*model, context.Context, func(), error) {
	m, ok := r.models[call.Request.Model]
	if !ok {
		return nil, nil, nil, fmt.Errorf("%w %q", ErrUnknownModel, call.Request.Model)
	}
	var acc Access
	keyed := false
	if call.Key != "" && r.cfg.Access != nil {
		acc, keyed = r.cfg.Access(call.Key)
	}
	if keyed && (!acc.KeyAllowance.Allows(m.Name) || acc.Tenant != "" && !acc.TenantAllowance.Allows(m.Name)) {
		return nil, nil, nil, fmt.Errorf("%w: API key %q may not call model %q", ErrModelNotAllowed, call.Key, m.Name)
	}
	now := r.cfg.Clock()
	adm := &admission{day: now.In(r.cfg.Zone).Format(time.DateOnly), tenant: acc.Tenant}
	budgets := r.budgets(call, acc, keyed, adm.day)
	if len(budgets) > 0 {
		if err := r.cfg.Ledger.Check(budgets); err != nil {
			return nil, nil, nil, err
		}
	}
	scopes := limitScopes(call.Key, acc, keyed)
	for _, sc := range scopes {
		adm.limited = append(adm.limited, sc.Name)
	}
	qctx, cancel := ctx, context.CancelFunc(func() {})
	if !call.Deadline.IsZero() {
		qctx, cancel = context.WithDeadline(ctx, call.Deadline)
	}
	wait, acquire := qctx, m.slots.Acquire
	if call.Accepted {
		acquire = m.slots.AcquireQueued
	} else if _, has := qctx.Deadline(); !has {
		var c2 context.CancelFunc
		wait, c2 = context.WithTimeout(qctx, r.cfg.QueueTimeout)
		defer c2()
	}
	qspan := r.startStep(ctx, "queue")
	release, queued, err := acquire(wait)
	if err != nil {
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = ErrQueueTimeout
		}
		endStep(qspan, attrQueued.Bool(queued), err)
		return nil, nil, nil, err
	}
	endStep(qspan, attrQueued.Bool(queued), nil)
	// With its slot, the call holds its limits and reserves its worst
	// case against its budgets (a call that can cost nothing, on free
	// deployments, reserves nothing: the check above refused it if a
	// budget was spent); in a cluster the two take one trip to the leader.
	var res *Reservation
	rctx, c2 := qctx, context.CancelFunc(func() {})
	if len(budgets) > 0 {
		if w := worst(m); w > 0 {
			// The call is held to its reservation's life: it cannot run
			// past the reservation's expiry.
			bound := r.reservationBound(m)
			expires := r.cfg.Clock().Add(bound)
			if d, ok := qctx.Deadline(); ok && time.Until(d) < bound {
				expires = r.cfg.Clock().Add(time.Until(d))
			}
			rctx, c2 = context.WithTimeout(qctx, bound)
			res = &Reservation{ID: newID(), Session: call.Session, Key: call.Key, Tenant: acc.Tenant, Day: adm.day, Model: m.Name,
				Micros: w, Expires: expires}
		}
	}
	var rspan trace.Span
	if res != nil {
		rspan = r.startStep(ctx, "reserve")
	}
	endLimits, err := r.holdAndReserve(rctx, scopes, res, budgets)
	if res != nil {
		endStep(rspan, attrReserved.Float64(float64(res.Micros)/1e6), err)
	}
	if err != nil {
		c2()
		release()
		cancel()
		return nil, nil, nil, err
	}
	if res != nil {
		adm.reservation = res.ID
	}
	adm.endLimits = sync.OnceFunc(endLimits)
	undo := func() { r.unreserve(adm); release(); adm.endLimits(); c2(); cancel() }
	if r.cfg.MayStart != nil {
		if err := r.cfg.MayStart(); err != nil {
			undo()
			return nil, nil, nil, err
		}
	}
	return m, context.WithValue(rctx, admissionKey{}, adm), undo, nil
}

// unreserve releases the reservation of a call that ended without a
// charge (none, or settled: nothing).
func (r *Router) unreserve(adm *admission) {
	if adm.reservation != "" && adm.settled.CompareAndSwap(false, true) {
		r.cfg.Ledger.Release(adm.reservation)
	}
}

// holdAndReserve holds a call's limits in scopes and reserves res (if
// any) against budgets; it returns what ends the hold. A LimitKeeper that
// is a HoldReserver does both in one step.
func (r *Router) holdAndReserve(ctx context.Context, scopes []LimitScope, res *Reservation, budgets []Budget) (func(), error) {
	now := r.cfg.Clock()
	keeper := r.cfg.Limits
	if keeper == nil || len(scopes) == 0 {
		keeper = localLimits{r}
	}
	if hr, ok := keeper.(HoldReserver); ok && res != nil {
		return hr.HoldAndReserve(ctx, now, scopes, *res, budgets)
	}
	endLimits, err := keeper.Acquire(ctx, now, scopes)
	if err != nil {
		return nil, err
	}
	if res != nil {
		if err := r.cfg.Ledger.Reserve(ctx, *res, budgets); err != nil {
			endLimits()
			return nil, err
		}
	}
	return endLimits, nil
}

// localLimits is the LimitKeeper of a router's own memory.
type localLimits struct{ r *Router }

func (l localLimits) Acquire(_ context.Context, now time.Time, scopes []LimitScope) (func(), error) {
	return l.r.limits.acquire(now, scopes)
}

func (l localLimits) AddTokens(now time.Time, names []string, n int64) {
	l.r.limits.addTokens(now, names, n)
}

// limitScopes are the holders of limits a call of key counts in: the key
// and its tenant, those that set any.
func limitScopes(key string, acc Access, keyed bool) []LimitScope {
	if !keyed {
		return nil
	}
	var out []LimitScope
	if acc.KeyAllowance.Limits != (Limits{}) {
		out = append(out, LimitScope{Name: "key:" + key, Kind: "API key", Who: key, Limits: acc.KeyAllowance.Limits})
	}
	if acc.Tenant != "" && acc.TenantAllowance.Limits != (Limits{}) {
		out = append(out, LimitScope{Name: "tenant:" + acc.Tenant, Kind: "tenant", Who: acc.Tenant, Limits: acc.TenantAllowance.Limits})
	}
	return out
}

// attempts lists the deployments to try in order: the healthy ones, then,
// if none is, the degraded ones (a call is never refused on health alone
// while something might answer).
func (r *Router) attempts(m *model) []*deployment {
	var ok, bad []*deployment
	for _, d := range m.deps {
		if d.health.isDegraded() {
			bad = append(bad, d)
		} else {
			ok = append(ok, d)
		}
	}
	if len(ok) > 0 {
		return ok
	}
	return bad
}

func (d *deployment) acquire(ctx context.Context) (func(), error) {
	if d.slots == nil {
		return func() {}, nil
	}
	// A deployment's own bound waits without a queue limit of its own: the
	// model's queue bounds the callers.
	d.slots.mu.Lock()
	if d.slots.queueMax == 0 {
		d.slots.queueMax = 1 << 30
	}
	d.slots.mu.Unlock()
	release, _, err := d.slots.Acquire(ctx)
	return release, err
}

func (r *Router) record(d *deployment, err error) {
	if KindOf(err) == KindUnsupported {
		return // refused before the provider was called: no outcome
	}
	if d.health.record(r.cfg.Clock(), err) {
		st := d.health.state(r.cfg.Clock())
		r.log.Warn("deployment degraded: skipped and probed until it answers", "deployment", d.Name, "reason", st.Reason, "error", err)
	}
}

// probe checks degraded deployments and readmits those that answer.
func (r *Router) probe() {
	defer r.wg.Done()
	t := time.NewTicker(r.cfg.Health.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		for _, m := range r.models {
			for _, d := range m.deps {
				if !d.health.needsProbe(r.cfg.Clock()) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := d.Adapter.HealthCheck(ctx)
				cancel()
				if err == nil && d.health.readmit(r.cfg.Clock()) {
					r.log.Info("deployment readmitted on trial: its next failure degrades it again", "deployment", d.Name)
				}
			}
		}
	}
}

// Health reports every deployment's health and each model's slots.
func (r *Router) Health() map[string]ModelHealth {
	out := map[string]ModelHealth{}
	now := r.cfg.Clock()
	for name, m := range r.models {
		mh := ModelHealth{Slots: m.slots.Stats(), Deployments: map[string]HealthState{}}
		for _, d := range m.deps {
			mh.Deployments[d.Name] = d.health.state(now)
		}
		out[name] = mh
	}
	return out
}

// ModelHealth is one model's slots and deployments' health.
type ModelHealth struct {
	Slots       SlotStats              `json:"slots"`
	Deployments map[string]HealthState `json:"deployments"`
}

// charge records an answer's cost on the ledger, in the path that returns
// the answer.
func (r *Router) charge(ctx context.Context, call Call, m *model, d *deployment, u Usage, micros int64) error {
	key := call.IdempotencyKey
	if key == "" {
		key = newID()
	}
	ch := Charge{Request: key, Session: call.Session, Key: call.Key, Day: r.day(), Model: m.Name, Deployment: d.Name, Usage: u, Micros: micros}
	if adm := admissionOf(ctx); adm != nil {
		// A call counts on the day it started, as its reservation did;
		// its charge settles the reservation.
		ch.Day, ch.Tenant = adm.day, adm.tenant
		if adm.reservation != "" && adm.settled.CompareAndSwap(false, true) {
			ch.Reservation = adm.reservation
		}
		if n := u.Input + u.CachedInput + u.CacheWrite + u.Output; len(adm.limited) > 0 {
			if r.cfg.Limits != nil {
				r.cfg.Limits.AddTokens(r.cfg.Clock(), adm.limited, n)
			} else {
				r.limits.addTokens(r.cfg.Clock(), adm.limited, n)
			}
		}
		// The provider's call is over: its hold on the limits ends with
		// its charge (in a cluster, one trip to the leader for both).
		if adm.endLimits != nil {
			adm.endLimits()
		}
	}
	return r.cfg.Ledger.Add(context.WithoutCancel(ctx), ch)
}

// day is today's date in the counters' calendar.
func (r *Router) day() string { return r.cfg.Clock().In(r.cfg.Zone).Format(time.DateOnly) }

// failOver reports whether another deployment may answer where one failed.
func failOver(err error) bool {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Retryable() || pe.Kind == KindQuotaExceeded || pe.Kind == KindAuth || pe.Kind == KindUnsupported
	}
	return !errors.Is(err, context.Canceled)
}

// Submit starts call in the background (async REST).
func (r *Router) Submit(ctx context.Context, call Call) (string, error) {
	m, ok := r.models[call.Request.Model]
	if !ok {
		return "", fmt.Errorf("%w %q", ErrUnknownModel, call.Request.Model)
	}
	// The queue's bound is checked here, once: an accepted call then
	// waits for its slot however long the line (Call.Accepted).
	call.Accepted = true
	r.mu.Lock()
	if call.IdempotencyKey != "" {
		if id, ok := r.keys[call.IdempotencyKey]; ok {
			r.mu.Unlock()
			return id, nil
		}
	}
	if st := m.slots.Stats(); m.accepted.Load() >= int64(st.Capacity+st.QueueMax) {
		r.mu.Unlock()
		return "", ErrQueueFull
	}
	m.accepted.Add(1)
	id := newID()
	if call.IdempotencyKey == "" {
		call.IdempotencyKey = id
	}
	jctx, cancel := context.WithCancel(context.Background())
	j := &job{Job: Job{ID: id, State: JobQueued, Model: call.Request.Model, Session: call.Session, Submitted: r.cfg.Clock()},
		done: make(chan struct{}), cancel: cancel}
	r.jobs[id] = j
	r.keys[call.IdempotencyKey] = id
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer cancel()
		defer m.accepted.Add(-1)
		r.setState(j, JobRunning)
		resp, err := r.Complete(jctx, call)
		r.mu.Lock()
		defer r.mu.Unlock()
		j.Finished = r.cfg.Clock()
		switch {
		case err == nil:
			j.State, j.Response = JobDone, &resp
		case errors.Is(jctx.Err(), context.Canceled) && j.State == JobCancelled:
		default:
			j.State, j.Error, j.ErrorKind = JobFailed, err.Error(), FailureKind(err)
		}
		close(j.done)
	}()
	return id, nil
}

func (r *Router) setState(j *job, s JobState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j.State == JobQueued {
		j.State = s
	}
}

// Job reports a submitted call.
func (r *Router) Job(ctx context.Context, id string) (Job, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[id]
	if !ok {
		return Job{}, ErrNoJob
	}
	return j.Job, nil
}

// Wait waits until a submitted call ends or ctx does, and reports it.
func (r *Router) Wait(ctx context.Context, id string) (Job, error) {
	r.mu.Lock()
	j, ok := r.jobs[id]
	r.mu.Unlock()
	if !ok {
		return Job{}, ErrNoJob
	}
	select {
	case <-j.done:
	case <-ctx.Done():
	}
	return r.Job(ctx, id)
}

// Cancel stops a submitted call.
func (r *Router) Cancel(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	j, ok := r.jobs[id]
	if !ok {
		return ErrNoJob
	}
	if j.State == JobQueued || j.State == JobRunning {
		j.State, j.Error = JobCancelled, "cancelled by the caller"
		j.cancel()
	}
	return nil
}

// Dollars words micro-dollars as dollars.
func Dollars(micros int64) string { return fmt.Sprintf("$%.6f", float64(micros)/1e6) }

func newID() string {
	b := make([]byte, 12)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

func jitter(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
