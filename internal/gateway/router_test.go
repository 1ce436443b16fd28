package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fake is a scripted provider: each call takes the next step of its
// script (or the default), counts itself and tracks how many run at once.
type fake struct {
	name    string
	mu      sync.Mutex
	script  []step
	calls   atomic.Int64
	running atomic.Int64
	peak    atomic.Int64
	healthy atomic.Bool
	hold    chan struct{} // when set, calls wait on it
	order   []string      // the calls' first message, in the order they ran
}

type step struct {
	err    error
	usage  Usage
	chunks []string
	// failAfter ends a stream with an error after that many chunks.
	failAfter int
}

func (f *fake) next() step {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.script) == 0 {
		return step{usage: Usage{Input: 10, Output: 5}}
	}
	s := f.script[0]
	f.script = f.script[1:]
	return s
}

func (f *fake) enter(req Request) func() {
	f.calls.Add(1)
	n := f.running.Add(1)
	for {
		p := f.peak.Load()
		if n <= p || f.peak.CompareAndSwap(p, n) {
			break
		}
	}
	f.mu.Lock()
	f.order = append(f.order, req.Messages[0].Content)
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return func() { f.running.Add(-1) }
}

func (f *fake) Complete(ctx context.Context, req Request) (Response, error) {
	defer f.enter(req)()
	s := f.next()
	if s.err != nil {
		return Response{}, s.err
	}
	return Response{ID: "r", Model: req.Model, Content: "hello from " + f.name, FinishReason: "stop", Usage: s.usage}, nil
}

func (f *fake) Stream(ctx context.Context, req Request) (<-chan Chunk, error) {
	leave := f.enter(req)
	s := f.next()
	if s.err != nil && s.failAfter == 0 {
		leave()
		return nil, s.err
	}
	out := make(chan Chunk)
	go func() {
		defer close(out)
		defer leave()
		chunks := s.chunks
		if len(chunks) == 0 {
			chunks = []string{"a", "b", "c"}
		}
		for i, c := range chunks {
			if s.failAfter > 0 && i == s.failAfter {
				out <- Chunk{Err: s.err}
				return
			}
			out <- Chunk{Delta: c}
		}
		u := s.usage
		out <- Chunk{Done: true, Usage: &u, FinishReason: "stop"}
	}()
	return out, nil
}

func (f *fake) HealthCheck(ctx context.Context) error {
	if f.healthy.Load() {
		return nil
	}
	return errors.New("down")
}

func call(model, text string) Call {
	return Call{Request: Request{Model: model, Messages: []Message{{Role: "user", Content: text}}}, Session: "s1"}
}

func newRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// The model's limit holds (never more than N at once) and the calls over
// it wait in arrival order.
func TestLimitAndQueueOrder(t *testing.T) {
	p := &fake{name: "p", hold: make(chan struct{})}
	r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Complete(context.Background(), call("m", fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		}()
		// Arrival order is the order they were started in.
		waitUntil(t, func() bool { st := r.models["m"].slots.Stats(); return st.InFlight+st.Queued == i+1 })
	}
	if st := r.models["m"].slots.Stats(); st.InFlight != 2 || st.Queued != 6 {
		t.Fatalf("slots %+v, want 2 running and 6 queued", st)
	}
	close(p.hold)
	wg.Wait()
	if p.peak.Load() != 2 {
		t.Fatalf("%d calls ran at once, limit 2", p.peak.Load())
	}
	// With one slot the calls reach the provider in the order they came.
	q := &fake{name: "q", hold: make(chan struct{})}
	r1 := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: q}}}}})
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r1.Complete(context.Background(), call("m", fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		}()
		waitUntil(t, func() bool { st := r1.models["m"].slots.Stats(); return st.InFlight+st.Queued == i+1 })
	}
	close(q.hold)
	wg.Wait()
	if got := fmt.Sprint(q.order); got != "[0 1 2 3 4 5]" {
		t.Fatalf("queued calls ran in the order %s", got)
	}
}

