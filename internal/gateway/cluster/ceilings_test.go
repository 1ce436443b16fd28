package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Ceilings: a call within its scopes' ceilings writes nothing; one past
// them waits for one entry that raises them (twice what the scope holds,
// within the budget's room); a release writes nothing; a new leader counts
// the old one's ceilings whole until they lapse.
func TestRaftLedgerCeilings(t *testing.T) {
	maps := fsm.New()
	var mu sync.Mutex
	var idx uint64
	ctx := context.Background()
	key := gatewaywire.Scope{Kind: gatewaywire.ScopeKey, Name: "k"}
	budget := []gateway.Budget{{Scope: key, Limit: 1000, Label: `API key "k"`}}
	resv := func(id string, micros int64, bound time.Duration) gateway.Reservation {
		return gateway.Reservation{ID: id, Session: "k", Key: "k", Day: "2026-12-07", Micros: micros, Expires: time.Now().Add(bound)}
	}
	old, _ := ledgerWith(t, "s1", maps, &mu, &idx, 300*time.Millisecond)
	writes := func() uint64 {
		old.mu.Lock()
		defer old.mu.Unlock()
		return old.ceilWrites
	}
	ceilingOf := func(l *raftLedger) int64 {
		c := maps.GatewayCeilingsOf(l.id)
		if len(c) != 1 || c[0].Scope != key {
			t.Fatalf("ceilings %+v", c)
		}
		return c[0].Micros
	}
	if err := old.Reserve(ctx, resv("r1", 100, 200*time.Millisecond), budget); err != nil {
		t.Fatal(err)
	}
	if w, c := writes(), ceilingOf(old); w != 1 || c != 500 {
		t.Fatalf("after the first call: %d entries, ceiling %d (want 1, 100 and 4 more calls' worth)", w, c)
	}
	for i := 2; i <= 5; i++ {
		if err := old.Reserve(ctx, resv(fmt.Sprint("r", i), 100, 200*time.Millisecond), budget); err != nil {
			t.Fatal(err)
		}
	}
	if w := writes(); w != 1 {
		t.Fatalf("calls within the ceiling wrote %d entries", w)
	}
	if err := old.Reserve(ctx, resv("r6", 100, 200*time.Millisecond), budget); err != nil {
		t.Fatal(err)
	}
	if w, c := writes(), ceilingOf(old); w != 2 || c != 1000 {
		t.Fatalf("past the ceiling: %d entries, ceiling %d (want 2, the budget's whole room)", w, c)
	}
	old.Release("r6")
	if w := writes(); w != 2 || len(maps.GatewayReservations()) != 0 {
		t.Fatalf("a release wrote an entry")
	}
	// A settled call's charge counts in its scope's ceiling until the
	// log applies it.
	if err := old.Add(ctx, gateway.Charge{Request: "c1", Session: "k", Key: "k", Day: "2026-12-07", Micros: 90, Reservation: "r1"}); err != nil {
		t.Fatal(err)
	}
	// Another server leads: the old ceilings count whole until they lapse
	// (renewed while used within the slack, for the calls' bound and the
	// slack: at most 0.8 s).
	leader, _ := ledgerWith(t, "s2", maps, &mu, &idx, 300*time.Millisecond)
	if err := leader.Reserve(ctx, resv("n1", 1, time.Second), budget); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("the new leader does not count the old one's ceiling: %v", err)
	}
	time.Sleep(time.Second)
	// Spent 90; the old calls ended (their reservations expired): 910 fit.
	if err := leader.Reserve(ctx, resv("n1", 910, time.Second), budget); err != nil {
		t.Fatalf("after the old ceiling lapsed: %v", err)
	}
	if err := leader.Reserve(ctx, resv("n2", 1, time.Second), budget); !errors.Is(err, gateway.ErrBudget) {
		t.Fatalf("past the budget: %v", err)
	}
}

// Budgets never overshoot under ceilings: calls reserved through three
// ledgers taking turns at leading, settled at a random share of their
// worst case, released or left to expire; after every step, what the log
// has spent and every ledger's charges not applied and calls under way
// hold stays within the budget.
func TestCeilingsNeverOvershoot(t *testing.T) {
	maps := fsm.New()
	var mu sync.Mutex
	var idx uint64
	ctx := context.Background()
	const limit = 50_000
	key := gatewaywire.Scope{Kind: gatewaywire.ScopeKey, Name: "k"}
	budget := []gateway.Budget{{Scope: key, Limit: limit, Label: `API key "k"`}}
	var ls []*raftLedger
	for i := range 3 {
		l, _ := ledgerWith(t, fmt.Sprint("s", i+1), maps, &mu, &idx, 100*time.Millisecond)
		ls = append(ls, l)
	}
	type call struct {
		l *raftLedger
		r gateway.Reservation
	}
	var live []call
	rng := rand.New(rand.NewPCG(7, 46))
	leader, admitted, refused, n := 0, 0, 0, 0
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		n++
		switch x := rng.IntN(100); {
		case x < 1:
			leader = rng.IntN(len(ls))
		case x < 55:
			n := fmt.Sprint("r", n)
			r := gateway.Reservation{ID: n, Session: "k", Key: "k", Day: "2026-12-07", Micros: 10 + rng.Int64N(300),
				Expires: time.Now().Add(time.Duration(20+rng.IntN(200)) * time.Millisecond)}
			switch err := ls[leader].Reserve(ctx, r, budget); {
			case err == nil:
				admitted++
				live = append(live, call{ls[leader], r})
			case errors.Is(err, gateway.ErrBudget):
				refused++
			default:
				t.Fatal(err)
			}
		case len(live) > 0:
			i := rng.IntN(len(live))
			c := live[i]
			live = append(live[:i], live[i+1:]...)
			switch {
			case !time.Now().Before(c.r.Expires):
				// Cut at its bound: nothing to charge.
			case x < 90:
				ch := gateway.Charge{Request: "c" + c.r.ID, Session: "k", Key: "k", Day: "2026-12-07", Micros: rng.Int64N(c.r.Micros + 1), Reservation: c.r.ID}
				if err := c.l.Add(ctx, ch); err != nil {
					t.Fatal(err)
				}
			default:
				c.l.Release(c.r.ID)
			}
		}
		// What is spent or may still be: the log's, every ledger's
		// charges it has not applied and its calls under way.
		spent, _ := maps.GatewaySpentIn([]gatewaywire.Scope{key}, "")
		total := spent[0]
		now := time.Now()
		for _, l := range ls {
			l.mu.Lock()
			_, applied := maps.GatewaySpentIn(nil, l.id)
			for _, ch := range l.unappliedLocked(applied) {
				total += ch.Micros
			}
			l.mu.Unlock()
		}
		for _, c := range live {
			if now.Before(c.r.Expires) {
				total += c.r.Micros
			}
		}
		if total > limit {
			t.Fatalf("step %d: %d spent or held of %d", n, total, limit)
		}
		time.Sleep(500 * time.Microsecond)
	}
	if admitted < 200 || refused < 20 {
		t.Fatalf("%d admitted, %d refused in %d steps: the test did not press the budget", admitted, refused, n)
	}
	t.Logf("%d steps: %d calls admitted, %d refused", n, admitted, refused)
}
