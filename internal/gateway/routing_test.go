package gateway

import (
	"cmp"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// testClock is a clock a test moves; safe for concurrent use.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).UnixNano())
	return c
}

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// timed is a provider whose calls take took on the test's clock (to the
// answer, and to a stream's first chunk).
type timed struct {
	fake
	clock *testClock
	took  atomic.Int64
}

func (p *timed) Complete(ctx context.Context, req Request) (Response, error) {
	p.clock.Advance(time.Duration(p.took.Load()))
	return p.fake.Complete(ctx, req)
}

func (p *timed) Stream(ctx context.Context, req Request) (<-chan Chunk, error) {
	p.clock.Advance(time.Duration(p.took.Load()))
	return p.fake.Stream(ctx, req)
}

// names lists deployments' names.
func names(ds []*deployment) string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Name)
	}
	return strings.Join(out, " ")
}

// fourDeployments is a model of four deployments a, b, c, d on routing.
func fourDeployments(t *testing.T, routing Routing, weights ...int) (*Router, *model) {
	t.Helper()
	var ds []Deployment
	for i, n := range []string{"a", "b", "c", "d"} {
		d := Deployment{Name: n, Adapter: &fake{name: n}}
		if i < len(weights) {
			d.Weight = weights[i]
		}
		ds = append(ds, d)
	}
	r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 4, Routing: routing, Deployments: ds}}})
	return r, r.models["m"]
}

// Every routing only orders the healthy deployments free of a rate
// limit: one under a rate limit follows them, a degraded one is left out.
func TestRoutingKeepsHealthAndLimits(t *testing.T) {
	for _, routing := range []Routing{"", RoutingOrdered, RoutingWeighted, RoutingLeastBusy, RoutingLatency} {
		t.Run(cmp.Or(string(routing), "default"), func(t *testing.T) {
			r, m := fourDeployments(t, routing)
			a, b := m.deps[0], m.deps[1]
			a.limitedUntil.Store(time.Now().Add(time.Minute).UnixNano())
			b.health.mu.Lock()
			b.health.degradeLocked(time.Now(), "test")
			b.health.mu.Unlock()
			// a and b look best to every routing but ordered's.
			a.latency[seriesComplete].add(time.Now(), time.Millisecond)
			m.deps[2].inFlight.Store(3)
			m.deps[3].inFlight.Store(1)
			for range 50 {
				got := names(r.plan(m, seriesComplete))
				if got != "c d a" && got != "d c a" {
					t.Fatalf("plan %q: want c and d, then a (rate limited); b (degraded) left out", got)
				}
			}
		})
	}
}

// Ordered routing tries the deployments in the order configured,
// however busy or slow they are.
func TestRoutingOrdered(t *testing.T) {
	r, m := fourDeployments(t, RoutingOrdered)
	m.deps[0].inFlight.Store(9)
	m.deps[0].latency[seriesComplete].add(time.Now(), time.Hour)
	if got := names(r.plan(m, seriesComplete)); got != "a b c d" {
		t.Fatalf("plan %q", got)
	}
}

// Weighted routing draws the first attempt in proportion to the weights
// (unset: 1); the rest follow in the order configured.
func TestRoutingWeighted(t *testing.T) {
	r, m := fourDeployments(t, RoutingWeighted, 6, 0, 2, 1)
	want := map[string]float64{"a": 6.0 / 10, "b": 1.0 / 10, "c": 2.0 / 10, "d": 1.0 / 10}
	rest := map[string]string{"a": "b c d", "b": "a c d", "c": "a b d", "d": "a b c"}
	const n = 20000
	first := map[string]int{}
	for range n {
		got := strings.SplitN(names(r.plan(m, seriesComplete)), " ", 2)
		first[got[0]]++
		if got[1] != rest[got[0]] {
			t.Fatalf("after %s: %q, want the rest in order %q", got[0], got[1], rest[got[0]])
		}
	}
	for name, share := range want {
		// The standard deviation of a share over 20,000 draws is under
		// 0.4 %: 2 % is more than five of them.
		if got := float64(first[name]) / n; got < share-0.02 || got > share+0.02 {
			t.Errorf("%s first in %.3f of the calls, want %.2f", name, got, share)
		}
	}
	t.Logf("first attempts: %v of %d", first, n)
}