// A full queue refuses at once; a call waiting past its deadline is told.
func TestQueueBoundAndDeadline(t *testing.T) {
	p := &fake{name: "p", hold: make(chan struct{})}
	r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 1, QueueMax: 1, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
	go r.Complete(context.Background(), call("m", "running"))
	waitUntil(t, func() bool { return r.models["m"].slots.Stats().InFlight == 1 })
	c := call("m", "waits")
	c.Deadline = time.Now().Add(100 * time.Millisecond)
	done := make(chan error)
	go func() { _, err := r.Complete(context.Background(), c); done <- err }()
	waitUntil(t, func() bool { return r.models["m"].slots.Stats().Queued == 1 })
	if _, err := r.Complete(context.Background(), call("m", "refused")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("over the queue bound: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrQueueTimeout) {
		t.Fatalf("past its deadline in the queue: %v", err)
	}
	close(p.hold)
}

// A 429 is absorbed: with another healthy deployment the call goes there
// at once; with none, it waits out the retry-after (within the cap) and
// is answered by the same deployment; a 429 never degrades a deployment.
func TestRateLimitAbsorbed(t *testing.T) {
	p := &fake{name: "p", script: []step{{err: &ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: 200 * time.Millisecond}}}}
	other := &fake{name: "other"}
	r := newRouter(t, Config{Health: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.1},
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}, {Name: "o", Adapter: other}}}}})
	resp, err := r.Complete(context.Background(), call("m", "x"))
	if err != nil || resp.Deployment != "o" || p.calls.Load() != 1 || other.calls.Load() != 1 {
		t.Fatalf("a 429 with another deployment healthy: %+v %v; calls %d and %d", resp, err, p.calls.Load(), other.calls.Load())
	}
	// While its limit holds, the limited deployment is tried last.
	if resp, err := r.Complete(context.Background(), call("m", "x2")); err != nil || resp.Deployment != "o" || p.calls.Load() != 1 {
		t.Fatalf("during the limit: %+v %v; %d calls to d", resp, err, p.calls.Load())
	}
	if r.Health()["m"].Deployments["d"].Degraded {
		t.Fatal("a 429 degraded the deployment")
	}

	// Alone, the deployment is waited for: a wait, then its answer.
	solo := &fake{name: "solo", script: []step{
		{err: &ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: 100 * time.Millisecond}},
		{err: &ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: 100 * time.Millisecond}},
		{err: &ProviderError{Kind: KindRateLimited, Status: 429}}, // no Retry-After: a second
	}}
	r2 := newRouter(t, Config{RetryAfterCap: 5 * time.Second, Health: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.1},
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "s", Adapter: solo}}}}})
	start := time.Now()
	resp, err = r2.Complete(context.Background(), call("m", "y"))
	if err != nil || resp.Deployment != "s" || solo.calls.Load() != 4 || time.Since(start) < 1200*time.Millisecond {
		t.Fatalf("alone: %+v %v after %s, %d calls", resp, err, time.Since(start), solo.calls.Load())
	}
	if r2.Health()["m"].Deployments["s"].Degraded {
		t.Fatal("429s degraded the only deployment")
	}
	// Over the cap: the caller is told at once.
	solo.script = []step{{err: &ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: time.Hour}}}
	start = time.Now()
	if _, err := r2.Complete(context.Background(), call("m", "z")); KindOf(err) != KindRateLimited || time.Since(start) > time.Second {
		t.Fatalf("a retry-after over the cap: %v after %s; want the 429 itself, at once", err, time.Since(start))
	}
}

// A deployment failing over the window is degraded and skipped (calls go
// to the next), probed, and readmitted when it answers.
func TestFailoverAndReadmission(t *testing.T) {
	bad := &fake{name: "bad"}
	good := &fake{name: "good"}
	for range 10 {
		bad.script = append(bad.script, step{err: &ProviderError{Kind: KindServer, Status: 500}})
	}
	r := newRouter(t, Config{Health: HealthConfig{MinRequests: 4, ProbeInterval: 50 * time.Millisecond},
		Models: []Model{{Name: "m", Concurrency: 4, Deployments: []Deployment{{Name: "bad", Provider: "openai", Adapter: bad}, {Name: "good", Provider: "anthropic", Adapter: good}}}}})
	for i := range 6 {
		resp, err := r.Complete(context.Background(), call("m", fmt.Sprint(i)))
		if err != nil || resp.Deployment != "good" || resp.Provider != "anthropic" {
			t.Fatalf("call %d: %+v %v", i, resp, err)
		}
	}
	if !r.Health()["m"].Deployments["bad"].Degraded {
		t.Fatal("bad is not degraded after 4 failures of 4")
	}
	before := bad.calls.Load()
	for range 5 {
		if _, err := r.Complete(context.Background(), call("m", "z")); err != nil {
			t.Fatal(err)
		}
	}
	if bad.calls.Load() != before {
		t.Fatalf("a degraded deployment was called %d times", bad.calls.Load()-before)
	}
	bad.healthy.Store(true)
	bad.script = nil
	waitUntil(t, func() bool { return !r.Health()["m"].Deployments["bad"].Degraded })
	if resp, _ := r.Complete(context.Background(), call("m", "back")); resp.Deployment != "bad" {
		t.Fatalf("after readmission served by %s", resp.Deployment)
	}
}

