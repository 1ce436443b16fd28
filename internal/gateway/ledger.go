package gateway

import (
	"context"
	"sync"
)

// UsageAnswer is the admin API's answer of GET /v1/gateway/usage: the
// counters and where they come from, "leader" (the leader's ledger, every
// finished call counted) or "replica" (an agent's copy of the replicated
// maps, when the leader cannot be asked).
type UsageAnswer struct {
	Counters
	Source string `json:"source"`
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
