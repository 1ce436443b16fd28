package gateway

import (
	"context"
	"sync"
)

// Counters are the cost counters: per session, per calendar day and in
// total, in micro-dollars, with the tokens behind them.
type Counters struct {
	Sessions map[string]Tally `json:"sessions"`
	// Keys are the API keys' counters, by the key's name.
	Keys  map[string]Tally `json:"keys,omitempty"`
	Days  map[string]Tally `json:"days"`
	Total Tally            `json:"total"`
}

// UsageAnswer is the admin API's answer of GET /v1/gateway/usage: the
// counters and where they come from, "leader" (the leader's ledger, every
// finished call counted) or "replica" (an agent's copy of the replicated
// maps, when the leader cannot be asked).
type UsageAnswer struct {
	Counters
	Source string `json:"source"`
}

// Tally is one counter: its cost, its calls and their tokens.
type Tally struct {
	Micros int64 `json:"micros"`
	Calls  int64 `json:"calls"`
	Usage  Usage `json:"usage"`
}

// Apply adds a charge to the counters; a request already charged is not
// counted again (seen says so, and records it).
func (c *Counters) Apply(ch Charge) {
	if c.Sessions == nil {
		c.Sessions = map[string]Tally{}
	}
	if c.Days == nil {
		c.Days = map[string]Tally{}
	}
	add := func(t Tally) Tally {
		t.Micros += ch.Micros
		t.Calls++
		t.Usage = t.Usage.Add(ch.Usage)
		return t
	}
	c.Sessions[ch.Session] = add(c.Sessions[ch.Session])
	if ch.Key != "" {
		if c.Keys == nil {
			c.Keys = map[string]Tally{}
		}
		c.Keys[ch.Key] = add(c.Keys[ch.Key])
	}
	c.Days[ch.Day] = add(c.Days[ch.Day])
	c.Total = add(c.Total)
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
	return out
}

// MemLedger is a Ledger in memory, for one node alone (and tests).
type MemLedger struct {
	mu   sync.Mutex // guards c and seen
	c    Counters
	seen map[string]bool
}

// NewMemLedger returns an empty ledger.
func NewMemLedger() *MemLedger { return &MemLedger{seen: map[string]bool{}} }

// Add implements Ledger.
func (l *MemLedger) Add(_ context.Context, ch Charge) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[ch.Request] {
		return nil
	}
	l.seen[ch.Request] = true
	l.c.Apply(ch)
	return nil
}

// Spent implements Ledger.
func (l *MemLedger) Spent(session, day, key string) Spend {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Spent(session, day, key)
}

// Counters returns a copy of the counters.
func (l *MemLedger) Counters() Counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Clone()
}