// A stream failing before its first chunk fails over; one failing midway
// ends with Err for the caller and counts against the deployment; a
// spend-limit refusal is not retried on its deployment.
func TestStreamFailures(t *testing.T) {
	a := &fake{name: "a", script: []step{{err: &ProviderError{Kind: KindOverloaded, Status: 529}}}}
	b := &fake{name: "b"}
	r := newRouter(t, Config{Health: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.5},
		Models: []Model{{Name: "m", Concurrency: 4, Deployments: []Deployment{{Name: "a", Adapter: a}, {Name: "b", Adapter: b}}}}})
	ch, err := r.Stream(context.Background(), call("m", "x"))
	if err != nil {
		t.Fatal(err)
	}
	text, last := drain(ch)
	if text != "abc" || !last.Done || last.Err != nil {
		t.Fatalf("failed-over stream: %q %+v", text, last)
	}
	b.script = []step{{err: &ProviderError{Kind: KindServer, Message: "cut"}, failAfter: 2}}
	r.models["m"].deps[0].health.readmit(time.Now().Add(time.Hour))
	a.script = []step{{err: &ProviderError{Kind: KindServer, Message: "cut"}, failAfter: 2}}
	ch, err = r.Stream(context.Background(), call("m", "y"))
	if err != nil {
		t.Fatal(err)
	}
	text, last = drain(ch)
	if text != "ab" || last.Err == nil {
		t.Fatalf("mid-stream failure: %q %+v", text, last)
	}
	if st := r.Health()["m"].Deployments["a"]; st.Failures != 1 || !st.Degraded {
		t.Fatalf("the mid-stream failure did not count: %+v", st)
	}
	q := &fake{name: "q", script: []step{{err: &ProviderError{Kind: KindQuotaExceeded, Status: 429}}}}
	r2 := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "q", Adapter: q}, {Name: "b", Adapter: &fake{name: "b2"}}}}}})
	if resp, err := r2.Complete(context.Background(), call("m", "z")); err != nil || resp.Deployment != "b" || q.calls.Load() != 1 {
		t.Fatalf("spend limit: %+v %v, %d calls to q", resp, err, q.calls.Load())
	}
	if !r2.Health()["m"].Deployments["q"].Degraded {
		t.Fatal("a deployment past its spend limit is still admitted")
	}
}

