package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
	"github.com/stickyd/stickyd/internal/monitor"
)

// The admin API of keys and tenants (docs/gateway.md, "Keys and
// tenants"), and what a key reads of itself on the gateway's listener.
//
//	GET    /v1/gateway/keys              the created keys (never their hashes)
//	POST   /v1/gateway/keys              a new key: 201 with the key, shown once
//	DELETE /v1/gateway/keys/{name}       revoke it (its calls are refused at once)
//	GET    /v1/gateway/tenants           the tenants, their keys and costs
//	POST   /v1/gateway/tenants           a new tenant (201)
//	PATCH  /v1/gateway/tenants/{name}    change what the body sets
//	DELETE /v1/gateway/tenants/{name}    delete a tenant without keys
//
// Every change is one raft entry: every server's gateway takes it at
// once, without a restart.
func (g *Gateway) accessRoutes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	mux.HandleFunc("GET /v1/gateway/keys", wrap(func(w http.ResponseWriter, r *http.Request) error {
		keys := g.maps.GatewayAPIKeys()
		for i := range keys {
			keys[i].Hash = ""
		}
		if keys == nil {
			keys = []gateway.APIKey{}
		}
		writeJSONTo(w, http.StatusOK, gateway.KeyList{Keys: keys})
		return nil
	}))
	mux.HandleFunc("POST /v1/gateway/keys", wrap(func(w http.ResponseWriter, r *http.Request) error {
		var req gateway.KeyRequest
		if err := decodeBody(r, &req); err != nil {
			return err
		}
		if err := gatewaywire.CheckName("key", req.Name); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: err.Error()}
		}
		if err := req.Check(); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("key %q: %v", req.Name, err)}
		}
		if _, ok := g.cfg.APIKeys[req.Name]; ok {
			return &api.Error{Status: http.StatusConflict, Message: fmt.Sprintf("key %q is one of the configuration's api_keys: choose another name", req.Name)}
		}
		if req.Tenant != "" {
			if _, ok := g.maps.GatewayTenant(req.Tenant); !ok {
				return &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("tenant %q does not exist: create it first (stickyd gateway tenant create)", req.Tenant)}
			}
		}
		secret := newSecret()
		k := gateway.APIKey{Name: req.Name, Tenant: req.Tenant, Hash: hashKey(secret), Hint: secret[len(secret)-4:],
			Allowance: req.Allowance, Created: time.Now().UTC()}
		if err := g.applyAccess(r.Context(), fsm.GatewayAccessRequest{Op: fsm.AccessOpKeyCreate, Key: &k}); err != nil {
			return err
		}
		k.Hash = ""
		writeJSONTo(w, http.StatusCreated, gateway.NewKey{Secret: secret, Key: k})
		return nil
	}))
	mux.HandleFunc("DELETE /v1/gateway/keys/{name}", wrap(func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		if _, ok := g.cfg.APIKeys[name]; ok {
			return &api.Error{Status: http.StatusConflict, Message: fmt.Sprintf("key %q is one of the configuration's api_keys: remove it there and restart", name)}
		}
		if err := g.applyAccess(r.Context(), fsm.GatewayAccessRequest{Op: fsm.AccessOpKeyRevoke, Name: name}); err != nil {
			return err
		}
		writeJSONTo(w, http.StatusOK, map[string]string{"revoked": name})
		return nil
	}))
	mux.HandleFunc("GET /v1/gateway/tenants", wrap(func(w http.ResponseWriter, r *http.Request) error {
		c, source := g.usage(r.Context())
		keys := map[string]int{}
		for _, k := range g.maps.GatewayAPIKeys() {
			keys[k.Tenant]++
		}
		out := gateway.TenantList{Tenants: []gateway.TenantInfo{}, Source: source}
		for _, t := range g.maps.GatewayTenants() {
			out.Tenants = append(out.Tenants, gateway.TenantInfo{Tenant: t, Keys: keys[t.Name], Cost: c.Tenants[t.Name]})
		}
		writeJSONTo(w, http.StatusOK, out)
		return nil
	}))
	mux.HandleFunc("POST /v1/gateway/tenants", wrap(func(w http.ResponseWriter, r *http.Request) error {
		var t gateway.Tenant
		if err := decodeBody(r, &t); err != nil {
			return err
		}
		if err := gatewaywire.CheckName("tenant", t.Name); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: err.Error()}
		}
		if err := t.Check(); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("tenant %q: %v", t.Name, err)}
		}
		t.Created = time.Now().UTC()
		if err := g.applyAccess(r.Context(), fsm.GatewayAccessRequest{Op: fsm.AccessOpTenantCreate, Tenant: &t}); err != nil {
			return err
		}
		writeJSONTo(w, http.StatusCreated, t)
		return nil
	}))
	mux.HandleFunc("PATCH /v1/gateway/tenants/{name}", wrap(func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		var p gateway.AllowancePatch
		if err := decodeBody(r, &p); err != nil {
			return err
		}
		if t, ok := g.maps.GatewayTenant(name); ok {
			if err := p.Apply(t.Allowance).Check(); err != nil {
				return &api.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("tenant %q: %v", name, err)}
			}
		}
		if err := g.applyAccess(r.Context(), fsm.GatewayAccessRequest{Op: fsm.AccessOpTenantSet, Name: name, Patch: &p}); err != nil {
			return err
		}
		t, _ := g.maps.GatewayTenant(name)
		writeJSONTo(w, http.StatusOK, t)
		return nil
	}))
	mux.HandleFunc("DELETE /v1/gateway/tenants/{name}", wrap(func(w http.ResponseWriter, r *http.Request) error {
		name := r.PathValue("name")
		if err := g.applyAccess(r.Context(), fsm.GatewayAccessRequest{Op: fsm.AccessOpTenantDelete, Name: name}); err != nil {
			return err
		}
		writeJSONTo(w, http.StatusOK, map[string]string{"deleted": name})
		return nil
	}))
}

