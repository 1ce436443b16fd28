package cluster

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// The sums read what walking the charges with Charge.In reads, in every
// kind of scope, as charges are counted and taken back in any order; and
// they leave nothing behind once every charge is taken back.
func TestChargeSumsAsIn(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(opts ...string) string { return opts[rng.IntN(len(opts))] }
	days := []string{"2026-11-30", "2026-12-01", "2026-12-07"}
	var scopes []gateway.Scope
	for _, name := range []string{"k1", "k2", "", "t1"} {
		for _, kind := range []gatewaywire.ScopeKind{gatewaywire.ScopeKey, gatewaywire.ScopeTenant} {
			scopes = append(scopes, gateway.Scope{Kind: kind, Name: name})
			for _, d := range days {
				scopes = append(scopes, gatewaywire.PeriodScope(kind, name, gatewaywire.PeriodDay, d), gatewaywire.PeriodScope(kind, name, gatewaywire.PeriodMonth, d))
			}
		}
	}
	for _, d := range days {
		scopes = append(scopes, gateway.Scope{Kind: gatewaywire.ScopeDay, Name: d})
	}
	for _, s := range []string{"k1", "k1/a", "w"} {
		scopes = append(scopes, gateway.Scope{Kind: gatewaywire.ScopeSession, Name: s})
	}
	var sums chargeSums
	var live []gateway.Charge
	for step := range 3000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(live))
			sums.add(&live[i], -1)
			live = append(live[:i], live[i+1:]...)
		} else {
			c := gateway.Charge{Request: fmt.Sprint(step), Session: pick("k1", "k1/a", "w"), Key: pick("k1", "k2", ""), Tenant: pick("t1", ""),
				Day: pick(days...), Micros: 1 + rng.Int64N(1000)}
			sums.add(&c, 1)
			live = append(live, c)
		}
		for _, s := range scopes {
			var want int64
			for i := range live {
				if live[i].In(s) {
					want += live[i].Micros
				}
			}
			if got := sums.in(s); got != want {
				t.Fatalf("step %d, scope %+v: sums %d, walking %d", step, s, got, want)
			}
		}
	}
	for i := range live {
		sums.add(&live[i], -1)
	}
	if n := len(sums.session) + len(sums.day) + len(sums.key) + len(sums.keyDay) + len(sums.keyMonth) + len(sums.tenant) + len(sums.tenantDay) + len(sums.tenantMonth); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}
