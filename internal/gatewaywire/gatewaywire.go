// Package gatewaywire is the AI gateway's data as the replicated maps hold
// it (submitted calls, their answers, cost counters), apart from the
// gateway so that the maps depend on it alone: internal/fsm imports this
// package and never internal/gateway, which sits above the maps (its
// cluster half proposes to them).
//
// It holds plain data and the arithmetic on it, nothing else: no provider,
// no router, no raft. Its JSON is what the raft log and snapshots store, so
// a field's tag never changes (a new field takes a new name, and old
// entries, which lack it, must still decode). internal/gateway names every
// type here again (type aliases), so its users need not know this package.
package gatewaywire

import (
	"context"
	"strings"
	"time"
)

// Message is one turn of a conversation.
type Message struct {
	// Role is "system", "user", "assistant" or "tool" (the answer of a
	// tool call, ToolCallID).
	Role    string `json:"role"`
	Content string `json:"content"`
	// Parts is the content as parts (text, images...) when the caller
	// sent it so; Content is then empty.
	Parts []Part `json:"parts,omitempty"`
	// ToolCalls are an assistant's calls of tools.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID is the call a "tool" message answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// Name is the author's name (OpenAI's name field).
	Name string `json:"name,omitempty"`
}

// Text is the message's text: Content, or its text parts joined.
func (m Message) Text() string {
	if len(m.Parts) == 0 {
		return m.Content
	}
	var b strings.Builder
	for _, p := range m.Parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

// Request is a completion request in the gateway's own terms.
type Request struct {
	// Model is the model the caller asked for; the router replaces it with
	// the deployment's upstream model name before calling an adapter.
	Model    string    `json:"model"`
	Messages []Message `json:"messages"`
	// MaxTokens bounds the answer (0: the adapter's default; Anthropic
	// needs one, its adapter uses 1024).
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
	Stop        []string `json:"stop,omitempty"`
	// User is passed to providers that take an end-user id.
	User string `json:"user,omitempty"`

	// MaxCompletionTokens is OpenAI's newer bound, reasoning tokens
	// included; it is sent as itself, never as max_tokens (OpenAI's
	// reasoning models refuse that).
	MaxCompletionTokens int `json:"max_completion_tokens,omitempty"`
	// TopK is Anthropic's top_k.
	TopK *int `json:"top_k,omitempty"`
	// N is how many answers to make (0 and 1: one).
	N    int    `json:"n,omitempty"`
	Seed *int64 `json:"seed,omitempty"`
	// The penalties, logit_bias and logprobs of OpenAI's API.
	PresencePenalty  *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float64           `json:"frequency_penalty,omitempty"`
	LogitBias        map[string]float64 `json:"logit_bias,omitempty"`
	Logprobs         bool               `json:"logprobs,omitempty"`
	TopLogprobs      *int               `json:"top_logprobs,omitempty"`
	// Metadata is OpenAI's key-value metadata.
	Metadata        map[string]string `json:"metadata,omitempty"`
	ServiceTier     string            `json:"service_tier,omitempty"`
	ReasoningEffort string            `json:"reasoning_effort,omitempty"`
	// Tools the model may call, which one it must, and whether it may
	// call several at once.
	Tools             []Tool      `json:"tools,omitempty"`
	ToolChoice        *ToolChoice `json:"tool_choice,omitempty"`
	ParallelToolCalls *bool       `json:"parallel_tool_calls,omitempty"`
	// ResponseFormat asks for JSON output.
	ResponseFormat *ResponseFormat `json:"response_format,omitempty"`
	// Extra names the parameters the caller sent that only its own API
	// has (Anthropic's thinking, cache_control; OpenAI's audio...): an
	// adapter of that API carries them in Native, another refuses the
	// request naming the first.
	Extra []string `json:"extra,omitempty"`
	// Native is the caller's request as it sent it.
	Native *Native `json:"native,omitempty"`
}

// Call is one caller's request as the gateway takes it.
type Call struct {
	Request Request `json:"request"`
	// Session is who pays: the sticky user session for calls from worker
	// apps, the API key's name (or the X-Stickyd-Session header) for
	// external callers. Its cost counter grows with every answer.
	Session string `json:"session"`
	// Key is the name of the API key the caller authenticated with (""
	// for workers' calls): its own counter and budget.
	Key string `json:"key,omitempty"`
	// IdempotencyKey names the request across retries: a request
	// submitted twice with the same key runs once (optional; the gateway
	// makes one up when empty).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Deadline bounds the whole call, queueing included (zero: the
	// gateway's default).
	Deadline time.Time `json:"deadline,omitzero"`
	// OnStart, if set, is called once the call has its slot, before any
	// provider is called; an error ends the call with it. A persisted
	// queue records the start there, so that a call is known to have
	// maybe run only from then on.
	OnStart func(ctx context.Context) error `json:"-"`
	// OnEnd, if set, is called once a stream that started has ended,
	// before its channel closes (a stream that never started, or a
	// whole answer: never).
	OnEnd func() `json:"-"`
	// Accepted marks a call a persisted queue accepted (async REST): the
	// queue's bound and the gateway's queue_timeout were checked when it
	// was accepted, so it waits for its slot as long as it takes (or until
	// its own Deadline), never refused for the line's length.
	Accepted bool `json:"-"`
}

// Usage is what a call consumed, in tokens. Cached input tokens (served
// from the provider's prompt cache, billed at their own price) are counted
// apart from the other input tokens: Input excludes them.
type Usage struct {
	Input       int64 `json:"input_tokens"`
	CachedInput int64 `json:"cached_input_tokens"`
	// CacheWrite counts input tokens written to the prompt cache
	// (Anthropic's cache_creation_input_tokens); they are billed as Input.
	CacheWrite int64 `json:"cache_write_tokens,omitempty"`
	Output     int64 `json:"output_tokens"`
}

// Add returns u + v.
func (u Usage) Add(v Usage) Usage {
	return Usage{Input: u.Input + v.Input, CachedInput: u.CachedInput + v.CachedInput, CacheWrite: u.CacheWrite + v.CacheWrite, Output: u.Output + v.Output}
}

// Response is a whole answer.
type Response struct {
	// ID is the provider's id of the answer.
	ID      string `json:"id"`
	Model   string `json:"model"`
	Content string `json:"content"`
	// FinishReason is "stop", "length", "content_filter", "tool_calls" or
	// the provider's own word, lower case.
	FinishReason string `json:"finish_reason"`
	Usage        Usage  `json:"usage"`
	// ToolCalls are the model's calls of tools (FinishReason
	// "tool_calls").
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// Native is the provider's answer as it sent it, when the adapter
	// sent the caller's Native request (the same shape).
	Native *Native `json:"native,omitempty"`
	// Set by the router: who served it and what it cost.
	Provider   string        `json:"provider,omitempty"`
	Deployment string        `json:"deployment,omitempty"`
	CostMicros int64         `json:"cost_micros"`
	Latency    time.Duration `json:"latency_ns"`
}