// decodeBody reads a request's JSON body into v, refusing unknown fields.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.Error{Status: http.StatusBadRequest, Message: "decoding the request body: " + err.Error()}
	}
	return nil
}

// applyAccess writes a change of the keys or tenants through the leader,
// its refusals as the admin API's errors.
func (g *Gateway) applyAccess(ctx context.Context, req fsm.GatewayAccessRequest) error {
	// Whether every server applies the entry is learnt in the background
	// (asked at Start): wait for the answer a moment.
	for wait := time.Now().Add(5 * time.Second); !g.maps.Allows(fsm.GatewayAccessRequestType) && time.Now().Before(wait) && ctx.Err() == nil; {
		time.Sleep(50 * time.Millisecond)
	}
	if !g.maps.Allows(fsm.GatewayAccessRequestType) {
		return &api.Error{Status: http.StatusServiceUnavailable,
			Message: "a server of the cluster does not know API keys and tenants yet (a rolling update is under way): retry once every server runs this version"}
	}
	entry, err := fsm.Encode(fsm.GatewayAccessRequestType, req)
	if err != nil {
		return err
	}
	_, err = g.srv.Apply(ctx, entry)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fsm.ErrGatewayMissing):
		return &api.Error{Status: http.StatusNotFound, Message: err.Error()}
	case errors.Is(err, fsm.ErrGatewayExists), errors.Is(err, fsm.ErrGatewayInUse):
		return &api.Error{Status: http.StatusConflict, Message: err.Error()}
	}
	return &api.Error{Status: http.StatusServiceUnavailable, Message: "recording the change: " + err.Error()}
}

