package client

import (
	"context"
	"net/url"
	"time"
)

// GatewayUsage is what the AI gateway's calls cost (GET
// /v1/gateway/usage): the counters and where they come from, "leader"
// (every finished call counted) or "replica" (an agent's copy of the maps,
// when the leader cannot be asked; it may lag).
type GatewayUsage struct {
	GatewayCounters
	Source string `json:"source"`
}

// GatewayCounters are the cost counters: per session, per API key, per
// calendar day (YYYY-MM-DD) and in total.
type GatewayCounters struct {
	Sessions map[string]GatewayTally `json:"sessions"`
	Keys     map[string]GatewayTally `json:"keys,omitempty"`
	Days     map[string]GatewayTally `json:"days"`
	Total    GatewayTally            `json:"total"`
}

// GatewayTally is one counter: its cost in micro-dollars, its calls and
// their tokens.
type GatewayTally struct {
	Micros int64      `json:"micros"`
	Calls  int64      `json:"calls"`
	Usage  TokenUsage `json:"usage"`
}

// TokenUsage is what calls consumed, in tokens. Input excludes the cached
// input tokens; CacheWrite counts those written to the prompt cache,
// billed as Input.
type TokenUsage struct {
	Input       int64 `json:"input_tokens"`
	CachedInput int64 `json:"cached_input_tokens"`
	CacheWrite  int64 `json:"cache_write_tokens,omitempty"`
	Output      int64 `json:"output_tokens"`
}

// ModelHealth is one model's slots and its deployments' health, by
// deployment name.
type ModelHealth struct {
	Slots       SlotStats                   `json:"slots"`
	Deployments map[string]DeploymentHealth `json:"deployments"`
}

// SlotStats are a model's calls running of its concurrency limit and calls
// queued of its queue bound.
type SlotStats struct {
	Capacity int `json:"capacity"`
	InFlight int `json:"in_flight"`
	Queued   int `json:"queued"`
	QueueMax int `json:"queue_max"`
}

// DeploymentHealth is a deployment's health; Requests and Failures count
// its calls in the health window.
type DeploymentHealth struct {
	Degraded bool      `json:"degraded"`
	Since    time.Time `json:"since,omitzero"`
	Reason   string    `json:"reason,omitempty"`
	Requests int       `json:"requests_in_window"`
	Failures int       `json:"failures_in_window"`
}

// GatewayUsage returns the gateway's cost counters (GET /v1/gateway/usage);
// with session set, Sessions holds that session alone. The route exists
// only on agents with a gateway block: elsewhere it is the API's 404.
func (c *Client) GatewayUsage(ctx context.Context, session string, opts ...CallOption) (GatewayUsage, error) {
	var query url.Values
	if session != "" {
		query = url.Values{"session": {session}}
	}
	var u GatewayUsage
	err := c.get(ctx, "/v1/gateway/usage", query, &u, opts)
	return u, err
}

// GatewayHealth returns each model's slots and deployments' health, by
// model, as the leader sees them (GET /v1/gateway/health); 404 without a
// gateway block.
func (c *Client) GatewayHealth(ctx context.Context, opts ...CallOption) (map[string]ModelHealth, error) {
	var h map[string]ModelHealth
	err := c.get(ctx, "/v1/gateway/health", nil, &h, opts)
	return h, err
}