// Least-busy routing tries first the deployment with the fewest calls in
// flight, this node's and the other servers' reported; ties keep the
// order configured. A call counts while it runs, a stream until its end.
func TestRoutingLeastBusy(t *testing.T) {
	r, m := fourDeployments(t, RoutingLeastBusy)
	a, b, c, d := m.deps[0], m.deps[1], m.deps[2], m.deps[3]
	for _, tc := range []struct {
		local, remote [4]int64
		want          string
	}{
		{want: "a b c d"},
		{local: [4]int64{2, 1, 1, 0}, want: "d b c a"},
		{local: [4]int64{2, 1, 1, 0}, remote: [4]int64{0, 0, 0, 5}, want: "b c a d"},
		{local: [4]int64{0, 3, 0, 0}, remote: [4]int64{4, 0, 0, 1}, want: "c d b a"},
	} {
		for i, dd := range []*deployment{a, b, c, d} {
			dd.inFlight.Store(tc.local[i])
			r.SetRemoteInFlight("m", dd.Name, int(tc.remote[i]))
		}
		if got := names(r.plan(m, seriesComplete)); got != tc.want {
			t.Errorf("in flight %v here, %v elsewhere: plan %q, want %q", tc.local, tc.remote, got, tc.want)
		}
	}
	for _, dd := range []*deployment{a, b, c, d} {
		dd.inFlight.Store(0)
		r.SetRemoteInFlight("m", dd.Name, 0)
	}
	r.SetRemoteInFlight("m", "nonesuch", 3) // ignored
	r.SetRemoteInFlight("nonesuch", "a", 3)

	// Real calls: a held complete call on a and a held stream on b send
	// the next call to c.
	fa, fb := a.Adapter.(*fake), b.Adapter.(*fake)
	fa.hold, fb.hold = make(chan struct{}), make(chan struct{})
	done := make(chan error, 2)
	go func() { _, err := r.Complete(context.Background(), call("m", "1")); done <- err }()
	waitUntil(t, func() bool { return fa.running.Load() == 1 })
	go func() {
		ch, err := r.Stream(context.Background(), call("m", "2"))
		if err == nil {
			for range ch {
			}
		}
		done <- err
	}()
	waitUntil(t, func() bool { return fb.running.Load() == 1 })
	if got := r.InFlight()["m"]; got["a"] != 1 || got["b"] != 1 || got["c"] != 0 {
		t.Fatalf("in flight %v", got)
	}
	resp, err := r.Complete(context.Background(), call("m", "3"))
	if err != nil || resp.Deployment != "c" {
		t.Fatalf("with a and b busy: %+v %v", resp, err)
	}
	close(fa.hold)
	close(fb.hold)
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := r.InFlight()["m"]; got["a"]+got["b"]+got["c"]+got["d"] != 0 {
		t.Fatalf("in flight after every call ended: %v", got)
	}
}

