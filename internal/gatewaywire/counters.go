package gatewaywire

import (
	"maps"
	"slices"
)

// Counters are the cost counters: per session, per calendar day and in
// total, in micro-dollars, with the tokens behind them.
type Counters struct {
	Sessions map[string]Tally `json:"sessions"`
	// Keys are the API keys' counters, by the key's name.
	Keys  map[string]Tally `json:"keys,omitempty"`
	Days  map[string]Tally `json:"days"`
	Total Tally            `json:"total"`
	// KeyAccounts are the API keys' counters by day, month and model, by
	// the key's name (from the charges since keys have them); Tenants
	// the tenants'.
	KeyAccounts map[string]Account `json:"key_accounts,omitempty"`
	Tenants     map[string]Account `json:"tenants,omitempty"`
}

// Account is a key's or a tenant's counters: in total, by calendar day
// (YYYY-MM-DD) and month (YYYY-MM) of the gateway's day_zone, and by
// model. It keeps the newest MaxAccountDays days and MaxAccountMonths
// months.
type Account struct {
	Total  Tally            `json:"total"`
	Days   map[string]Tally `json:"days,omitempty"`
	Months map[string]Tally `json:"months,omitempty"`
	Models map[string]Tally `json:"models,omitempty"`
}

// How many days and months an Account keeps: the replicated state stays
// bounded however long a key lives.
const (
	MaxAccountDays   = 93
	MaxAccountMonths = 25
)

// add counts a charge in the account.
func (a Account) add(ch Charge) Account {
	a.Total = a.Total.add(ch)
	a.Days = addTo(a.Days, ch.Day, ch, MaxAccountDays)
	a.Months = addTo(a.Months, MonthOf(ch.Day), ch, MaxAccountMonths)
	a.Models = addTo(a.Models, ch.Model, ch, 0)
	return a
}

// addTo counts ch under name in m (made if nil) and, past keep names
// (0: no bound), forgets the smallest: the oldest day or month.
func addTo(m map[string]Tally, name string, ch Charge, keep int) map[string]Tally {
	if m == nil {
		m = map[string]Tally{}
	}
	m[name] = m[name].add(ch)
	if keep > 0 && len(m) > keep {
		delete(m, slices.Min(slices.Collect(maps.Keys(m))))
	}
	return m
}

// clone deep-copies the account.
func (a Account) clone() Account {
	a.Days, a.Months, a.Models = maps.Clone(a.Days), maps.Clone(a.Months), maps.Clone(a.Models)
	return a
}

// add counts a charge in the tally.
func (t Tally) add(ch Charge) Tally {
	t.Micros += ch.Micros
	t.Calls++
	t.Usage = t.Usage.Add(ch.Usage)
	return t
}

// Tally is one counter: its cost, its calls and their tokens.
type Tally struct {
	Micros int64 `json:"micros"`
	Calls  int64 `json:"calls"`
	Usage  Usage `json:"usage"`
}

// Charge is one answer's cost, as the ledger records it.
type Charge struct {
	// Request names the call (its idempotency key): a charge recorded
	// twice for one request counts once.
	Request string `json:"request"`
	Session string `json:"session"`
	// Key is the name of the API key the call came with ("" for calls
	// from workers and from a gateway without keys); Tenant the key's
	// tenant ("" none).
	Key        string `json:"key,omitempty"`
	Tenant     string `json:"tenant,omitempty"`
	Day        string `json:"day"`
	Model      string `json:"model"`
	Deployment string `json:"deployment"`
	Usage      Usage  `json:"usage"`
	Micros     int64  `json:"micros"`
	// Reservation is the reservation the charge settles ("" none): it
	// is released as the charge is counted.
	Reservation string `json:"reservation,omitempty"`
}

// Spend is what a call's payers have spent, in micro-dollars.
type Spend struct {
	Session, Day, Key int64
}

// Apply adds a charge to the counters. It counts every charge it is given:
// skipping a request already charged is the caller's work (MemLedger's
// seen set in internal/gateway, the ledgers' batch marks in the maps).
func (c *Counters) Apply(ch Charge) {
	if c.Sessions == nil {
		c.Sessions = map[string]Tally{}
	}
	if c.Days == nil {
		c.Days = map[string]Tally{}
	}
	c.Sessions[ch.Session] = c.Sessions[ch.Session].add(ch)
	if ch.Key != "" {
		if c.Keys == nil {
			c.Keys = map[string]Tally{}
		}
		c.Keys[ch.Key] = c.Keys[ch.Key].add(ch)
		if c.KeyAccounts == nil {
			c.KeyAccounts = map[string]Account{}
		}
		c.KeyAccounts[ch.Key] = c.KeyAccounts[ch.Key].add(ch)
	}
	if ch.Tenant != "" {
		if c.Tenants == nil {
			c.Tenants = map[string]Account{}
		}
		c.Tenants[ch.Tenant] = c.Tenants[ch.Tenant].add(ch)
	}
	c.Days[ch.Day] = c.Days[ch.Day].add(ch)
	c.Total = c.Total.add(ch)
}

// SpentIn is what the charges counted in scope s have spent.
func (c *Counters) SpentIn(s Scope) int64 {
	var a Account
	switch s.Kind {
	case ScopeSession:
		return c.Sessions[s.Name].Micros
	case ScopeDay:
		return c.Days[s.Name].Micros
	case ScopeKey:
		if s.Period == PeriodTotal {
			return c.Keys[s.Name].Micros
		}
		a = c.KeyAccounts[s.Name]
	case ScopeTenant:
		a = c.Tenants[s.Name]
	default:
		return 0
	}
	switch s.Period {
	case PeriodDay:
		return a.Days[s.Bucket].Micros
	case PeriodMonth:
		return a.Months[s.Bucket].Micros
	}
	return a.Total.Micros
}

// Spent returns what session, day and key have spent.
func (c *Counters) Spent(session, day, key string) Spend {
	s := Spend{Session: c.Sessions[session].Micros, Day: c.Days[day].Micros}
	if key != "" {
		s.Key = c.Keys[key].Micros
	}
	return s
}

// Add adds the charges to the spend of session, day and key.
func (s Spend) Add(session, day, key string, charges ...Charge) Spend {
	for _, c := range charges {
		if c.Session == session {
			s.Session += c.Micros
		}
		if c.Day == day {
			s.Day += c.Micros
		}
		if key != "" && c.Key == key {
			s.Key += c.Micros
		}
	}
	return s
}

// Clone returns a deep copy.
func (c *Counters) Clone() Counters {
	out := Counters{Sessions: make(map[string]Tally, len(c.Sessions)), Days: make(map[string]Tally, len(c.Days)), Total: c.Total}
	for k, v := range c.Sessions {
		out.Sessions[k] = v
	}
	for k, v := range c.Days {
		out.Days[k] = v
	}
	if c.Keys != nil {
		out.Keys = make(map[string]Tally, len(c.Keys))
		for k, v := range c.Keys {
			out.Keys[k] = v
		}
	}
	out.KeyAccounts, out.Tenants = cloneAccounts(c.KeyAccounts), cloneAccounts(c.Tenants)
	return out
}

func cloneAccounts(m map[string]Account) map[string]Account {
	if m == nil {
		return nil
	}
	out := make(map[string]Account, len(m))
	for k, a := range m {
		out[k] = a.clone()
	}
	return out
}