// TenantCosts are the tenants, by name, with what their keys' calls cost
// in all, today and this month (in the gateway's day_zone), from this
// server's counters, every charge taken here counted (the leader's are
// exact): the monitor's cost per tenant. None on a nil Gateway (an agent
// without a gateway block).
func (g *Gateway) TenantCosts() []monitor.TenantCost {
	if g == nil {
		return nil
	}
	tenants, cost := g.maps.GatewayTenants(), g.ledger.TenantAccounts()
	day := time.Now().In(g.zone()).Format(time.DateOnly)
	out := make([]monitor.TenantCost, 0, len(tenants))
	for _, t := range tenants {
		c := cost[t.Name]
		out = append(out, monitor.TenantCost{Tenant: t.Name, Micros: c.Total.Micros, Calls: c.Total.Calls, TodayMicros: c.Days[day].Micros,
			MonthMicros: c.Months[gatewaywire.MonthOf(day)].Micros, BudgetMicros: t.BudgetMicros, Period: t.Period})
	}
	return out
}

// keyUsage is what key name reads of itself in counters c: its counters,
// its sessions (its name, and those under it), its own budget now (what
// held says the calls under way hold in it) and its limits.
func (g *Gateway) keyUsage(c gateway.Counters, name string, held func(gateway.Scope) int64) gateway.KeyUsage {
	a := c.KeyAccounts[name]
	u := gateway.KeyUsage{Key: name, Total: c.Keys[name], Days: nonNil(a.Days), Months: nonNil(a.Months), Models: nonNil(a.Models),
		Sessions: map[string]gateway.Tally{}}
	for s, t := range c.Sessions {
		if s == name || strings.HasPrefix(s, name+"/") {
			u.Sessions[s] = t
		}
	}
	day := time.Now().In(g.zone()).Format(time.DateOnly)
	budget, period := int64(g.cfg.KeyBudget*1e6), gatewaywire.PeriodTotal
	if k, _, ok := g.maps.GatewayAccess(name); ok {
		u.Tenant, u.Limits = k.Tenant, k.Limits
		if k.BudgetMicros > 0 {
			budget, period = k.BudgetMicros, k.Period
		}
	} else if b, ok := g.cfg.KeyBudgets[name]; ok {
		budget = int64(b * 1e6)
	}
	if budget > 0 {
		scope := gatewaywire.PeriodScope(gatewaywire.ScopeKey, name, period, day)
		spent, h := c.SpentIn(scope), held(scope)
		u.Budget = &gateway.BudgetState{Period: period, LimitMicros: budget, SpentMicros: spent, HeldMicros: h, LeftMicros: max(0, budget-spent-h)}
	}
	return u
}

func nonNil(m map[string]gateway.Tally) map[string]gateway.Tally {
	if m == nil {
		return map[string]gateway.Tally{}
	}
	return m
}

// keyUsageOf is key name's usage from the leader's ledger (a follower
// asks the leader), or, when the leader cannot be asked, from this
// server's replica.
func (g *Gateway) keyUsageOf(ctx context.Context, name string) gateway.KeyUsage {
	if g.srv.Raft().IsLeader() {
		u := g.keyUsage(g.ledger.Counters(), name, g.ledger.HeldIn)
		u.Source = "leader"
		return u
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if addr, id := g.srv.Raft().Leader(); addr != "" {
		if admin := g.srv.AdminOf(id, addr); admin != "" {
			var u gateway.KeyUsage
			if err := g.call(ctx, http.MethodGet, admin, "/v1/internal/gateway/usage?key="+url.QueryEscape(name), &u); err == nil {
				return u
			}
		}
	}
	u := g.keyUsage(g.maps.GatewayCounters(), name, g.ledger.HeldIn)
	u.Source = "replica"
	return u
}

// selfUsage serves GET /v1/gateway/usage on the gateway's listener: the
// caller's key reads its own usage (401 without a key).
func (g *Gateway) selfUsage(name func(context.Context, string) (string, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if k := r.Header.Get("X-Api-Key"); auth == "" && k != "" {
			auth = "Bearer " + k
		}
		caller, err := name(r.Context(), auth)
		if err == nil && caller == "" {
			err = errors.New("the gateway takes calls without keys: usage is read per API key, and this call named none")
		}
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stickyd gateway"`)
			writeJSONTo(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{"message": err.Error(),
				"type": "authentication_error", "param": nil, "code": "invalid_api_key"}})
			return
		}
		writeJSONTo(w, http.StatusOK, g.keyUsageOf(r.Context(), caller))
	}
}