// Latency routing tries first the deployment with the lowest recent
// latency, measures a deployment never measured at once, one that grew
// stale at most once in latencyStale and in probeShare calls, and so
// sees a slow deployment become fast again. Complete calls and streams'
// first chunks are measured apart.
func TestRoutingLatency(t *testing.T) {
	clock := newTestClock()
	a := &timed{fake: fake{name: "a"}, clock: clock}
	b := &timed{fake: fake{name: "b"}, clock: clock}
	a.took.Store(int64(300 * time.Millisecond))
	b.took.Store(int64(100 * time.Millisecond))
	r := newRouter(t, Config{Clock: clock.Now, Models: []Model{{Name: "m", Concurrency: 1, Routing: RoutingLatency,
		Deployments: []Deployment{{Name: "a", Adapter: a}, {Name: "b", Adapter: b}}}}})
	served := func() string {
		t.Helper()
		resp, err := r.Complete(context.Background(), call("m", "x"))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Deployment
	}
	servedN := func(n int) string {
		t.Helper()
		var out []string
		for range n {
			out = append(out, served())
		}
		return strings.Join(out, "")
	}
	// Neither measured: a (in order) and b is measured at once; then a
	// (never measured) too; then b is the fastest.
	if got := servedN(5); got != "babbb" {
		t.Fatalf("first calls served by %q", got)
	}
	// a is not measured again within latencyStale, however many calls.
	if got := servedN(40); got != strings.Repeat("b", 40) {
		t.Fatalf("within latencyStale: %q", got)
	}
	// a becomes fast; once its estimate is stale, the next call (the
	// share allows one: 40 calls since the last) measures it, and it
	// wins at once: a sample after a stale one replaces it.
	a.took.Store(int64(50 * time.Millisecond))
	clock.Advance(latencyStale)
	if got := servedN(3); got != "aaa" {
		t.Fatalf("after a became fast: %q", got)
	}
	// b becomes fast too, but a stays best until b's estimate, stale,
	// may be measured again: 20 calls after the last probe. Then b (20
	// ms) wins.
	b.took.Store(int64(20 * time.Millisecond))
	clock.Advance(latencyStale)
	if got := servedN(17); got != strings.Repeat("a", 17) {
		t.Fatalf("probes past their share: %q", got)
	}
	if got := servedN(3); got != "bbb" {
		t.Fatalf("b measured again: %q", got)
	}
	// A slow answer moves the average by a fifth of the difference: b
	// at 120 ms is slower than a.
	b.took.Store(int64(520 * time.Millisecond))
	if got := servedN(1); got != "b" {
		t.Fatalf("b slowed: %q", got)
	}
	if est := time.Duration(r.models["m"].deps[1].latency[seriesComplete].rank()); est != 120*time.Millisecond {
		t.Fatalf("b's estimate after 20 ms, then 520 ms: %v", est)
	}
	if got := servedN(1); got != "a" {
		t.Fatalf("b slower than a: %q", got)
	}

	// Streams are measured apart, by their first chunk: none measured
	// yet, the first streams measure b (a probe) and a, then a (50 ms)
	// is faster than b (520 ms).
	var streamed []string
	for range 3 {
		ch, err := r.Stream(context.Background(), call("m", "s"))
		if err != nil {
			t.Fatal(err)
		}
		for c := range ch {
			if c.Done {
				streamed = append(streamed, c.Deployment)
			}
		}
	}
	if got := strings.Join(streamed, ""); got != "baa" {
		t.Fatalf("streams served by %q", got)
	}
	if est := time.Duration(r.models["m"].deps[0].latency[seriesStream].rank()); est != 50*time.Millisecond {
		t.Fatalf("a's first chunk measured %v", est)
	}
}

// The latency estimate: a moving average, restarted by a sample after a
// stale one; never measured ranks last.
func TestLatencyEstimate(t *testing.T) {
	var e latencyEstimate
	now := time.Now()
	if e.rank() != 1<<63-1 {
		t.Fatalf("never measured: %d", e.rank())
	}
	e.add(now, 100*time.Millisecond)
	e.add(now.Add(time.Second), 200*time.Millisecond)
	if got := time.Duration(e.rank()); got != 120*time.Millisecond {
		t.Fatalf("average %v, want 120ms", got)
	}
	if e.claimProbe(now.Add(2*time.Second), true) {
		t.Fatal("probed while fresh")
	}
	later := now.Add(time.Second + latencyStale)
	if e.claimProbe(later, false) {
		t.Fatal("probed past the share")
	}
	if !e.claimProbe(later, true) || e.claimProbe(later.Add(time.Second), true) {
		t.Fatal("stale: one probe, then none until latencyStale passes")
	}
	e.add(later, 10*time.Millisecond)
	if got := time.Duration(e.rank()); got != 10*time.Millisecond {
		t.Fatalf("a sample after a stale estimate: %v, want it alone", got)
	}
}

// A model's routing is checked when the router is built.
func TestRoutingChecked(t *testing.T) {
	for _, tc := range []struct {
		m    Model
		want string
	}{
		{Model{Name: "m", Concurrency: 1, Routing: "fastest", Deployments: []Deployment{{Name: "a", Adapter: &fake{}}}}, `routing "fastest"`},
		{Model{Name: "m", Concurrency: 1, Routing: RoutingWeighted, Deployments: []Deployment{{Name: "a", Weight: -1, Adapter: &fake{}}}}, "negative"},
	} {
		if _, err := New(Config{Models: []Model{tc.m}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.m, err, tc.want)
		}
	}
}

// Ordering a plan allocates nothing beyond the plan itself, whatever the
// routing.
func BenchmarkPlan(b *testing.B) {
	for _, routing := range []Routing{RoutingOrdered, RoutingWeighted, RoutingLeastBusy, RoutingLatency} {
		b.Run(string(routing), func(b *testing.B) {
			var ds []Deployment
			for _, n := range []string{"a", "b", "c"} {
				ds = append(ds, Deployment{Name: n, Adapter: &fake{name: n}})
			}
			r, err := New(Config{Models: []Model{{Name: "m", Concurrency: 1, Routing: routing, Deployments: ds}}})
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			m := r.models["m"]
			b.ReportAllocs()
			for b.Loop() {
				r.plan(m, seriesComplete)
			}
		})
	}
}
