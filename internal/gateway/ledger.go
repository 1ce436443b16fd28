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

// MemLedger is a Ledger in memory, for one node alone (and tests). Its
// reservations hold until they are settled or released.
type MemLedger struct {
	mu   sync.Mutex // guards c, seen and held
	c    Counters
	seen map[string]bool
	held map[string]Reservation
}

var _ Ledger = (*MemLedger)(nil)

// NewMemLedger returns an empty ledger.
func NewMemLedger() *MemLedger {
	return &MemLedger{seen: map[string]bool{}, held: map[string]Reservation{}}
}

// Add implements Ledger.
func (l *MemLedger) Add(_ context.Context, ch Charge) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[ch.Request] {
		return nil
	}
	l.seen[ch.Request] = true
	l.c.Apply(ch)
	delete(l.held, ch.Reservation)
	return nil
}

// Check implements Ledger.
func (l *MemLedger) Check(budgets []Budget) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return FitBudgets(budgets, 0, l.spentInLocked)
}

// Reserve implements Ledger.
func (l *MemLedger) Reserve(_ context.Context, r Reservation, budgets []Budget) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := FitBudgets(budgets, r.Micros, l.spentInLocked); err != nil {
		return err
	}
	l.held[r.ID] = r
	return nil
}

// Release implements Ledger.
func (l *MemLedger) Release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.held, id)
}

// Held returns the reservations held now.
func (l *MemLedger) Held() []Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Reservation, 0, len(l.held))
	for _, r := range l.held {
		out = append(out, r)
	}
	return out
}

func (l *MemLedger) spentInLocked(s Scope) (spent, held int64) {
	for _, r := range l.held {
		if r.In(s) {
			held += r.Micros
		}
	}
	return l.c.SpentIn(s), held
}

// Spent returns what session, day and API key have spent.
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
