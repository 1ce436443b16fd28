// Package gateway is stickyd's one gateway to many AI model providers
// (docs/gateway.md): one adapter contract (Adapter), a router that applies
// per-model limits across every node with a queue persisted through raft,
// health and failover between a model's deployments, and the cost of every
// answer added, as it returns, to its session, its day and the total.
//
// Nothing above Adapter knows which provider served a call: adapters turn
// the provider's request and response shapes, errors and usage fields into
// the types of this file and of wire.go (the data the replicated maps also
// hold, defined in internal/gatewaywire and named again here).
package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Transport is the HTTP transport adapters use when given no client: the
// default transport's settings, with enough idle connections per provider
// to keep them open under load (the default's 2 would open and close a
// connection for most calls at a few thousand calls a second).
func Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 4096
	t.MaxIdleConnsPerHost = 1024
	return t
}

// Adapter is the contract every provider adapter implements (the seed's
// three methods). Complete and Stream send req to the provider's model
// req.Model (the deployment's upstream name: the router fills it in).
type Adapter interface {
	// Complete returns the whole answer.
	Complete(ctx context.Context, req Request) (Response, error)
	// Stream returns the answer as it is produced. The channel is closed
	// after the last chunk; the last chunk carries Done (with the usage
	// and the finish reason) or Err (the stream failed midway: a
	// mid-stream failure). A stream that ends without either failed too.
	// Cancelling ctx stops the stream and closes the channel.
	Stream(ctx context.Context, req Request) (<-chan Chunk, error)
	// HealthCheck makes the cheapest call that proves the deployment
	// answers (a model listing, say); nil means healthy.
	HealthCheck(ctx context.Context) error
}

// Price is what a deployment charges, in US dollars per million tokens.
// CacheWrite prices the prompt tokens a provider writes to its cache
// (Anthropic's cache_creation_input_tokens); zero means 1.25 × Input,
// Anthropic's rate for its 5-minute cache.
type Price struct {
	Input       float64 `json:"input" hcl:"input,optional"`
	CachedInput float64 `json:"cached_input" hcl:"cached_input,optional"`
	CacheWrite  float64 `json:"cache_write,omitempty" hcl:"cache_write,optional"`
	Output      float64 `json:"output" hcl:"output,optional"`
}

// cacheWriteFactor is a cache write's price against plain input when the
// deployment names none.
const cacheWriteFactor = 1.25

// Cost is the price of usage, in micro-dollars (millionths of a US dollar),
// rounded to the nearest: integers add up exactly across nodes.
func (p Price) Cost(u Usage) int64 {
	write := p.CacheWrite
	if write == 0 {
		write = cacheWriteFactor * p.Input
	}
	tokens := float64(u.Input)*p.Input + float64(u.CacheWrite)*write + float64(u.CachedInput)*p.CachedInput + float64(u.Output)*p.Output
	// price per million tokens × tokens / 1e6 dollars = price × tokens micro-dollars
	return int64(tokens + 0.5)
}

// Chunk is one piece of a streamed answer.
type Chunk struct {
	// Delta is the text added by this chunk.
	Delta string `json:"delta,omitempty"`
	// Done marks the last chunk of a stream that ended well: Usage and
	// FinishReason are then set (ID and Model when the provider said).
	Done         bool   `json:"done,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
	Usage        *Usage `json:"usage,omitempty"`
	ID           string `json:"id,omitempty"`
	Model        string `json:"model,omitempty"`
	// Provider and Deployment name who serves the stream, on its first
	// chunk and on its last; CostMicros is the stream's cost, on its last
	// (as an Answer carries them).
	Provider   string `json:"provider,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	CostMicros int64  `json:"cost_micros,omitempty"`
	// Err is set on the last chunk of a stream that failed midway.
	Err error `json:"-"`
}

// ErrorKind classifies a provider's refusal, so the router knows what to do
// with it without knowing the provider.
type ErrorKind string

const (
	// KindRateLimited: too many requests now (429); retry after RetryAfter.
	KindRateLimited ErrorKind = "rate_limited"
	// KindOverloaded: the provider is overloaded (Anthropic 529, 503);
	// retry later or elsewhere.
	KindOverloaded ErrorKind = "overloaded"
	// KindQuotaExceeded: the account's spend limit or quota is reached
	// (a 429 that must not be retried).
	KindQuotaExceeded ErrorKind = "quota_exceeded"
	// KindAuth: the key is refused (401, 403); not retried.
	KindAuth ErrorKind = "auth"
	// KindBadRequest: the request itself is wrong (400, 404, 413, 422);
	// not retried, not failed over, not a health failure.
	KindBadRequest ErrorKind = "bad_request"
	// KindServer: the provider failed (500, 502, 504, a broken answer).
	KindServer ErrorKind = "server"
	// KindTimeout: no answer in time.
	KindTimeout ErrorKind = "timeout"
	// KindNetwork: the provider could not be reached.
	KindNetwork ErrorKind = "network"
)

// ProviderError is an adapter's error: what kind of refusal it is, and
// what the provider said.
type ProviderError struct {
	Kind ErrorKind
	// Status is the HTTP status (0 when there was no answer).
	Status int
	// Type and Message are the provider's error type and message.
	Type    string
	Message string
	// RetryAfter is how long the provider asked to wait (retry-after,
	// retry-after-ms headers); 0 when it did not say.
	RetryAfter time.Duration
}

func (e *ProviderError) Error() string {
	s := fmt.Sprintf("provider: %s", e.Kind)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Type != "" {
		s += " " + e.Type
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// Retryable reports whether the same request may succeed later or on
// another deployment.
func (e *ProviderError) Retryable() bool {
	switch e.Kind {
	case KindRateLimited, KindOverloaded, KindServer, KindTimeout, KindNetwork:
		return true
	}
	return false
}

// KindOf returns err's ErrorKind: a ProviderError's, KindTimeout for a
// deadline, KindNetwork otherwise.
func KindOf(err error) ErrorKind {
	var pe *ProviderError
	switch {
	case errors.As(err, &pe):
		return pe.Kind
	case errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	}
	return KindNetwork
}
