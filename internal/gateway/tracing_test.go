package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// gated streams a first chunk at once, then waits for open before the
// rest: a test sees the stream under way.
type gated struct {
	fake
	open chan struct{}
}

func (g *gated) Stream(ctx context.Context, req Request) (<-chan Chunk, error) {
	out := make(chan Chunk)
	go func() {
		defer close(out)
		out <- Chunk{Delta: "first"}
		select {
		case <-g.open:
		case <-ctx.Done():
			return
		}
		out <- Chunk{Delta: " and the rest"}
		out <- Chunk{Done: true, ID: "resp-1", Model: req.Model + "-0601", FinishReason: "stop",
			Usage: &Usage{Input: 10, CachedInput: 4, Output: 5}}
	}()
	return out, nil
}

// attrs maps a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func events(s sdktrace.ReadOnlySpan) string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return strings.Join(out, ", ")
}

// Acceptance 7 of issue 46: a trace of one call that queued, failed over
// and streamed shows each step. A model of concurrency 1: a first call
// holds the slot, so the second (the stream) waits in the queue; its first
// deployment answers 500, so it fails over to the second, which streams.
// The call's span ends when its stream ends.
func TestTraceOfAQueuedFailedOverStream(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	boom := &ProviderError{Kind: KindServer, Status: 500, Message: "the model crashed"}
	bad := &fake{name: "bad", script: []step{{err: boom}, {err: boom}}}
	good := &gated{fake: fake{name: "good", hold: make(chan struct{})}, open: make(chan struct{})}
	r := newRouter(t, Config{TracerProvider: tp, Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{
		{Name: "east", Provider: "openai", Upstream: "gpt-east", Adapter: bad},
		{Name: "west", Provider: "anthropic", Upstream: "claude-west", Price: Price{Input: 1, CachedInput: 0.5, Output: 2}, Adapter: good},
	}}}})

	// The first call fails over to west, and holds there.
	first := make(chan error, 1)
	go func() { _, err := r.Complete(context.Background(), call("m", "first")); first <- err }()
	waitUntil(t, func() bool { return good.running.Load() == 1 })
	// The second, a stream, queues behind it.
	type opened struct {
		ch  <-chan Chunk
		err error
	}
	second := make(chan opened, 1)
	go func() { ch, err := r.Stream(context.Background(), call("m", "second")); second <- opened{ch, err} }()
	waitUntil(t, func() bool { return r.models["m"].slots.Stats().Queued == 1 })
	close(good.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	st := <-second
	if st.err != nil {
		t.Fatal(st.err)
	}
	// The stream is under way (its first chunk came): its call's span is
	// not ended yet.
	for _, s := range rec.Ended() {
		if s.Name() == "chat m" && attrs(s)["stickyd.gateway.stream"].AsBool() {
			t.Fatal("the stream's span ended before the stream")
		}
	}
	close(good.open)
	var text string
	for c := range st.ch {
		if c.Err != nil {
			t.Fatal(c.Err)
		}
		text += c.Delta
	}
	if text != "first and the rest" {
		t.Fatalf("streamed %q", text)
	}

	// The stream's trace: its call's span and the spans under it.
	var root sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "chat m" && attrs(s)["stickyd.gateway.stream"].AsBool() {
			root = s
		}
	}
	if root == nil {
		t.Fatalf("no span of the stream; spans: %v", names2(rec.Ended()))
	}
	var children []sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == root.SpanContext().TraceID() && s.Parent().SpanID() == root.SpanContext().SpanID() {
			children = append(children, s)
		}
	}
	if got := names2(children); got != "queue, chat gpt-east, chat claude-west" {
		t.Fatalf("the stream's steps: %s", got)
	}
	queue, east, west := children[0], children[1], children[2]

	want := map[attribute.Key]any{
		"gen_ai.operation.name":                "chat",
		"gen_ai.request.model":                 "m",
		"gen_ai.provider.name":                 "anthropic",
		"gen_ai.response.model":                "claude-west-0601",
		"gen_ai.response.id":                   "resp-1",
		"gen_ai.usage.input_tokens":            int64(14),
		"gen_ai.usage.output_tokens":           int64(5),
		"gen_ai.usage.cache_read.input_tokens": int64(4),
		"stickyd.gateway.deployment":           "west",
		"stickyd.gateway.stream":               true,
		"stickyd.gateway.attempts":             int64(2),
		"stickyd.gateway.cost_usd":             0.000022, // 10 × $1 + 4 × $0.5 + 5 × $2 per million
	}
	checkAttrs(t, "the call", root, want)
	if root.SpanKind() != trace.SpanKindInternal || root.Status().Code == codes.Error {
		t.Fatalf("the call: kind %v, status %+v", root.SpanKind(), root.Status())
	}
	if got := events(root); got != "failover, first chunk" {
		t.Fatalf("the call's events: %s", got)
	}
	fo := attrs2(root.Events()[0].Attributes)
	if fo["stickyd.gateway.deployment"].AsString() != "east" || fo["error.type"].AsString() != "server" {
		t.Fatalf("the failover event: %v", root.Events()[0].Attributes)
	}

	checkAttrs(t, "the queue", queue, map[attribute.Key]any{"stickyd.gateway.queued": true})
	if d := queue.EndTime().Sub(queue.StartTime()); d <= 0 {
		t.Fatalf("the queue's span lasted %v", d)
	}

	checkAttrs(t, "the failed attempt", east, map[attribute.Key]any{
		"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-east", "gen_ai.provider.name": "openai",
		"stickyd.gateway.deployment": "east", "error.type": "server",
	})
	if east.Status().Code != codes.Error || !strings.Contains(east.Status().Description, "the model crashed") || east.SpanKind() != trace.SpanKindClient {
		t.Fatalf("the failed attempt: status %+v, kind %v", east.Status(), east.SpanKind())
	}

	checkAttrs(t, "the streaming attempt", west, map[attribute.Key]any{
		"gen_ai.request.model": "claude-west", "gen_ai.provider.name": "anthropic", "gen_ai.response.model": "claude-west-0601",
		"gen_ai.usage.output_tokens": int64(5), "stickyd.gateway.deployment": "west",
	})
	if west.Status().Code == codes.Error || events(west) != "first chunk" {
		t.Fatalf("the streaming attempt: status %+v, events %s", west.Status(), events(west))
	}
	if _, ok := attrs(west)["stickyd.gateway.time_to_first_chunk_ms"]; !ok {
		t.Fatal("the streaming attempt has no time to first chunk")
	}
	// In order: the queue, then the attempts, the call ending last.
	if east.StartTime().Before(queue.EndTime()) || west.StartTime().Before(east.EndTime()) || root.EndTime().Before(west.EndTime()) {
		t.Fatalf("out of order: queue %v–%v, east %v–%v, west %v–%v, call ends %v", queue.StartTime(), queue.EndTime(),
			east.StartTime(), east.EndTime(), west.StartTime(), west.EndTime(), root.EndTime())
	}

	// The first call's own trace: no queue wait, a failover, a whole
	// answer.
	var firstRoot sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "chat m" && !attrs(s)["stickyd.gateway.stream"].AsBool() {
			firstRoot = s
		}
	}
	if firstRoot == nil || events(firstRoot) != "failover" {
		t.Fatalf("the first call's span: %v", firstRoot)
	}
	checkAttrs(t, "the first call", firstRoot, map[attribute.Key]any{"stickyd.gateway.deployment": "west", "stickyd.gateway.attempts": int64(2)})
	for _, s := range rec.Ended() {
		if s.Name() == "queue" && s.Parent().SpanID() == firstRoot.SpanContext().SpanID() {
			checkAttrs(t, "the first call's queue", s, map[attribute.Key]any{"stickyd.gateway.queued": false})
		}
	}
}

