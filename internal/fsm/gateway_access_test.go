package fsm

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Keys and tenants: created once by name, a key's hash finds it, a key
// names an existing tenant, a tenant with keys is not deleted, a set
// changes only what it names; a snapshot carries them and the hash index.
func TestGatewayKeysAndTenants(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(req GatewayAccessRequest) error {
		t.Helper()
		idx++
		err, _ := apply(t, f, idx, GatewayAccessRequestType, req).(error)
		return err
	}
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	acme := &gatewaywire.Tenant{Name: "acme", Created: at, Allowance: gatewaywire.Allowance{BudgetMicros: 5_000_000, Period: gatewaywire.PeriodMonth,
		Limits: gatewaywire.Limits{RPM: 60}, Models: []string{"small"}}}
	key := &gatewaywire.APIKey{Name: "ci", Tenant: "acme", Hash: "h1", Hint: "abcd", Created: at,
		Allowance: gatewaywire.Allowance{Limits: gatewaywire.Limits{RPM: 2}}}
	if err := do(GatewayAccessRequest{Op: AccessOpKeyCreate, Key: key}); !errors.Is(err, ErrGatewayMissing) {
		t.Fatalf("a key of a tenant that does not exist: %v", err)
	}
	if err := do(GatewayAccessRequest{Op: AccessOpTenantCreate, Tenant: acme}); err != nil {
		t.Fatal(err)
	}
	if err := do(GatewayAccessRequest{Op: AccessOpTenantCreate, Tenant: acme}); !errors.Is(err, ErrGatewayExists) {
		t.Fatalf("a tenant created twice: %v", err)
	}
	if err := do(GatewayAccessRequest{Op: AccessOpKeyCreate, Key: key}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  GatewayAccessRequest
		want string
	}{
		{"the same name", GatewayAccessRequest{Op: AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "ci", Hash: "h2"}}, "already exists"},
		{"the same hash", GatewayAccessRequest{Op: AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "ci2", Hash: "h1"}}, "another key's"},
		{"no hash", GatewayAccessRequest{Op: AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "ci3"}}, "empty"},
		{"a bad name", GatewayAccessRequest{Op: AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "a/b", Hash: "h4"}}, "only letters"},
		{"a bad period", GatewayAccessRequest{Op: AccessOpTenantCreate, Tenant: &gatewaywire.Tenant{Name: "t", Allowance: gatewaywire.Allowance{Period: "week"}}}, "period"},
		{"a negative budget", GatewayAccessRequest{Op: AccessOpTenantSet, Name: "acme", Patch: &gatewaywire.AllowancePatch{BudgetMicros: ptr(int64(-1))}}, "negative"},
		{"an unknown tenant set", GatewayAccessRequest{Op: AccessOpTenantSet, Name: "nobody", Patch: &gatewaywire.AllowancePatch{}}, "does not exist"},
		{"a tenant with keys", GatewayAccessRequest{Op: AccessOpTenantDelete, Name: "acme"}, "revoke its keys first (ci)"},
		{"an unknown key", GatewayAccessRequest{Op: AccessOpKeyRevoke, Name: "nobody"}, "does not exist"},
		{"an unknown op", GatewayAccessRequest{Op: "rename"}, "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := do(tt.req); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one saying %q", err, tt.want)
			}
		})
	}
	if err := do(GatewayAccessRequest{Op: AccessOpTenantSet, Name: "acme", Patch: &gatewaywire.AllowancePatch{RPM: ptr(100)}}); err != nil {
		t.Fatal(err)
	}
	k, tenant, ok := f.GatewayAccess("ci")
	if !ok || k.Hash != "h1" || tenant.RPM != 100 || tenant.BudgetMicros != 5_000_000 || tenant.Period != gatewaywire.PeriodMonth || !tenant.Allows("small") || tenant.Allows("big") {
		t.Fatalf("access of ci: %+v, %+v, %v", k, tenant, ok)
	}
	if k, ok := f.GatewayAPIKeyByHash("h1"); !ok || k.Name != "ci" {
		t.Fatalf("by hash: %+v %v", k, ok)
	}
	restored := roundTrip(t, f)
	if k, ok := restored.GatewayAPIKeyByHash("h1"); !ok || k.Name != "ci" || len(restored.GatewayTenants()) != 1 {
		t.Fatalf("after a snapshot: %+v %v, tenants %+v", k, ok, restored.GatewayTenants())
	}
	if err := do(GatewayAccessRequest{Op: AccessOpKeyRevoke, Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := f.GatewayAPIKeyByHash("h1"); ok || f.GatewayHasAPIKeys() {
		t.Fatal("a revoked key is still found")
	}
	if err := do(GatewayAccessRequest{Op: AccessOpTenantDelete, Name: "acme"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := restored.GatewayAPIKeyByHash("h1"); !ok {
		t.Fatal("the snapshot's maps changed with the live ones")
	}
	// The kind of refusal crosses from the leader to a follower.
	err := KindError(ErrorKind(do(GatewayAccessRequest{Op: AccessOpKeyRevoke, Name: "ci"})), `key "ci" does not exist`)
	if !errors.Is(err, ErrGatewayMissing) || err.Error() != `key "ci" does not exist` {
		t.Fatalf("rebuilt refusal %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Reservations: taken, settled by the charge that names them, released,
// expired at the entries' clock, and dropped when their server's process
// is gone; the ledger that took them sees only the others'.
func TestGatewayReservations(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) {
		t.Helper()
		idx++
		if err, ok := apply(t, f, idx, typ, body).(error); ok {
			t.Fatal(err)
		}
	}
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	resv := func(id, ledger string, expires time.Duration) gatewaywire.Reservation {
		return gatewaywire.Reservation{ID: id, Ledger: ledger, Session: "k/s", Key: "k", Day: "2026-12-06", Micros: 50_000, Expires: at.Add(expires)}
	}
	do(GatewayReserveRequestType, GatewayReserveRequest{Ledger: "s1/a", At: at, Reserve: []gatewaywire.Reservation{
		resv("r1", "s1/a", time.Minute), resv("r2", "s1/a", time.Minute), resv("r3", "s1/a", time.Second), resv("old", "s1/a", -time.Second)}})
	do(GatewayReserveRequestType, GatewayReserveRequest{Ledger: "s2/b", At: at, Reserve: []gatewaywire.Reservation{resv("r4", "s2/b", time.Minute)}})
	if ids := reservationIDs(f); ids != "r1 r2 r3 r4" {
		t.Fatalf("reservations %s (an expired one is not taken)", ids)
	}
	if held := f.GatewayHeldByOthers("s1/a", at); len(held) != 1 || held[0].ID != "r4" {
		t.Fatalf("held by others than s1/a: %+v", held)
	}
	if held := f.GatewayHeldByOthers("s1/a", at.Add(2*time.Minute)); len(held) != 0 {
		t.Fatalf("expired reservations are read as held: %+v", held)
	}
	// The charge that settles r1 counts once and releases it at once.
	do(GatewayChargesRequestType, GatewayChargesRequest{Ledger: "s1/a", Batch: 1, At: at.Add(2 * time.Second), Charges: []gatewaywire.Charge{
		{Request: "c1", Session: "k/s", Key: "k", Day: "2026-12-06", Micros: 1234, Reservation: "r1"}}})
	if ids := reservationIDs(f); ids != "r2 r4" {
		t.Fatalf("after r1's charge (and r3's expiry): %s", ids)
	}
	if spent, _ := f.GatewaySpentIn([]gatewaywire.Scope{{Kind: gatewaywire.ScopeKey, Name: "k"}}, "s1/a"); spent[0] != 1234 {
		t.Fatalf("spent %v", spent)
	}
	s := roundTrip(t, f)
	do(GatewayReserveRequestType, GatewayReserveRequest{Ledger: "s1/a", At: at.Add(3 * time.Second), Release: []string{"r2", "unknown"}})
	if ids := reservationIDs(f); ids != "r4" {
		t.Fatalf("after releasing r2: %s", ids)
	}
	// s2 restarted: its new process drops its old one's reservations.
	do(GatewayReserveRequestType, GatewayReserveRequest{Ledger: "s2/c", At: at.Add(3 * time.Second), Stale: true})
	if ids := reservationIDs(f); ids != "" {
		t.Fatalf("after s2's restart: %s", ids)
	}
	if ids := reservationIDs(s); ids != "r2 r4" {
		t.Fatalf("the snapshot holds %s", ids)
	}
	if held := s.GatewayHeldByOthers("s1/a", at); len(held) != 1 {
		t.Fatalf("a restored replica's index: %+v", held)
	}
}

func reservationIDs(f *FSM) string {
	var ids []string
	for _, r := range f.GatewayReservations() {
		ids = append(ids, r.ID)
	}
	return strings.Join(ids, " ")
}

// A snapshot written before keys, tenants and reservations existed (by
// the code of that time: testdata/snapshot-gateway-v1.golden) still
// loads whole, and the new entries apply on top of it.
func TestGatewaySnapshotBeforeKeys(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "snapshot-gateway-v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	f := New()
	if err := f.Restore(io.NopCloser(strings.NewReader(string(b)))); err != nil {
		t.Fatal(err)
	}
	c := f.GatewayCounters()
	if c.Total.Micros != 60 || c.Keys["billing"].Micros != 55 || c.Sessions["alice"].Calls != 1 || len(c.KeyAccounts) != 0 {
		t.Fatalf("counters %+v", c)
	}
	if j, ok := f.GatewayJob("gw-1"); !ok || j.State != gatewaywire.JobQueued || f.GatewayActive("small") != 1 {
		t.Fatalf("job %+v %v", j, ok)
	}
	if f.GatewayHasAPIKeys() || len(f.GatewayTenants()) != 0 || len(f.GatewayReservations()) != 0 {
		t.Fatal("keys, tenants or reservations out of nothing")
	}
	at := time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)
	for i, e := range []struct {
		typ  MessageType
		body any
	}{
		{GatewayAccessRequestType, GatewayAccessRequest{Op: AccessOpTenantCreate, Tenant: &gatewaywire.Tenant{Name: "acme"}}},
		{GatewayAccessRequestType, GatewayAccessRequest{Op: AccessOpKeyCreate, Key: &gatewaywire.APIKey{Name: "ci", Tenant: "acme", Hash: "h"}}},
		{GatewayReserveRequestType, GatewayReserveRequest{Ledger: "s1/x", At: at, Reserve: []gatewaywire.Reservation{{ID: "r", Ledger: "s1/x", Expires: at.Add(time.Minute)}}}},
		{GatewayChargesRequestType, GatewayChargesRequest{Ledger: "s1/x", Batch: 1, At: at, Charges: []gatewaywire.Charge{
			{Request: "c", Session: "ci", Key: "ci", Tenant: "acme", Day: "2026-12-06", Model: "small", Micros: 7, Reservation: "r"}}}},
	} {
		if err, ok := apply(t, f, uint64(1000+i), e.typ, e.body).(error); ok {
			t.Fatal(err)
		}
	}
	c = f.GatewayCounters()
	if c.Total.Micros != 67 || c.Tenants["acme"].Months["2026-12"].Micros != 7 || len(f.GatewayReservations()) != 0 {
		t.Fatalf("after the new entries: %+v, reservations %+v", c, f.GatewayReservations())
	}
}