// Cost: the session, day and total counters are the exact sum of the
// replayed usage, streams and cached tokens included; the day rolls over
// with the clock; budgets refuse past their bound.
func TestCostCounters(t *testing.T) {
	now := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	usages := []Usage{{Input: 1000, CachedInput: 500, Output: 200}, {Input: 30, Output: 7}, {Input: 1, CachedInput: 999_999, Output: 1}}
	p := &fake{name: "p"}
	for _, u := range usages {
		p.script = append(p.script, step{usage: u})
	}
	p.script = append(p.script, step{usage: Usage{Input: 100, CachedInput: 20, Output: 50}, chunks: []string{"x", "y"}})
	price := Price{Input: 2.5, CachedInput: 1.25, Output: 10}
	ledger := NewMemLedger()
	// The budget is checked before each call: the last call within it
	// may end past it.
	r := newRouter(t, Config{Clock: clock, Ledger: ledger, SessionBudget: 1_256_000,
		Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "d", Price: price, Adapter: p}}}}})
	var want int64
	for i := range usages {
		resp, err := r.Complete(context.Background(), call("m", fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		if resp.CostMicros != price.Cost(usages[i]) {
			t.Fatalf("call %d cost %d, want %d", i, resp.CostMicros, price.Cost(usages[i]))
		}
		want += resp.CostMicros
	}
	mu.Lock()
	now = now.Add(2 * time.Minute) // past midnight
	mu.Unlock()
	ch, err := r.Stream(context.Background(), call("m", "stream"))
	if err != nil {
		t.Fatal(err)
	}
	_, last := drain(ch)
	streamCost := price.Cost(Usage{Input: 100, CachedInput: 20, Output: 50})
	c := ledger.Counters()
	if c.Total.Micros != want+streamCost || c.Sessions["s1"].Micros != want+streamCost || c.Total.Calls != 4 {
		t.Fatalf("total %+v, session %+v; want %d micros in 4 calls", c.Total, c.Sessions["s1"], want+streamCost)
	}
	if c.Days["2026-11-30"].Micros != want || c.Days["2026-12-01"].Micros != streamCost {
		t.Fatalf("days %+v: want %d on the 30th and %d on the 1st", c.Days, want, streamCost)
	}
	if c.Total.Usage.CachedInput != 500+999_999+20 || last.Usage.CachedInput != 20 {
		t.Fatalf("cached tokens %d, stream's last chunk %+v", c.Total.Usage.CachedInput, last.Usage)
	}
	// 1,256,056 micros spent: past the budget, refused.
	if _, err := r.Complete(context.Background(), call("m", "over")); !errors.Is(err, ErrBudget) {
		t.Fatalf("over the session budget: %v", err)
	}
	other := call("m", "other session")
	other.Session = "s2"
	if _, err := r.Complete(context.Background(), other); err != nil {
		t.Fatalf("another session: %v", err)
	}
}

// Submit runs in the background; the same idempotency key is one call.
func TestSubmitIdempotent(t *testing.T) {
	p := &fake{name: "p"}
	r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
	c := call("m", "x")
	c.IdempotencyKey = "k1"
	id1, err := r.Submit(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	id2, _ := r.Submit(context.Background(), c)
	if id1 != id2 {
		t.Fatalf("the same key gave two ids: %s %s", id1, id2)
	}
	j, err := r.Wait(context.Background(), id1)
	if err != nil || j.State != JobDone || j.Response == nil {
		t.Fatalf("job %+v %v", j, err)
	}
	if p.calls.Load() != 1 {
		t.Fatalf("the provider ran %d times", p.calls.Load())
	}
	if _, err := r.Job(context.Background(), "nope"); !errors.Is(err, ErrNoJob) {
		t.Fatalf("unknown job: %v", err)
	}
}

func drain(ch <-chan Chunk) (string, Chunk) {
	var text string
	var last Chunk
	for c := range ch {
		text += c.Delta
		last = c
	}
	return text, last
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// A stream names its provider and deployment on its first chunk and its
// last, and its last carries its cost, as a whole answer does (the one
// that failed over names the deployment that served it).
func TestStreamNamesItsServerAndCost(t *testing.T) {
	a := &fake{name: "a", script: []step{{err: &ProviderError{Kind: KindOverloaded, Status: 529}}}}
	b := &fake{name: "b", script: []step{{usage: Usage{Input: 1000, Output: 100}, chunks: []string{"x", "y", "z"}}}}
	price := Price{Input: 2, Output: 10}
	r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 4, Deployments: []Deployment{
		{Name: "a", Provider: "anthropic", Adapter: a}, {Name: "b", Provider: "openai", Price: price, Adapter: b}}}}})
	ch, err := r.Stream(context.Background(), call("m", "x"))
	if err != nil {
		t.Fatal(err)
	}
	var chunks []Chunk
	for c := range ch {
		chunks = append(chunks, c)
	}
	first, last := chunks[0], chunks[len(chunks)-1]
	if first.Provider != "openai" || first.Deployment != "b" {
		t.Fatalf("first chunk %+v: want provider openai, deployment b", first)
	}
	want := price.Cost(Usage{Input: 1000, Output: 100})
	if !last.Done || last.Provider != "openai" || last.Deployment != "b" || last.CostMicros != want || want == 0 {
		t.Fatalf("last chunk %+v: want openai/b costing %d", last, want)
	}
}

