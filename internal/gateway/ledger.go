package gateway

import (
	"context"
	"sync"
)

// Counters are the cost counters: per session, per calendar day and in
// total, in micro-dollars, with the tokens behind them.
type Counters struct {
	Sessions map[string]Tally `json:"sessions"`
	Days     map[string]Tally `json:"days"`
	Total    Tally            `json:"total"`
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
	c.Days[ch.Day] = add(c.Days[ch.Day])
	c.Total = add(c.Total)
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
func (l *MemLedger) Spent(session, day string) (int64, int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Sessions[session].Micros, l.c.Days[day].Micros
}

// Counters returns a copy of the counters.
func (l *MemLedger) Counters() Counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.c.Clone()
}