// A call that fails everywhere ends its span with the error; a call
// refused before any attempt (an unknown model) too.
func TestTraceOfAFailedCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	boom := &ProviderError{Kind: KindOverloaded, Status: 529, Message: "overloaded"}
	p := &fake{name: "p", script: []step{{err: boom}}}
	r := newRouter(t, Config{TracerProvider: tp, Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Provider: "openai", Upstream: "u", Adapter: p}}}}})
	if _, err := r.Complete(context.Background(), call("m", "x")); err == nil {
		t.Fatal("no error")
	}
	if _, err := r.Complete(context.Background(), call("nonesuch", "x")); err == nil {
		t.Fatal("no error")
	}
	got := map[string]string{}
	for _, s := range rec.Ended() {
		got[s.Name()] = fmt.Sprintf("%v %s %s", s.Status().Code, attrs(s)["error.type"].AsString(), events(s))
	}
	want := map[string]string{"chat m": "Error overloaded ", "queue": "Unset  ", "chat u": "Error overloaded ", "chat nonesuch": "Error unknown_model "}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: %q, want %q (all: %v)", name, got[name], w, got)
		}
	}
}

// A call not sampled is not traced (nor are its steps), and a router
// without a TracerProvider traces nothing.
func TestTraceNotSampled(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(sdktrace.NeverSample()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r := newRouter(t, Config{TracerProvider: tp, Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: &fake{name: "p"}}}}}})
	if _, err := r.Complete(context.Background(), call("m", "x")); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Started()); n != 0 {
		t.Fatalf("%d spans recorded", n)
	}
}

func names2(spans []sdktrace.ReadOnlySpan) string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return strings.Join(out, ", ")
}

func attrs2(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range kvs {
		out[kv.Key] = kv.Value
	}
	return out
}

func checkAttrs(t *testing.T, what string, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	got := attrs(s)
	for k, w := range want {
		v, ok := got[k]
		if !ok {
			t.Errorf("%s: no %s (has %v)", what, k, s.Attributes())
			continue
		}
		if v.AsInterface() != w {
			t.Errorf("%s: %s = %v (%T), want %v", what, k, v.AsInterface(), v.AsInterface(), w)
		}
	}
}

// The cost of tracing a call: off (no TracerProvider) the router
// allocates what it did before tracing; on, the spans' own.
func BenchmarkCompleteTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			cfg := Config{Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: &fake{name: "p"}}}}}}
			if on {
				tp := sdktrace.NewTracerProvider() // spans recorded, not exported
				defer tp.Shutdown(context.Background())
				cfg.TracerProvider = tp
			}
			r, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			c := call("m", "x")
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Complete(context.Background(), c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
