package gateway

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// The router traces each call with OpenTelemetry, in the GenAI semantic
// conventions, when Config.TracerProvider is set (it is off otherwise,
// and costs a nil check):
//
//	chat {model}                  the call, as the caller made it (kind internal)
//	├── queue                     its wait for a slot of the model
//	├── reserve                   its budgets' reservation, when it has one
//	├── chat {upstream}           an attempt on a deployment (kind client):
//	│                             failed: error status and error.type
//	└── chat {upstream}           the next, after a "failover" event on the call
//
// A stream's spans end when the stream ends; the attempt's "first chunk"
// event and stickyd.gateway.time_to_first_chunk_ms say when its first
// chunk came. An embedding is "embeddings {model}".

// tracerName names the router's instrumentation scope.
const tracerName = "github.com/stickyd/stickyd/internal/gateway"

// The operations a call span names (gen_ai.operation.name).
const (
	opChat       = "chat"
	opEmbeddings = "embeddings"
)

// stickyd's own attributes of a call and its attempts.
const (
	attrCost       = attribute.Key("stickyd.gateway.cost_usd")
	attrDeployment = attribute.Key("stickyd.gateway.deployment")
	attrStream     = attribute.Key("stickyd.gateway.stream")
	attrQueued     = attribute.Key("stickyd.gateway.queued")
	attrAttempts   = attribute.Key("stickyd.gateway.attempts")
	attrFirstChunk = attribute.Key("stickyd.gateway.time_to_first_chunk_ms")
	attrWait       = attribute.Key("stickyd.gateway.wait_ms")
	attrReserved   = attribute.Key("stickyd.gateway.reserved_usd")
)

// providerNames are the gen_ai.provider.name of the deployments'
// providers the conventions name; any other is its own word ("compat").
var providerNames = map[string]string{
	"openai":    "openai",
	"anthropic": "anthropic",
	"gemini":    "gcp.gemini",
	"azure":     "azure.ai.openai",
	"bedrock":   "aws.bedrock",
}

func providerName(p string) attribute.KeyValue {
	if n, ok := providerNames[p]; ok {
		return semconv.GenAIProviderNameKey.String(n)
	}
	return semconv.GenAIProviderNameKey.String(p)
}

// outcome is what ended a call or an attempt, for its span.
type outcome struct {
	// provider and deployment answered (none: "").
	provider, deployment string
	model                string // the provider's name of the model that answered
	id                   string // the provider's id of the answer
	finish               string
	usage                *Usage // nil: none known
	cost                 int64
	err                  error
	// left says the caller left a stream: not a failure.
	left bool
}

// startCall starts a call's span, op on the model the caller named; it
// returns ctx with it, and the span, nil when tracing is off or the call
// is not sampled (ctx then holds the span not sampled, so that its
// attempts are not traced under a caller's own span).
func (r *Router) startCall(ctx context.Context, op, model string, stream bool) (context.Context, trace.Span) {
	if r.tracer == nil {
		return ctx, nil
	}
	ctx, span := r.tracer.Start(ctx, op+" "+model, trace.WithSpanKind(trace.SpanKindInternal))
	if !span.IsRecording() {
		return ctx, nil
	}
	span.SetAttributes(semconv.GenAIOperationNameKey.String(op), semconv.GenAIRequestModel(model), attrStream.Bool(stream))
	return ctx, span
}

// callSpan is the span of the call ctx belongs to, nil when it is not
// traced.
func (r *Router) callSpan(ctx context.Context) trace.Span {
	if r.tracer == nil {
		return nil
	}
	if s := trace.SpanFromContext(ctx); s.IsRecording() {
		return s
	}
	return nil
}

// startAttempt starts the span of an attempt of the call ctx belongs to
// on d, and counts it on the call's span; it returns ctx with it, and
// the span (nil when not traced).
func (r *Router) startAttempt(ctx context.Context, op string, d *deployment) (context.Context, trace.Span) {
	call := r.callSpan(ctx)
	if call == nil {
		return ctx, nil
	}
	if adm := admissionOf(ctx); adm != nil {
		call.SetAttributes(attrAttempts.Int(int(adm.attempts.Add(1))))
	}
	ctx, span := r.tracer.Start(ctx, op+" "+d.Upstream, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(semconv.GenAIOperationNameKey.String(op), semconv.GenAIRequestModel(d.Upstream),
			providerName(d.Provider), attrDeployment.String(d.Name)))
	return ctx, span
}

