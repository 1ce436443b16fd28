// Package gateway is stickyd's one gateway to many AI model providers
// (docs/gateway.md): one adapter contract (Adapter), a router that applies
// per-model limits across every node with a queue persisted through raft,
// routing (routing.go), health and failover between a model's deployments,
// the cost of every answer added, as it returns, to its session, its day
// and the total, and, when given a TracerProvider, an OpenTelemetry trace
// of every call (tracing.go).
//
// Nothing above Adapter knows which provider served a call: adapters turn
// the provider's request and response shapes, errors and usage fields into
// the types of this file and of wire.go (the data the replicated maps also
// hold, defined in internal/gatewaywire and named again here).
package gateway

import (
	"context"
	"encoding/json"
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
// A configured deployment states one: Free, or at least one price above 0
// (cluster.Config.Finish refuses one without).
// CacheWrite prices the prompt tokens a provider writes to its cache
// (Anthropic's cache_creation_input_tokens); zero means 1.25 × Input,
// Anthropic's rate for its 5-minute cache.
type Price struct {
	// Free says the deployment costs nothing (a local model): the way to
	// price it at 0, since a deployment without a price is refused.
	Free        bool    `json:"free,omitempty" hcl:"free,optional"`
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
	// ToolCalls are the pieces of tool calls this chunk adds.
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
	// Native is the provider's event as it sent it, when the adapter sent
	// the caller's Native request (the same shape); a chunk may carry
	// Native alone (an event with nothing for the fields above).
	Native *NativeEvent `json:"native,omitempty"`
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

// ToolCallDelta is a piece of a streamed tool call: the first piece of a
// call names its ID and Name, the next ones add to its Arguments. Index
// tells the calls of one answer apart.
type ToolCallDelta struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// NativeEvent is one server-sent event of a provider's stream, as it
// sent it: its event name ("" when it gave none) and its data.
type NativeEvent struct {
	Event string `json:"event,omitempty"`
	Data  []byte `json:"data"`
}

// Embedder is the optional ability of an Adapter to embed text; the
// router sends embeddings only to deployments whose adapter has it.
type Embedder interface {
	Embed(ctx context.Context, req EmbedRequest) (Embedding, error)
}

// EmbedRequest asks for the embeddings of Input.
type EmbedRequest struct {
	// Model is the caller's model; the router replaces it with the
	// deployment's upstream name.
	Model string `json:"model"`
	// Input is a string, an array of strings, or arrays of token ids, as
	// OpenAI's API takes it.
	Input json.RawMessage `json:"input"`
	// EncodingFormat is "float" or "base64" ("": float).
	EncodingFormat string `json:"encoding_format,omitempty"`
	Dimensions     *int   `json:"dimensions,omitempty"`
	User           string `json:"user,omitempty"`
	// Extra and Native are as Request's.
	Extra  []string `json:"extra,omitempty"`
	Native *Native  `json:"native,omitempty"`
}

// Embedding is the answer to an EmbedRequest.
type Embedding struct {
	Model string `json:"model"`
	// Vectors are the embeddings in the order of the input, each as the
	// provider wrote it (an array of numbers, or base64).
	Vectors []json.RawMessage `json:"vectors"`
	Usage   Usage             `json:"usage"`
	// Native is the provider's answer as it sent it (see Response).
	Native *Native `json:"native,omitempty"`
	// Set by the router: who served it and what it cost.
	Provider   string `json:"provider,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	CostMicros int64  `json:"cost_micros"`
}

// EmbedCall is one caller's embedding request as the gateway takes it
// (see Call).
type EmbedCall struct {
	Request  EmbedRequest `json:"request"`
	Session  string       `json:"session"`
	Key      string       `json:"key,omitempty"`
	Deadline time.Time    `json:"deadline,omitzero"`
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
	// KindUnsupported: the adapter cannot carry a parameter of the
	// request (Param names it) to its provider, so it refused before
	// calling it; another deployment may carry it. Never a health
	// failure.
	KindUnsupported ErrorKind = "unsupported"
)

// Unsupported is an adapter's refusal of a parameter it cannot carry:
// param names it as the caller wrote it ("response_format",
// "messages[2].content[0].image_url.detail").
func Unsupported(param, format string, args ...any) *ProviderError {
	return &ProviderError{Kind: KindUnsupported, Param: param, Message: fmt.Sprintf(format, args...)}
}

// ProviderError is an adapter's error: what kind of refusal it is, and
// what the provider said.
type ProviderError struct {
	Kind ErrorKind
	// Status is the HTTP status (0 when there was no answer).
	Status int
	// Type and Message are the provider's error type and message.
	Type    string
	Message string
	// Param names the request's parameter at fault, when known.
	Param string
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
