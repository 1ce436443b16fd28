package fsm

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// GatewayCeilingsRequestType records ceilings of a ledger's budget holds
// (docs/gateway.md, "Budgets that never overshoot").
const GatewayCeilingsRequestType MessageType = 30

// The ceilings of the budgets' holds. The leader's ledger holds its calls'
// reservations in memory, each under a ceiling per budget scope that it
// has written here before the call starts; it writes a ceiling only when
// its calls' reservations would pass it or outlast it, so a call within
// its scopes' ceilings writes nothing. A ceiling holds until its Until,
// past the bound of every call started under it (the ledger renews the
// ceilings of the scopes it still uses). A new leader counts the ceilings
// of every other ledger as held until then: after a change it may refuse
// more than it must for a while, never let a budget overshoot.

// GatewayScopeCeiling is the most a ledger's calls under way may hold in
// one budget scope, until Until.
type GatewayScopeCeiling struct {
	Scope  gatewaywire.Scope `json:"scope"`
	Micros int64             `json:"micros"`
	Until  time.Time         `json:"until"`
}

// GatewayCeilingsRequest sets ceilings of ledger Ledger at At, the
// leader's clock (a ceiling whose Until is not after At drops the scope's);
// every ceiling past its Until at At leaves the maps.
type GatewayCeilingsRequest struct {
	Ledger string                `json:"ledger"`
	At     time.Time             `json:"at"`
	Set    []GatewayScopeCeiling `json:"set,omitempty"`
}

// ceiling is one scope's ceiling in the index.
type ceiling struct {
	micros int64
	until  time.Time
}

func (f *FSM) applyGatewayCeilings(buf body) interface{} {
	var req GatewayCeilingsRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding gateway budget ceilings: %w", err)
	}
	if req.Ledger == "" {
		return fmt.Errorf("gateway budget ceilings without a ledger")
	}
	g := f.gatewayLocked()
	for ledger, scopes := range g.ceilIdx {
		for s, c := range scopes {
			if !c.until.After(req.At) {
				delete(scopes, s)
			}
		}
		if len(scopes) == 0 {
			delete(g.ceilIdx, ledger)
		}
	}
	for _, c := range req.Set {
		scopes := g.ceilIdx[req.Ledger]
		if !c.Until.After(req.At) {
			delete(scopes, c.Scope)
			continue
		}
		if scopes == nil {
			scopes = map[gatewaywire.Scope]ceiling{}
			g.ceilIdx[req.Ledger] = scopes
		}
		scopes[c.Scope] = ceiling{micros: c.Micros, until: c.Until}
	}
	if len(g.ceilIdx[req.Ledger]) == 0 {
		delete(g.ceilIdx, req.Ledger)
	}
	return nil
}

// GatewayCeilingsIn returns, for each of scopes, the sum of the ceilings
// of the ledgers other than ledger that hold at now.
func (f *FSM) GatewayCeilingsIn(scopes []gatewaywire.Scope, ledger string, now time.Time) []int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]int64, len(scopes))
	g := f.state.Gateway
	if g == nil {
		return out
	}
	for l, idx := range g.ceilIdx {
		if l == ledger {
			continue
		}
		for i, s := range scopes {
			if c, ok := idx[s]; ok && c.until.After(now) {
				out[i] += c.micros
			}
		}
	}
	return out
}

// GatewayCeilingsOf returns ledger's ceilings, by scope.
func (f *FSM) GatewayCeilingsOf(ledger string) []GatewayScopeCeiling {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if g := f.state.Gateway; g != nil {
		return flattenCeilings(g.ceilIdx)[ledger]
	}
	return nil
}

// flattenCeilings is the index as a snapshot keeps it.
func flattenCeilings(idx map[string]map[gatewaywire.Scope]ceiling) map[string][]GatewayScopeCeiling {
	if len(idx) == 0 {
		return nil
	}
	out := make(map[string][]GatewayScopeCeiling, len(idx))
	for ledger, scopes := range idx {
		list := make([]GatewayScopeCeiling, 0, len(scopes))
		for s, c := range scopes {
			list = append(list, GatewayScopeCeiling{Scope: s, Micros: c.micros, Until: c.until})
		}
		slices.SortFunc(list, func(a, b GatewayScopeCeiling) int {
			return cmp.Or(cmp.Compare(a.Scope.Kind, b.Scope.Kind), cmp.Compare(a.Scope.Name, b.Scope.Name),
				cmp.Compare(a.Scope.Period, b.Scope.Period), cmp.Compare(a.Scope.Bucket, b.Scope.Bucket))
		})
		out[ledger] = list
	}
	return out
}

// indexCeilings is a snapshot's ceilings as the index keeps them.
func indexCeilings(in map[string][]GatewayScopeCeiling) map[string]map[gatewaywire.Scope]ceiling {
	idx := make(map[string]map[gatewaywire.Scope]ceiling, len(in))
	for ledger, list := range in {
		scopes := make(map[gatewaywire.Scope]ceiling, len(list))
		for _, c := range list {
			scopes[c.Scope] = ceiling{micros: c.Micros, until: c.Until}
		}
		idx[ledger] = scopes
	}
	return idx
}
