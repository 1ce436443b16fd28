package gateway

import "github.com/stickyd/stickyd/internal/gatewaywire"

// API keys and tenants as the admin API shows them (docs/gateway.md,
// "Keys and tenants"), and what a key reads of itself.
type (
	// APIKey is a key created through the admin API (its Hash is never
	// shown).
	APIKey = gatewaywire.APIKey
	// Tenant groups keys under an allowance of its own.
	Tenant = gatewaywire.Tenant
	// AllowancePatch changes the fields of an allowance it sets.
	AllowancePatch = gatewaywire.AllowancePatch
	// Account is a key's or a tenant's counters by day, month and model.
	Account = gatewaywire.Account
)

// KeyRequest asks the admin API for a new key (POST /v1/gateway/keys).
type KeyRequest struct {
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	Allowance
}

// NewKey answers a key's creation: the key, shown this once (the maps
// hold its hash), and its record.
type NewKey struct {
	Secret string `json:"secret"`
	Key    APIKey `json:"key"`
}

// KeyList answers GET /v1/gateway/keys.
type KeyList struct {
	Keys []APIKey `json:"keys"`
}

// TenantInfo is a tenant with its keys' count and what they spent.
type TenantInfo struct {
	Tenant
	Keys int     `json:"keys"`
	Cost Account `json:"cost"`
}

// TenantList answers GET /v1/gateway/tenants.
type TenantList struct {
	Tenants []TenantInfo `json:"tenants"`
	Source  string       `json:"source"`
}

// KeyUsage is what an API key reads of itself (GET /v1/gateway/usage on
// the gateway's listener, authenticated by the key): its counters in
// total, by day, month and model, its sessions, its budget and limits;
// nothing of any other key. Source is as UsageAnswer's.
type KeyUsage struct {
	Key      string           `json:"key"`
	Tenant   string           `json:"tenant,omitempty"`
	Total    Tally            `json:"total"`
	Days     map[string]Tally `json:"days"`
	Months   map[string]Tally `json:"months"`
	Models   map[string]Tally `json:"models"`
	Sessions map[string]Tally `json:"sessions"`
	// Budget is the key's own budget now (nil: it has none).
	Budget *BudgetState `json:"budget,omitempty"`
	Limits Limits       `json:"limits"`
	Source string       `json:"source"`
}

// BudgetState is a budget in its period now, in micro-dollars: its
// figure, what was spent, what the calls under way hold (their worst
// case, on the leader), and what is left for new calls (never below 0).
type BudgetState struct {
	Period      string `json:"period,omitempty"`
	LimitMicros int64  `json:"limit_micros"`
	SpentMicros int64  `json:"spent_micros"`
	HeldMicros  int64  `json:"held_micros"`
	LeftMicros  int64  `json:"left_micros"`
}