// A stream that meets a 429 before its first chunk waits it out too, and
// is answered; a single 429 does not fail it.
func TestStreamRateLimitAbsorbed(t *testing.T) {
	solo := &fake{name: "solo", script: []step{
		{err: &ProviderError{Kind: KindRateLimited, Status: 429, RetryAfter: 100 * time.Millisecond}},
		{usage: Usage{Input: 1, Output: 1}},
	}}
	r := newRouter(t, Config{Health: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.1},
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "s", Adapter: solo}}}}})
	start := time.Now()
	ch, err := r.Stream(context.Background(), call("m", "x"))
	if err != nil {
		t.Fatalf("a stream behind a 429: %v", err)
	}
	text, last := drain(ch)
	if text != "abc" || !last.Done || solo.calls.Load() != 2 || time.Since(start) < 100*time.Millisecond {
		t.Fatalf("stream %q %+v after %s, %d calls", text, last, time.Since(start), solo.calls.Load())
	}
	if r.Health()["m"].Deployments["s"].Degraded {
		t.Fatal("a 429 degraded the deployment")
	}
}

// stalling is an adapter whose streams send one chunk, then nothing
// until their context ends.
type stalling struct{ fake }

func (s *stalling) Stream(ctx context.Context, req Request) (<-chan Chunk, error) {
	out := make(chan Chunk)
	go func() {
		defer close(out)
		select {
		case out <- Chunk{Delta: "a"}:
		case <-ctx.Done():
			return
		}
		<-ctx.Done()
		select {
		case out <- Chunk{Err: ctx.Err()}:
		case <-time.After(time.Second):
		}
	}()
	return out, nil
}

// call_timeout bounds a stream as it bounds a whole answer: a stream that
// stalls midway fails as a timeout at the bound.
func TestCallTimeoutBoundsStreams(t *testing.T) {
	r := newRouter(t, Config{CallTimeout: 300 * time.Millisecond,
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "s", Adapter: &stalling{}}}}}})
	start := time.Now()
	ch, err := r.Stream(context.Background(), call("m", "x"))
	if err != nil {
		t.Fatal(err)
	}
	text, last := drain(ch)
	if took := time.Since(start); text != "a" || KindOf(last.Err) != KindTimeout || took > 3*time.Second {
		t.Fatalf("a stalled stream: %q, last %+v after %s; want a timeout at call_timeout", text, last, took)
	}
}

// A stream cut by its provider, or left by its caller, is charged for
// what it used: the tokens counted (about four bytes each, prompt and
// text produced) when the provider reported none; the cut one's last
// chunk says the cost.
func TestPartialStreamsCharged(t *testing.T) {
	price := Price{Input: 1, Output: 1} // a micro-dollar a token
	cut := &fake{name: "cut", script: []step{{err: &ProviderError{Kind: KindServer, Message: "cut"}, failAfter: 2, chunks: []string{"abcdefgh", "ijklmnop", "q"}}}}
	ledger := NewMemLedger()
	r := newRouter(t, Config{Ledger: ledger, Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "c", Price: price, Adapter: cut}}}}})
	ch, err := r.Stream(context.Background(), call("m", "twelve bytes"))
	if err != nil {
		t.Fatal(err)
	}
	text, last := drain(ch)
	// 12 prompt bytes: 3 tokens; 16 bytes produced: 4 tokens.
	if text != "abcdefghijklmnop" || last.Err == nil || last.CostMicros != 7 {
		t.Fatalf("cut stream %q, last %+v: want charged 7", text, last)
	}
	waitUntil(t, func() bool { return ledger.Counters().Sessions["s1"].Micros == 7 })

	// The caller leaves after the first chunk, the provider still sending.
	r2 := newRouter(t, Config{Ledger: NewMemLedger(), Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "l", Price: price, Adapter: &stalling{}}}}}})
	ctx, cancel := context.WithCancel(context.Background())
	ch, err = r2.Stream(ctx, call("m", "four"))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	cancel()
	for range ch {
	}
	// "four": 1 token; "a": 1 token.
	waitUntil(t, func() bool { return r2.cfg.Ledger.(*MemLedger).Counters().Sessions["s1"].Micros == 2 })
	if r2.Health()["m"].Deployments["l"].Failures != 0 {
		t.Fatal("a caller who left counted against the deployment")
	}
}

