package gatewaywire

import (
	"fmt"
	"slices"
	"time"
)

// API keys and tenants as the maps hold them (docs/gateway.md, "Keys and
// tenants"): a key created through the admin API is stored as its hash,
// never as itself; a tenant groups keys (a team, a customer) under limits
// of its own. Both carry an Allowance: a budget with its period, request
// and token rates, a concurrency bound and a list of models.

// The periods of a budget: over the key's or tenant's life, or per
// calendar day or month in the gateway's day_zone.
const (
	PeriodTotal = ""
	PeriodDay   = "day"
	PeriodMonth = "month"
)

// CheckPeriod refuses a period that is none of the three.
func CheckPeriod(p string) error {
	switch p {
	case PeriodTotal, PeriodDay, PeriodMonth:
		return nil
	}
	return fmt.Errorf("period %q: want %q, %q or none (over its life)", p, PeriodDay, PeriodMonth)
}

// Limits bound the calls of a key or a tenant; zero means no bound.
type Limits struct {
	// RPM bounds the calls admitted in any minute; TPM the tokens
	// (input, cached and output) of the calls that ended in it.
	RPM int   `json:"rpm,omitempty"`
	TPM int64 `json:"tpm,omitempty"`
	// Concurrency bounds the calls running at once.
	Concurrency int `json:"concurrency,omitempty"`
}

// Allowance is what a key or a tenant may spend and call.
type Allowance struct {
	// BudgetMicros is what it may spend in each Period, in micro-dollars
	// (0: no budget of its own).
	BudgetMicros int64  `json:"budget_micros,omitempty"`
	Period       string `json:"period,omitempty"`
	Limits
	// Models are the models it may call (empty: every model).
	Models []string `json:"models,omitempty"`
}

// Allows reports whether model is in the allowance's models.
func (a Allowance) Allows(model string) bool {
	return len(a.Models) == 0 || slices.Contains(a.Models, model)
}

// Check refuses an allowance that cannot be: a negative figure, an
// unknown period.
func (a Allowance) Check() error {
	if a.BudgetMicros < 0 || a.RPM < 0 || a.TPM < 0 || a.Concurrency < 0 {
		return fmt.Errorf("budget and limits must not be negative")
	}
	return CheckPeriod(a.Period)
}

// AllowancePatch changes the fields of an Allowance it sets (nil: kept).
type AllowancePatch struct {
	BudgetMicros *int64    `json:"budget_micros,omitempty"`
	Period       *string   `json:"period,omitempty"`
	RPM          *int      `json:"rpm,omitempty"`
	TPM          *int64    `json:"tpm,omitempty"`
	Concurrency  *int      `json:"concurrency,omitempty"`
	Models       *[]string `json:"models,omitempty"`
}

// Apply returns a with p's fields set.
func (p AllowancePatch) Apply(a Allowance) Allowance {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	if p.BudgetMicros != nil {
		a.BudgetMicros = *p.BudgetMicros
	}
	if p.Period != nil {
		a.Period = *p.Period
	}
	set(&a.RPM, p.RPM)
	set(&a.Concurrency, p.Concurrency)
	if p.TPM != nil {
		a.TPM = *p.TPM
	}
	if p.Models != nil {
		a.Models = slices.Clone(*p.Models)
	}
	return a
}

// Tenant groups API keys under an allowance of its own: a call of one of
// its keys must fit both the key's and the tenant's.
type Tenant struct {
	Name string `json:"name"`
	Allowance
	Created time.Time `json:"created"`
}

// APIKey is an API key created through the admin API, as the maps hold
// it: its SHA-256, never the key itself (the key is shown once, when it
// is created).
type APIKey struct {
	// Name names the key in the counters and in its sessions
	// ("name/session"); Tenant is the tenant it belongs to ("" none).
	Name   string `json:"name"`
	Tenant string `json:"tenant,omitempty"`
	// Hash is the key's SHA-256, in hex; Hint its last four characters,
	// to tell keys apart in a listing.
	Hash string `json:"hash,omitempty"`
	Hint string `json:"hint"`
	Allowance
	Created time.Time `json:"created"`
}

// Scope is one counter a budget holds: a session's, the gateway's day's,
// or an API key's or tenant's, over its life (Period "") or one calendar
// day (Period "day", Bucket "2026-12-06") or month ("month", "2026-12").
type Scope struct {
	Kind   ScopeKind `json:"kind"`
	Name   string    `json:"name"`
	Period string    `json:"period,omitempty"`
	Bucket string    `json:"bucket,omitempty"`
}

// ScopeKind is what a Scope counts.
type ScopeKind string

// The kinds of scope; a ScopeDay's Name is the day.
const (
	ScopeSession ScopeKind = "session"
	ScopeDay     ScopeKind = "day"
	ScopeKey     ScopeKind = "key"
	ScopeTenant  ScopeKind = "tenant"
)

// PeriodScope is the scope of a key's or a tenant's budget over period
// on day (YYYY-MM-DD, the gateway's calendar).
func PeriodScope(kind ScopeKind, name, period, day string) Scope {
	s := Scope{Kind: kind, Name: name, Period: period}
	switch period {
	case PeriodDay:
		s.Bucket = day
	case PeriodMonth:
		s.Bucket = MonthOf(day)
	}
	return s
}

// MonthOf is the month (YYYY-MM) of a day (YYYY-MM-DD).
func MonthOf(day string) string {
	if len(day) < 7 {
		return day
	}
	return day[:7]
}

// In reports whether the charge counts in scope s.
func (ch *Charge) In(s Scope) bool { return inScope(s, ch.Session, ch.Key, ch.Tenant, ch.Day) }

// In reports whether the reservation counts in scope s.
func (r *Reservation) In(s Scope) bool { return inScope(s, r.Session, r.Key, r.Tenant, r.Day) }

// inScope reports whether what a call of session, key, tenant on day
// costs counts in scope s.
func inScope(s Scope, session, key, tenant, day string) bool {
	var name string
	switch s.Kind {
	case ScopeSession:
		return session == s.Name
	case ScopeDay:
		return day == s.Name
	case ScopeKey:
		name = key
	case ScopeTenant:
		name = tenant
	default:
		return false
	}
	if name == "" || name != s.Name {
		return false
	}
	switch s.Period {
	case PeriodDay:
		return day == s.Bucket
	case PeriodMonth:
		return MonthOf(day) == s.Bucket
	}
	return true
}

// Reservation holds a call's worst-case cost against its budgets from
// before the call starts until it is settled (its charge names it), it
// is released (the call ended without a charge), or Expires passes (the
// call cannot run past it: a reservation whose server died with its call
// does not hold the budget for ever).
type Reservation struct {
	ID string `json:"id"`
	// Ledger is the ledger that took it (a server process).
	Ledger  string    `json:"ledger,omitempty"`
	Session string    `json:"session"`
	Key     string    `json:"key,omitempty"`
	Tenant  string    `json:"tenant,omitempty"`
	Day     string    `json:"day"`
	Model   string    `json:"model"`
	Micros  int64     `json:"micros"`
	Expires time.Time `json:"expires"`
}

// CheckName refuses a key's or a tenant's name that is empty, longer than
// 64 characters, or has characters other than letters, digits, '.', '_'
// and '-' (a key's sessions are "name/session").
func CheckName(what, name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%s name %q: want 1 to 64 characters", what, name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%s name %q: only letters, digits, '.', '_' and '-'", what, name)
		}
	}
	return nil
}
