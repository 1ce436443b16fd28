package gateway

import (
	"cmp"
	"context"
)

// EmbedService is the optional ability of a Service to embed text
// (POST /v1/embeddings): the same limits, failover and accounting as a
// completion.
type EmbedService interface {
	Embed(ctx context.Context, call EmbedCall) (Embedding, error)
}

// ModelLister is the optional ability of a Service to list the models
// callers may name (GET /v1/models).
type ModelLister interface {
	Models() []string
}

var (
	_ EmbedService = (*Router)(nil)
	_ ModelLister  = (*Router)(nil)
)

// Embed runs one embedding call on the model's deployments whose adapter
// can embed (Embedder), in order, with the model's slots, budgets,
// failover and costs; a model none of whose deployments can embed is
// refused with KindUnsupported, naming the model.
func (r *Router) Embed(ctx context.Context, ec EmbedCall) (Embedding, error) {
	ctx, span := r.startCall(ctx, opEmbeddings, ec.Request.Model, false)
	out, err := r.embed(ctx, ec)
	if span != nil {
		o := outcome{err: err}
		if err == nil {
			u := out.Usage
			o = outcome{provider: out.Provider, deployment: out.Deployment, model: out.Model, usage: &u, cost: out.CostMicros}
		}
		endSpan(span, o)
	}
	return out, err
}

func (r *Router) embed(ctx context.Context, ec EmbedCall) (Embedding, error) {
	call := Call{Request: Request{Model: ec.Request.Model}, Session: ec.Session, Key: ec.Key, Deadline: ec.Deadline}
	if m, ok := r.models[ec.Request.Model]; ok && !canEmbed(m) {
		return Embedding{}, Unsupported("model", "model %q cannot embed: none of its deployments can embed (OpenAI-compatible, Azure and Gemini deployments can, Bedrock with Titan or Cohere models)", m.Name)
	}
	m, ctx, release, err := r.admitModel(ctx, call, func(m *model) int64 {
		return m.worstCost(primingTokens+int64(len(ec.Request.Input)), 0)
	})
	if err != nil {
		return Embedding{}, err
	}
	defer release()
	var last, refusal error
	plan := r.plan(m, seriesEmbed)
	for i, d := range plan {
		e, ok := d.Adapter.(Embedder)
		if !ok {
			continue
		}
		out, err := r.embedOn(ctx, d, e, ec.Request)
		if err != nil && i+1 < len(plan) {
			r.failingOver(ctx, d, err)
		}
		if KindOf(err) == KindUnsupported {
			refusal = cmp.Or(refusal, err)
			continue
		}
		if err == nil {
			out.Provider, out.Deployment = d.Provider, d.Name
			out.CostMicros = d.Price.Cost(out.Usage)
			if err := r.charge(ctx, call, m, d, out.Usage, out.CostMicros); err != nil {
				r.log.Error("recording an embedding's cost", "model", m.Name, "session", call.Session, "error", err)
			}
			return out, nil
		}
		last = err
		d.limited(r.cfg.Clock(), err)
		if !failOver(err) || ctx.Err() != nil {
			return Embedding{}, err
		}
		r.log.Info("failing over", "model", m.Name, "deployment", d.Name, "error", err)
	}
	return Embedding{}, gaveUp(last, refusal)
}

func canEmbed(m *model) bool {
	for _, d := range m.deps {
		if _, ok := d.Adapter.(Embedder); ok {
			return true
		}
	}
	return false
}

// embedOn calls one deployment once.
func (r *Router) embedOn(ctx context.Context, d *deployment, e Embedder, req EmbedRequest) (Embedding, error) {
	began := r.begin(d)
	defer d.end()
	ctx, span := r.startAttempt(ctx, opEmbeddings, d)
	release, err := d.acquire(ctx)
	if err != nil {
		endSpan(span, outcome{err: err})
		return Embedding{}, err
	}
	defer release()
	req.Model = d.Upstream
	actx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	out, err := e.Embed(actx, req)
	cancel()
	r.record(d, err)
	if err != nil {
		endSpan(span, outcome{err: err})
		return Embedding{}, err
	}
	r.answered(d, seriesEmbed, began)
	if span != nil {
		u := out.Usage
		endSpan(span, outcome{model: out.Model, usage: &u, cost: d.Price.Cost(u)})
	}
	return out, nil
}