// A call whose node may not start it (MayStart: a deposed leader) gives
// its slot back and ends with that error, the provider never called.
func TestMayStartRefuses(t *testing.T) {
	p := &fake{name: "p"}
	var leads atomic.Bool
	r := newRouter(t, Config{MayStart: func() error {
		if !leads.Load() {
			return ErrNotLeader
		}
		return nil
	}, Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
	if _, err := r.Complete(context.Background(), call("m", "x")); !errors.Is(err, ErrNotLeader) || p.calls.Load() != 0 {
		t.Fatalf("not leading: %v, %d provider calls", err, p.calls.Load())
	}
	if _, err := r.Stream(context.Background(), call("m", "x")); !errors.Is(err, ErrNotLeader) || p.calls.Load() != 0 {
		t.Fatalf("a stream not leading: %v, %d provider calls", err, p.calls.Load())
	}
	leads.Store(true)
	if resp, err := r.Complete(context.Background(), call("m", "y")); err != nil || p.calls.Load() != 1 {
		t.Fatalf("leading again (the slot was given back): %+v %v", resp, err)
	}
}

// An accepted async call never fails for the queue's reasons: with the
// line full and past queue_timeout, it waits for its slot and runs; a
// synchronous call in the same place is refused or times out.
func TestAcceptedCallsWaitTheirTurn(t *testing.T) {
	p := &fake{name: "p", hold: make(chan struct{})}
	r := newRouter(t, Config{QueueTimeout: 50 * time.Millisecond,
		Models: []Model{{Name: "m", Concurrency: 1, QueueMax: 2, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(p.hold) }) }) // before the router's Close
	var ids []string
	for i := range 3 {
		id, err := r.Submit(context.Background(), call("m", fmt.Sprint("async ", i)))
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
		ids = append(ids, id)
	}
	if _, err := r.Submit(context.Background(), call("m", "over")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a submit over the bound: %v", err)
	}
	waitUntil(t, func() bool { st := r.models["m"].slots.Stats(); return st.InFlight == 1 && st.Queued == 2 })
	if _, err := r.Complete(context.Background(), call("m", "sync")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a synchronous call behind a full line: %v", err)
	}
	time.Sleep(150 * time.Millisecond) // three queue_timeouts
	release.Do(func() { close(p.hold) })
	for _, id := range ids {
		j, err := r.Wait(context.Background(), id)
		if err != nil || j.State != JobDone {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
	}
}

// An API key has a budget of its own, over all its sessions, and its own
// counter; a key named in KeyBudgets has its own figure.
func TestKeyBudgets(t *testing.T) {
	p := &fake{name: "p"}
	for range 8 {
		p.script = append(p.script, step{usage: Usage{Input: 1000}})
	}
	price := Price{Input: 1} // $1 per million: 1,000 micros a call
	ledger := NewMemLedger()
	r := newRouter(t, Config{Ledger: ledger, KeyBudget: 2000, KeyBudgets: map[string]int64{"big": 3000},
		Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "d", Price: price, Adapter: p}}}}})
	keyCall := func(key, session string) error {
		c := call("m", key+session)
		c.Key, c.Session = key, key+"/"+session
		_, err := r.Complete(context.Background(), c)
		return err
	}
	for i, s := range []string{"a", "b"} {
		if err := keyCall("small", s); err != nil {
			t.Fatalf("small's call %d: %v", i, err)
		}
	}
	err := keyCall("small", "c")
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), `API key "small" spent $0.002000 of $0.002000`) {
		t.Fatalf("small past its budget, in a new session: %v", err)
	}
	for i, s := range []string{"a", "b", "c"} {
		if err := keyCall("big", s); err != nil {
			t.Fatalf("big's call %d: %v", i, err)
		}
	}
	if err := keyCall("big", "d"); !errors.Is(err, ErrBudget) {
		t.Fatalf("big past its own budget: %v", err)
	}
	c := ledger.Counters()
	if c.Keys["small"].Micros != 2000 || c.Keys["small"].Calls != 2 || c.Keys["big"].Calls != 3 {
		t.Fatalf("keys' counters %+v", c.Keys)
	}
	// Workers' calls have no key and no key budget.
	if _, err := r.Complete(context.Background(), call("m", "worker")); err != nil {
		t.Fatalf("a call without a key: %v", err)
	}
}
