package command

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

func TestParseDollars(t *testing.T) {
	for in, want := range map[string]int64{"5": 5_000_000, "0.25": 250_000, "$12.50": 12_500_000, ".5": 500_000, "0.000001": 1, "0": 0, "7.": 7_000_000} {
		if got, err := parseDollars(in); err != nil || got != want {
			t.Errorf("%q: %d %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1.0000001", "abc", "1,5", "$", "1e3", "+2"} {
		if got, err := parseDollars(in); err == nil {
			t.Errorf("%q: took %d", in, got)
		}
	}
}

var created = time.Date(2026, 12, 6, 9, 30, 0, 0, time.UTC)

// key create prints the key alone on stdout (the notice on stderr), sends
// the allowance the flags say; key list shows no key but its hint; key
// revoke names it; the API's refusals are said with what was being done.
func TestGatewayKeyCommands(t *testing.T) {
	var sent gateway.KeyRequest
	keys := gateway.KeyList{Keys: []gateway.APIKey{
		{Name: "ci", Tenant: "acme", Hint: "wxyz", Created: created, Allowance: gatewaywire.Allowance{BudgetMicros: 20_000_000, Period: "month",
			Limits: gatewaywire.Limits{RPM: 60, TPM: 100_000}, Models: []string{"small", "big"}}},
		{Name: "ops", Hint: "abcd", Created: created},
	}}
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/gateway/keys": func(w http.ResponseWriter, r *http.Request) {
			sent = gateway.KeyRequest{}
			_ = json.NewDecoder(r.Body).Decode(&sent)
			if sent.Name == "taken" {
				writeError(w, http.StatusConflict, `key "taken" already exists`)
				return
			}
			writeJSON(w, http.StatusCreated, gateway.NewKey{Secret: "sk-stickyd-s3cr3t", Key: gateway.APIKey{Name: sent.Name, Tenant: sent.Tenant, Hint: "cr3t"}})
		},
		"GET /v1/gateway/keys": answer(200, keys),
		"DELETE /v1/gateway/keys/{name}": func(w http.ResponseWriter, r *http.Request) {
			if r.PathValue("name") != "ci" {
				writeError(w, http.StatusNotFound, `key "`+r.PathValue("name")+`" does not exist`)
				return
			}
			writeJSON(w, 200, map[string]string{"revoked": "ci"})
		},
	})
	r := run(t, f.args("gateway", "key", "create", "-tenant", "acme", "-budget", "$20", "-period", "month", "-rpm", "60", "-tpm", "100000",
		"-concurrency", "4", "-models", "small, big", "ci")...)
	r.expect(t, 0, nil, []string{"Key ci of tenant acme created. This is the only time it is shown"})
	if r.stdout != "sk-stickyd-s3cr3t\n" {
		t.Fatalf("stdout %q: want the key alone", r.stdout)
	}
	want := gateway.KeyRequest{Name: "ci", Tenant: "acme", Allowance: gatewaywire.Allowance{BudgetMicros: 20_000_000, Period: "month",
		Limits: gatewaywire.Limits{RPM: 60, TPM: 100_000, Concurrency: 4}, Models: []string{"small", "big"}}}
	if b, w := mustJSON(t, sent), mustJSON(t, want); b != w {
		t.Fatalf("sent %s, want %s", b, w)
	}
	run(t, f.args("gateway", "key", "create", "-json", "plain")...).expect(t, 0, []string{`"secret": "sk-stickyd-s3cr3t"`}, nil)
	if sent.Period != "" || sent.BudgetMicros != 0 {
		t.Fatalf("the defaults sent %+v", sent)
	}

	r = run(t, f.args("gateway", "key", "list")...)
	r.expect(t, 0, nil, nil)
	wantList := `NAME   TENANT   KEY     BUDGET       PERIOD   RPM   TPM      CONC   MODELS      CREATED
ci     acme     …wxyz   $20.000000   month    60    100000   -      small,big   2026-12-06 09:30
ops    -        …abcd   -            -        -     -        -      all         2026-12-06 09:30`
	if got := strings.TrimRight(r.stdout, "\n"); got != wantList {
		t.Fatalf("list:\n%s\nwant:\n%s", got, wantList)
	}
	run(t, f.args("gateway", "key", "list", "-tenant", "acme", "-json")...).expect(t, 0, []string{`"name": "ci"`}, nil)
	if r := run(t, f.args("gateway", "key", "list", "-tenant", "acme", "-json")...); strings.Contains(r.stdout, "ops") {
		t.Fatalf("-tenant -json lists another tenant's key:\n%s", r.stdout)
	}
	run(t, f.args("gateway", "key", "list", "-tenant", "nobody")...).expect(t, 0, []string{"Tenant nobody has no API keys."}, nil)
	run(t, f.args("gateway", "key", "revoke", "ci")...).expect(t, 0, []string{"Key ci revoked"}, nil)

	tests := []struct {
		name   string
		args   []string
		stderr string
	}{
		{"a name taken", []string{"create", "taken"}, `creating key taken: key "taken" already exists`},
		{"an unknown key", []string{"revoke", "nobody"}, `revoking key nobody: key "nobody" does not exist`},
		{"a bad budget", []string{"create", "-budget", "-3", "x"}, "-budget=-3: want dollars"},
		{"a bad period", []string{"create", "-period", "week", "x"}, "-period=week: want day, month or total"},
		{"a negative rpm", []string{"create", "-rpm", "-1", "x"}, "must not be negative"},
		{"no name", []string{"create"}, "missing arguments"},
		{"two names", []string{"revoke", "a", "b"}, "unexpected arguments: b"},
		{"an unknown flag", []string{"create", "-colour", "x"}, "Usage: stickyd gateway key create"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run(t, f.args(append([]string{"gateway", "key"}, tt.args...)...)...).expect(t, 1, nil, []string{tt.stderr})
		})
	}
	// Without a gateway block the routes are the API's 404.
	none := newFakeAPI(t, nil)
	run(t, none.args("gateway", "key", "list")...).expect(t, 1, nil, []string{"does the agent's configuration have a gateway block?"})
}

