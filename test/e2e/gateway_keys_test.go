package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/monitor"
)

// Keys and tenants from the command line, on a running agent, without a
// restart: a tenant and a key of it are created with stickyd gateway;
// the key calls the gateway until its RPM refuses it (429 with
// Retry-After), reads its own usage (nothing of another key's), the
// monitor shows the tenant's cost, and once the key is revoked its calls
// are refused (401).
func TestGatewayKeysWithTheCLI(t *testing.T) {
	p := newUsageProvider(t, 0)
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
		c.Gateway = &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0", DayZone: "Europe/Vilnius",
			Models: []*agent.GatewayModel{{Name: "small", Concurrency: 4, MaxOutputTokens: 1000, Deployments: []*agent.GatewayDeployment{{
				Name: "local", Provider: "openai", BaseURL: p.srv.URL + "/v1", Model: "small-v1",
				Price: &gateway.Price{Input: 1, Output: 10}}}}}}
	})
	gw := a.GatewayAddr()
	body := func(out int) string {
		return `{"model":"small","messages":[{"role":"user","content":"out=` + strconv.Itoa(out) + `"}]}`
	}
	// No key exists: the gateway is open.
	if c := gatewayPost(t, gw, "", body(10)); c.status != 200 {
		t.Fatalf("an open gateway: %+v", c)
	}

	cli := func(want int, args ...string) string {
		t.Helper()
		code, out := stickyd(t, a, args...)
		if code != want {
			t.Fatalf("stickyd %s: exit %d, want %d\n%s", strings.Join(args, " "), code, want, out)
		}
		return out
	}
	cli(0, "gateway", "tenant", "create", "-budget", "5", "-period", "month", "acme")
	out := cli(0, "gateway", "key", "create", "-tenant", "acme", "-rpm", "2", "-models", "small", "ci")
	var key string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "sk-stickyd-") {
			key = l
		}
	}
	if key == "" || !strings.Contains(out, "This is the only time it is shown") {
		t.Fatalf("key create printed:\n%s", out)
	}
	other := strings.TrimSpace(cli(0, "gateway", "key", "create", "-json", "other"))
	var nk gateway.NewKey
	if err := json.Unmarshal([]byte(other), &nk); err != nil || nk.Secret == "" {
		t.Fatalf("key create -json: %v\n%s", err, other)
	}
	list := cli(0, "gateway", "key", "list")
	if !strings.Contains(list, "ci ") || !strings.Contains(list, "acme") || !strings.Contains(list, "…"+key[len(key)-4:]) ||
		strings.Contains(list, key[len("sk-stickyd-"):len(key)-4]) {
		t.Fatalf("key list:\n%s", list)
	}
	cli(1, "gateway", "key", "create", "ci")                // taken
	cli(1, "gateway", "key", "create", "-tenant", "x", "y") // no such tenant
	cli(1, "gateway", "tenant", "delete", "acme")           // has a key

	// A key now exists: a call without one is refused.
	if c := gatewayPost(t, gw, "", body(10)); c.status != http.StatusUnauthorized {
		t.Fatalf("without a key once keys exist: %+v", c)
	}
	if c := gatewayPost(t, gw, nk.Secret, body(7)); c.status != 200 {
		t.Fatalf("the other key: %+v", c)
	}
	// ci: two calls a minute, the third refused with a Retry-After.
	for i := range 2 {
		if c := gatewayPost(t, gw, key, body(100*(i+1))); c.status != 200 {
			t.Fatalf("ci's call %d: %+v", i, c)
		}
	}
	c := gatewayPost(t, gw, key, body(1))
	if ra, _ := strconv.Atoi(c.retryAfter); c.status != http.StatusTooManyRequests || c.code != "rate_limit_exceeded" || ra < 1 || ra > 60 ||
		!strings.Contains(c.message, `API key "ci" made 2 calls in the last minute (rpm = 2)`) {
		t.Fatalf("ci past its RPM: %+v", c)
	}
	// Its own usage: its calls, days, models, sessions, budget; nothing
	// of the other key's or of the open gateway's call.
	u := keyUsage(t, gw, key)
	today := time.Now().In(mustZone(t, "Europe/Vilnius")).Format(time.DateOnly)
	want := int64(2*promptTokens + 300*10)
	if u.Key != "ci" || u.Tenant != "acme" || u.Total.Calls != 2 || u.Total.Micros != want || u.Days[today].Micros != want ||
		u.Models["small"].Calls != 2 || len(u.Sessions) != 1 || u.Sessions["ci"].Calls != 2 || u.Limits.RPM != 2 || u.Source != "leader" {
		t.Fatalf("ci's usage: %+v", u)
	}
	if u.Budget != nil {
		t.Fatalf("ci has no budget of its own, its usage says %+v", u.Budget)
	}
	if raw := rawUsage(t, gw, key); strings.Contains(raw, "other") {
		t.Fatalf("ci's usage names another key: %s", raw)
	}
	resp, err := http.Get("http://" + gw + "/v1/gateway/usage")
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("usage without a key: %v %v", resp, err)
	}
	resp.Body.Close()
	// The tenant's cost, on the command line and in the monitor.
	if tl := cli(0, "gateway", "tenant", "list"); !strings.Contains(tl, "acme") || !strings.Contains(tl, "$0.003060") {
		t.Fatalf("tenant list:\n%s", tl)
	}
	_, mv := adminCallAt(t, a.AdminAddr(), "GET", "/v1/monitor", testToken)
	var view monitor.View
	if err := json.Unmarshal([]byte(mv), &view); err != nil || len(view.Tenants) != 1 || view.Tenants[0].Tenant != "acme" ||
		view.Tenants[0].Micros != want || view.Tenants[0].MonthMicros != want || view.Tenants[0].BudgetMicros != 5_000_000 {
		t.Fatalf("the monitor's tenants: %v %+v", err, view.Tenants)
	}
	cli(0, "gateway", "tenant", "set", "-rpm", "100", "acme")

	cli(0, "gateway", "key", "revoke", "ci")
	if c := gatewayPost(t, gw, key, body(1)); c.status != http.StatusUnauthorized || c.code != "invalid_api_key" {
		t.Fatalf("a revoked key: %+v", c)
	}
	if c := gatewayPost(t, gw, nk.Secret, body(1)); c.status != 200 {
		t.Fatalf("the other key after ci's revocation: %+v", c)
	}
	cli(0, "gateway", "tenant", "delete", "acme")
	cli(1, "gateway", "key", "revoke", "ci")
}

func rawUsage(t *testing.T, addr, key string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/gateway/usage", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return b.String()
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}
