package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Failover to another deployment starts at once: the backoff is only
// before a deployment is tried again.
func TestFailoverStartsAtOnce(t *testing.T) {
	p := &fake{name: "p", script: []step{{err: &ProviderError{Kind: KindServer, Status: 500, Message: "boom"}}}}
	other := &fake{name: "other"}
	r := newRouter(t, Config{Backoff: 5 * time.Second,
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}, {Name: "o", Adapter: other}}}}})
	start := time.Now()
	resp, err := r.Complete(context.Background(), call("m", "x"))
	if err != nil || resp.Deployment != "o" {
		t.Fatalf("failover: %+v %v", resp, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("failover took %v with a 5 s backoff: it waited", d)
	}
	p.script = []step{{err: &ProviderError{Kind: KindServer, Status: 500, Message: "boom"}}}
	start = time.Now()
	ch, err := r.Stream(context.Background(), call("m", "y"))
	if err != nil {
		t.Fatal(err)
	}
	for c := range ch {
		if c.Err != nil || (c.Done && c.Deployment != "o") {
			t.Fatalf("stream failover: %+v", c)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("stream failover took %v", d)
	}
}

// When no deployment answers, the caller gets the provider's own error
// (its kind, status and message), not ErrNoDeployment.
func TestProviderErrorReachesCaller(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  *ProviderError
	}{
		{"server", &ProviderError{Kind: KindServer, Status: 500, Message: "the model crashed"}},
		{"overloaded", &ProviderError{Kind: KindOverloaded, Status: 529, Message: "overloaded"}},
		{"bad request", &ProviderError{Kind: KindBadRequest, Status: 422, Message: "messages: bad"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fake{name: "p", script: []step{{err: tc.err}, {err: tc.err}}}
			r := newRouter(t, Config{Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}}}}})
			_, err := r.Complete(context.Background(), call("m", "x"))
			var pe *ProviderError
			if !errors.As(err, &pe) || pe.Status != tc.err.Status || pe.Message != tc.err.Message || errors.Is(err, ErrNoDeployment) {
				t.Fatalf("Complete: %v", err)
			}
			_, err = r.Stream(context.Background(), call("m", "x"))
			if !errors.As(err, &pe) || pe.Status != tc.err.Status || pe.Message != tc.err.Message {
				t.Fatalf("Stream: %v", err)
			}
		})
	}
}

// An adapter's refusal of a parameter it cannot carry sends the call to
// the next deployment; when every one refuses, the first refusal (naming
// the parameter) reaches the caller. It never counts against health.
func TestUnsupportedFailsOver(t *testing.T) {
	refuse := Unsupported("logprobs", "the provider has no logprobs")
	p := &fake{name: "p", script: []step{{err: refuse}, {err: refuse}, {err: refuse}}}
	other := &fake{name: "other", script: []step{{}, {err: Unsupported("seed", "no seed")}}}
	r := newRouter(t, Config{Health: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.1},
		Models: []Model{{Name: "m", Concurrency: 1, Deployments: []Deployment{{Name: "d", Adapter: p}, {Name: "o", Adapter: other}}}}})
	resp, err := r.Complete(context.Background(), call("m", "x"))
	if err != nil || resp.Deployment != "o" {
		t.Fatalf("refused by the first: %+v %v", resp, err)
	}
	_, err = r.Complete(context.Background(), call("m", "x"))
	var pe *ProviderError
	if !errors.As(err, &pe) || pe.Kind != KindUnsupported || pe.Param != "logprobs" {
		t.Fatalf("refused by both: %v", err)
	}
	if h := r.Health()["m"].Deployments["d"]; h.Degraded || h.Failures != 0 {
		t.Fatalf("a refusal counted against health: %+v", h)
	}
}

// Embeddings go only to deployments that can embed; a model with none
// is refused naming it.
func TestEmbed(t *testing.T) {
	e := &embedder{fake: fake{name: "e"}}
	r := newRouter(t, Config{Models: []Model{
		{Name: "chat", Concurrency: 1, Deployments: []Deployment{{Name: "c", Adapter: &fake{name: "c"}}}},
		{Name: "emb", Concurrency: 1, Deployments: []Deployment{{Name: "c", Adapter: &fake{name: "c"}}, {Name: "e", Adapter: e, Price: Price{Input: 1}}}},
	}})
	out, err := r.Embed(context.Background(), EmbedCall{Request: EmbedRequest{Model: "emb", Input: []byte(`"hi"`)}, Session: "s"})
	if err != nil || out.Deployment != "e" || e.model != "" || out.Usage.Input != 3 || out.CostMicros != 3 {
		t.Fatalf("Embed: %+v %v (upstream %q)", out, err, e.model)
	}
	_, err = r.Embed(context.Background(), EmbedCall{Request: EmbedRequest{Model: "chat", Input: []byte(`"hi"`)}})
	if KindOf(err) != KindUnsupported {
		t.Fatalf("a model that cannot embed: %v", err)
	}
}

type embedder struct {
	fake
	model string
}

func (e *embedder) Embed(ctx context.Context, req EmbedRequest) (Embedding, error) {
	e.model = req.Model
	return Embedding{Model: req.Model, Vectors: nil, Usage: Usage{Input: 3}}, nil
}
