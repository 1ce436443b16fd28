package fsm

import (
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Ceilings: set by their ledger scope by scope, summed over the other
// ledgers, read as nothing once past their Until, dropped from the maps by
// a later entry's clock, and kept by a snapshot.
func TestGatewayCeilings(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, req any) {
		t.Helper()
		idx++
		if err, ok := apply(t, f, idx, typ, req).(error); ok {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	key := gatewaywire.Scope{Kind: gatewaywire.ScopeKey, Name: "k", Period: gatewaywire.PeriodDay, Bucket: "2026-12-07"}
	day := gatewaywire.Scope{Kind: gatewaywire.ScopeDay, Name: "2026-12-07"}
	scopes := []gatewaywire.Scope{key, day}
	mins := func(n int) time.Time { return at.Add(time.Duration(n) * time.Minute) }
	do(GatewayCeilingsRequestType, GatewayCeilingsRequest{Ledger: "s1/a", At: at, Set: []GatewayScopeCeiling{{key, 100, mins(1)}, {day, 1000, mins(1)}}})
	do(GatewayCeilingsRequestType, GatewayCeilingsRequest{Ledger: "s2/b", At: at, Set: []GatewayScopeCeiling{{key, 30, mins(2)}}})
	if got := f.GatewayCeilingsIn(scopes, "s3/c", at); got[0] != 130 || got[1] != 1000 {
		t.Fatalf("ceilings of others than s3/c: %v", got)
	}
	if got := f.GatewayCeilingsIn(scopes, "s1/a", at); got[0] != 30 || got[1] != 0 {
		t.Fatalf("ceilings of others than s1/a: %v (a ledger knows its own)", got)
	}
	// One scope raised and renewed; the other kept as it was.
	do(GatewayCeilingsRequestType, GatewayCeilingsRequest{Ledger: "s1/a", At: at.Add(time.Second), Set: []GatewayScopeCeiling{{key, 200, mins(3)}}})
	if got := f.GatewayCeilingsIn(scopes, "", at); got[0] != 230 || got[1] != 1000 {
		t.Fatalf("after s1/a raised the key's: %v", got)
	}
	// The shares' ceilings (gateway_shares.go) ride the same snapshot.
	do(GatewaySharesRequestType, GatewaySharesRequest{Set: map[string]GatewayShare{"s1": {Process: "a", Models: map[string]int{"small": 7}}}})
	s := roundTrip(t, f)
	if got := s.GatewayCeilingsIn(scopes, "", at); got[0] != 230 || got[1] != 1000 {
		t.Fatalf("a restored replica's ceilings: %v", got)
	}
	if sh := s.GatewayShares(); sh["s1"].Models["small"] != 7 {
		t.Fatalf("a restored replica's shares: %+v", sh)
	}
	// Past its Until a ceiling holds nothing, and the next entry drops it.
	if got := f.GatewayCeilingsIn(scopes, "", mins(2).Add(time.Second)); got[0] != 200 || got[1] != 0 {
		t.Fatalf("at +2 min: %v", got)
	}
	do(GatewayCeilingsRequestType, GatewayCeilingsRequest{Ledger: "s3/c", At: mins(2).Add(time.Second), Set: []GatewayScopeCeiling{{day, 5, mins(4)}}})
	if c := f.GatewayCeilingsOf("s2/b"); len(c) != 0 {
		t.Fatalf("s2/b's lapsed ceilings are still in the maps: %+v", c)
	}
	if c := f.GatewayCeilingsOf("s1/a"); len(c) != 1 || c[0].Scope != key {
		t.Fatalf("s1/a's ceilings: %+v", c)
	}
	// A ledger drops a scope's ceiling with an Until not after At.
	do(GatewayCeilingsRequestType, GatewayCeilingsRequest{Ledger: "s1/a", At: mins(2).Add(time.Second), Set: []GatewayScopeCeiling{{key, 0, at}}})
	if got := f.GatewayCeilingsIn(scopes, "", mins(2).Add(time.Second)); got[0] != 0 || got[1] != 5 {
		t.Fatalf("after s1/a dropped the key's: %v", got)
	}
	if c := s.GatewayCeilingsOf("s1/a"); len(c) != 2 {
		t.Fatalf("the snapshot's s1/a: %+v", c)
	}
}
