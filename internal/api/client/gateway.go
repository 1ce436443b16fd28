package client

import (
	"context"
	"net/http"
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
	// KeyAccounts are the API keys' counters by day, month and model;
	// Tenants the tenants'.
	KeyAccounts map[string]GatewayAccount `json:"key_accounts,omitempty"`
	Tenants     map[string]GatewayAccount `json:"tenants,omitempty"`
}

// GatewayAccount is a key's or a tenant's counters: in total, by day
// (YYYY-MM-DD), month (YYYY-MM) and model.
type GatewayAccount struct {
	Total  GatewayTally            `json:"total"`
	Days   map[string]GatewayTally `json:"days,omitempty"`
	Months map[string]GatewayTally `json:"months,omitempty"`
	Models map[string]GatewayTally `json:"models,omitempty"`
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

// GatewayKey is an API key created through the admin API, as the API
// shows it: never the key itself nor its hash, only its last four
// characters (Hint). A budget of 0 is none (the gateway's key_budget
// then holds); Period is "day", "month" or "" (over its life); a limit of
// 0 is none; no Models means every model.
type GatewayKey struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	// Hash is never sent by the API.
	Hash         string    `json:"hash,omitempty"`
	Hint         string    `json:"hint"`
	BudgetMicros int64     `json:"budget_micros,omitempty"`
	Period       string    `json:"period,omitempty"`
	RPM          int       `json:"rpm,omitempty"`
	TPM          int64     `json:"tpm,omitempty"`
	Concurrency  int       `json:"concurrency,omitempty"`
	Models       []string  `json:"models,omitempty"`
	Created      time.Time `json:"created"`
}

// GatewayKeyRequest asks for a new key (its allowance as GatewayKey's).
type GatewayKeyRequest struct {
	Name         string   `json:"name"`
	Tenant       string   `json:"tenant,omitempty"`
	BudgetMicros int64    `json:"budget_micros,omitempty"`
	Period       string   `json:"period,omitempty"`
	RPM          int      `json:"rpm,omitempty"`
	TPM          int64    `json:"tpm,omitempty"`
	Concurrency  int      `json:"concurrency,omitempty"`
	Models       []string `json:"models,omitempty"`
}

// GatewayNewKey is a new key: Secret is the key, shown this once.
type GatewayNewKey struct {
	Secret string     `json:"secret"`
	Key    GatewayKey `json:"key"`
}

// GatewayKeyList is the created keys, by name.
type GatewayKeyList struct {
	Keys []GatewayKey `json:"keys"`
}

// GatewayTenant is a tenant: keys grouped under an allowance of their
// own (as GatewayKey's).
type GatewayTenant struct {
	Name         string    `json:"name"`
	BudgetMicros int64     `json:"budget_micros,omitempty"`
	Period       string    `json:"period,omitempty"`
	RPM          int       `json:"rpm,omitempty"`
	TPM          int64     `json:"tpm,omitempty"`
	Concurrency  int       `json:"concurrency,omitempty"`
	Models       []string  `json:"models,omitempty"`
	Created      time.Time `json:"created"`
}

// GatewayTenantInfo is a tenant with its keys' count and what they
// spent.
type GatewayTenantInfo struct {
	GatewayTenant
	Keys int            `json:"keys"`
	Cost GatewayAccount `json:"cost"`
}

// GatewayTenantList is the tenants, by name; Source is as
// GatewayUsage's.
type GatewayTenantList struct {
	Tenants []GatewayTenantInfo `json:"tenants"`
	Source  string              `json:"source"`
}

// GatewayAllowancePatch changes what it sets of a tenant (nil: kept).
type GatewayAllowancePatch struct {
	BudgetMicros *int64    `json:"budget_micros,omitempty"`
	Period       *string   `json:"period,omitempty"`
	RPM          *int      `json:"rpm,omitempty"`
	TPM          *int64    `json:"tpm,omitempty"`
	Concurrency  *int      `json:"concurrency,omitempty"`
	Models       *[]string `json:"models,omitempty"`
}

// GatewayKeys lists the created keys (GET /v1/gateway/keys).
func (c *Client) GatewayKeys(ctx context.Context, opts ...CallOption) (GatewayKeyList, error) {
	var l GatewayKeyList
	err := c.get(ctx, "/v1/gateway/keys", nil, &l, opts)
	return l, err
}

// CreateGatewayKey creates a key (POST /v1/gateway/keys); the answer
// holds the key, which nothing shows again.
func (c *Client) CreateGatewayKey(ctx context.Context, req GatewayKeyRequest, opts ...CallOption) (GatewayNewKey, error) {
	var k GatewayNewKey
	err := c.decode(ctx, http.MethodPost, "/v1/gateway/keys", nil, req, &k, opts)
	return k, err
}

// RevokeGatewayKey revokes a created key (DELETE /v1/gateway/keys/NAME):
// its calls are refused from then on.
func (c *Client) RevokeGatewayKey(ctx context.Context, name string, opts ...CallOption) error {
	return c.decode(ctx, http.MethodDelete, "/v1/gateway/keys/"+url.PathEscape(name), nil, nil, nil, opts)
}

// GatewayTenants lists the tenants (GET /v1/gateway/tenants).
func (c *Client) GatewayTenants(ctx context.Context, opts ...CallOption) (GatewayTenantList, error) {
	var l GatewayTenantList
	err := c.get(ctx, "/v1/gateway/tenants", nil, &l, opts)
	return l, err
}

// CreateGatewayTenant creates a tenant (POST /v1/gateway/tenants).
func (c *Client) CreateGatewayTenant(ctx context.Context, t GatewayTenant, opts ...CallOption) (GatewayTenant, error) {
	var out GatewayTenant
	err := c.decode(ctx, http.MethodPost, "/v1/gateway/tenants", nil, t, &out, opts)
	return out, err
}

// SetGatewayTenant changes what p sets of a tenant (PATCH
// /v1/gateway/tenants/NAME) and returns it.
func (c *Client) SetGatewayTenant(ctx context.Context, name string, p GatewayAllowancePatch, opts ...CallOption) (GatewayTenant, error) {
	var out GatewayTenant
	err := c.decode(ctx, http.MethodPatch, "/v1/gateway/tenants/"+url.PathEscape(name), nil, p, &out, opts)
	return out, err
}

// DeleteGatewayTenant deletes a tenant without keys (DELETE
// /v1/gateway/tenants/NAME).
func (c *Client) DeleteGatewayTenant(ctx context.Context, name string, opts ...CallOption) error {
	return c.decode(ctx, http.MethodDelete, "/v1/gateway/tenants/"+url.PathEscape(name), nil, nil, nil, opts)
}