// startStep starts a child span of the call ctx belongs to (queue,
// reserve); nil when not traced.
func (r *Router) startStep(ctx context.Context, name string) trace.Span {
	if r.callSpan(ctx) == nil {
		return nil
	}
	_, span := r.tracer.Start(ctx, name)
	return span
}

// waitingOut records on the call's span that it waits out d's rate
// limit for wait.
func (r *Router) waitingOut(ctx context.Context, d *deployment, wait time.Duration) {
	if call := r.callSpan(ctx); call != nil {
		call.AddEvent("rate limit wait", trace.WithAttributes(attrDeployment.String(d.Name), attrWait.Float64(ms(wait))))
	}
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// failingOver records on the call's span that an attempt on d failed
// with err and the call goes on to the next deployment.
func (r *Router) failingOver(ctx context.Context, d *deployment, err error) {
	if call := r.callSpan(ctx); call != nil {
		call.AddEvent("failover", trace.WithAttributes(attrDeployment.String(d.Name), semconv.ErrorTypeKey.String(string(KindOf(err))),
			attribute.String("error.message", err.Error())))
	}
}

// firstChunk records a stream's first chunk on its attempt's span, took
// after the attempt began, and on its call's.
func firstChunk(ctx context.Context, attempt trace.Span, took time.Duration) {
	if attempt == nil {
		return
	}
	attempt.AddEvent("first chunk")
	attempt.SetAttributes(attrFirstChunk.Float64(ms(took)))
	if call := trace.SpanFromContext(ctx); call.IsRecording() {
		call.AddEvent("first chunk")
	}
}

// endSpan ends a call's or an attempt's span with its outcome (nothing
// when span is nil).
func endSpan(span trace.Span, o outcome) {
	if span == nil {
		return
	}
	if o.deployment != "" {
		span.SetAttributes(providerName(o.provider), attrDeployment.String(o.deployment))
	}
	if o.model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(o.model))
	}
	if o.id != "" {
		span.SetAttributes(semconv.GenAIResponseID(o.id))
	}
	if o.finish != "" {
		span.SetAttributes(semconv.GenAIResponseFinishReasons(o.finish))
	}
	if u := o.usage; u != nil {
		// gen_ai.usage.input_tokens counts every input token, cached
		// and written to the cache included.
		span.SetAttributes(semconv.GenAIUsageInputTokens(int(u.Input+u.CachedInput+u.CacheWrite)), semconv.GenAIUsageOutputTokens(int(u.Output)))
		if u.CachedInput > 0 {
			span.SetAttributes(semconv.GenAIUsageCacheReadInputTokens(int(u.CachedInput)))
		}
		if u.CacheWrite > 0 {
			span.SetAttributes(semconv.GenAIUsageCacheCreationInputTokens(int(u.CacheWrite)))
		}
	}
	if o.usage != nil || o.cost > 0 {
		span.SetAttributes(attrCost.Float64(float64(o.cost) / 1e6))
	}
	switch {
	case o.left:
		span.AddEvent("caller left")
	case o.err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String(FailureKind(o.err)))
		span.SetStatus(codes.Error, o.err.Error())
	}
	span.End()
}

// answered is the outcome of a whole answer.
func answered(resp Response) outcome {
	u := resp.Usage
	return outcome{provider: resp.Provider, deployment: resp.Deployment, model: resp.Model, id: resp.ID, finish: resp.FinishReason,
		usage: &u, cost: resp.CostMicros}
}

// endStep ends a step's span (queue, reserve) with its attribute, and
// err when it failed.
func endStep(span trace.Span, attr attribute.KeyValue, err error) {
	if span == nil {
		return
	}
	span.SetAttributes(attr)
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(FailureKind(err)))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