// tenant set sends only what its flags give; list shows the costs; the
// commands' errors are clear.
func TestGatewayTenantCommands(t *testing.T) {
	var patch map[string]any
	var createdT gateway.Tenant
	f := newFakeAPI(t, map[string]http.HandlerFunc{
		"POST /v1/gateway/tenants": func(w http.ResponseWriter, r *http.Request) {
			_ = json.NewDecoder(r.Body).Decode(&createdT)
			writeJSON(w, http.StatusCreated, createdT)
		},
		"PATCH /v1/gateway/tenants/{name}": func(w http.ResponseWriter, r *http.Request) {
			patch = nil
			_ = json.NewDecoder(r.Body).Decode(&patch)
			writeJSON(w, 200, gateway.Tenant{Name: r.PathValue("name"), Allowance: gatewaywire.Allowance{BudgetMicros: 500_000_000, Period: "month", Limits: gatewaywire.Limits{RPM: 600}}})
		},
		"GET /v1/gateway/tenants": answer(200, gateway.TenantList{Source: "leader", Tenants: []gateway.TenantInfo{
			{Tenant: gateway.Tenant{Name: "acme", Allowance: gatewaywire.Allowance{BudgetMicros: 500_000_000, Period: "month", Limits: gatewaywire.Limits{RPM: 600}}},
				Keys: 2, Cost: gateway.Account{Total: gateway.Tally{Micros: 1_234_567, Calls: 12}}},
			{Tenant: gateway.Tenant{Name: "free"}}}}),
		"DELETE /v1/gateway/tenants/{name}": func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusConflict, `tenant "acme" is in use: revoke its keys first (ci, ops)`)
		},
	})
	run(t, f.args("gateway", "tenant", "create", "-budget", "500", "-period", "month", "acme")...).expect(t, 0, []string{"Tenant acme created"}, nil)
	if createdT.Name != "acme" || createdT.BudgetMicros != 500_000_000 || createdT.Period != "month" {
		t.Fatalf("created %+v", createdT)
	}
	run(t, f.args("gateway", "tenant", "set", "-rpm", "600", "-models=", "acme")...).expect(t, 0,
		[]string{"Tenant acme changed: budget $500.000000 (month), rpm 600, tpm -, concurrency -, models all."}, nil)
	if b := mustJSON(t, patch); b != `{"models":[],"rpm":600}` {
		t.Fatalf("set sent %s: want only what was given", b)
	}
	r := run(t, f.args("gateway", "tenant", "list")...)
	r.expect(t, 0, nil, nil)
	wantList := `NAME   BUDGET        PERIOD   RPM   TPM   CONC   MODELS   KEYS   COST        CALLS
acme   $500.000000   month    600   -     -      all      2      $1.234567   12
free   -             -        -     -     -      all      0      $0.000000   0`
	if got := strings.TrimRight(r.stdout, "\n"); got != wantList {
		t.Fatalf("list:\n%s\nwant:\n%s", got, wantList)
	}
	run(t, f.args("gateway", "tenant", "delete", "acme")...).expect(t, 1, nil, []string{`deleting tenant acme: tenant "acme" is in use: revoke its keys first (ci, ops)`})
	run(t, f.args("gateway", "tenant", "set", "acme")...).expect(t, 1, nil, []string{"nothing to change"})
	run(t, f.args("gateway", "tenant", "create", "-period", "year", "x")...).expect(t, 1, nil, []string{"-period=year"})
	run(t, []string{"gateway", "tenant", "list"}...).expect(t, 1, nil, []string{"no admin token"})
}

// Every new command answers -help with its usage, and its parent lists
// them.
func TestGatewayAccessHelp(t *testing.T) {
	for _, args := range [][]string{
		{"gateway", "key", "create"}, {"gateway", "key", "list"}, {"gateway", "key", "revoke"},
		{"gateway", "tenant", "create"}, {"gateway", "tenant", "list"}, {"gateway", "tenant", "set"}, {"gateway", "tenant", "delete"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			r := run(t, append(args, "-help")...)
			if !strings.Contains(r.stderr+r.stdout, "Usage: stickyd "+strings.Join(args, " ")) {
				t.Fatalf("-help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
	}
	r := run(t, "gateway", "key")
	if !strings.Contains(r.stderr+r.stdout, "create") || !strings.Contains(r.stderr+r.stdout, "revoke") {
		t.Fatalf("stickyd gateway key:\n%s%s", r.stdout, r.stderr)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
