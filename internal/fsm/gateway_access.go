package fsm

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// The gateway's API keys and tenants, and the reservations of calls'
// worst-case costs (docs/gateway.md, "Budgets that never overshoot" and
// "Keys and tenants"). A key is held as its hash, never as itself. A
// reservation is taken by the leader's ledger before a call with a budget
// starts, and leaves the maps when the call's charge settles it, when it
// is released, or once it expires (at the latest when its call would
// have had to end): a leader change neither keeps it for ever nor counts
// it beside its charge.

const (
	// GatewayAccessRequestType creates, changes or deletes an API key or
	// a tenant.
	GatewayAccessRequestType MessageType = 27
	// GatewayReserveRequestType takes and releases reservations.
	GatewayReserveRequestType MessageType = 28
)

// Errors of the keys' and tenants' entries; ErrorKind and KindError carry
// them from the leader to the server that forwarded the write.
var (
	ErrGatewayExists  = errors.New("already exists")
	ErrGatewayMissing = errors.New("does not exist")
	ErrGatewayInUse   = errors.New("is in use")
)

// The operations of a GatewayAccessRequest.
const (
	AccessOpKeyCreate    = "key_create"
	AccessOpKeyRevoke    = "key_revoke"
	AccessOpTenantCreate = "tenant_create"
	AccessOpTenantSet    = "tenant_set"
	AccessOpTenantDelete = "tenant_delete"
)

// GatewayAccessRequest changes the keys or the tenants: key_create
// carries Key (its hash), tenant_create Tenant, tenant_set Name and
// Patch, key_revoke and tenant_delete Name. A tenant is deleted only
// once it has no key.
type GatewayAccessRequest struct {
	Op     string                      `json:"op"`
	Key    *gatewaywire.APIKey         `json:"key,omitempty"`
	Tenant *gatewaywire.Tenant         `json:"tenant,omitempty"`
	Name   string                      `json:"name,omitempty"`
	Patch  *gatewaywire.AllowancePatch `json:"patch,omitempty"`
}

// GatewayReserveRequest takes the reservations Reserve and releases those
// named in Release, for the ledger Ledger at At (the leader's clock: the
// reservations expired at At leave the maps too). Stale releases every
// reservation of an earlier process of the same server (a ledger whose
// name before its "/" is Ledger's, but not Ledger): their calls died with
// it.
type GatewayReserveRequest struct {
	Ledger  string                    `json:"ledger"`
	At      time.Time                 `json:"at"`
	Reserve []gatewaywire.Reservation `json:"reserve,omitempty"`
	Release []string                  `json:"release,omitempty"`
	Stale   bool                      `json:"stale,omitempty"`
}

func (f *FSM) applyGatewayAccess(buf body) interface{} {
	var req GatewayAccessRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding a gateway key or tenant: %w", err)
	}
	g := f.gatewayLocked()
	switch req.Op {
	case AccessOpKeyCreate:
		k := req.Key
		if k == nil {
			return errors.New("a key_create without its key")
		}
		if err := gatewaywire.CheckName("key", k.Name); err != nil {
			return err
		}
		if err := k.Check(); err != nil {
			return fmt.Errorf("key %q: %w", k.Name, err)
		}
		if _, ok := g.APIKeys[k.Name]; ok {
			return fmt.Errorf("key %q %w", k.Name, ErrGatewayExists)
		}
		if _, ok := g.keyHash[k.Hash]; ok || k.Hash == "" {
			return fmt.Errorf("key %q: its hash is empty or another key's", k.Name)
		}
		if _, ok := g.Tenants[k.Tenant]; k.Tenant != "" && !ok {
			return fmt.Errorf("tenant %q %w", k.Tenant, ErrGatewayMissing)
		}
		c := *k
		c.Models = slices.Clone(k.Models)
		g.APIKeys[c.Name] = &c
		g.keyHash[c.Hash] = c.Name
		return nil
	case AccessOpKeyRevoke:
		k := g.APIKeys[req.Name]
		if k == nil {
			return fmt.Errorf("key %q %w", req.Name, ErrGatewayMissing)
		}
		delete(g.APIKeys, k.Name)
		delete(g.keyHash, k.Hash)
		return nil
	case AccessOpTenantCreate:
		t := req.Tenant
		if t == nil {
			return errors.New("a tenant_create without its tenant")
		}
		if err := gatewaywire.CheckName("tenant", t.Name); err != nil {
			return err
		}
		if err := t.Check(); err != nil {
			return fmt.Errorf("tenant %q: %w", t.Name, err)
		}
		if _, ok := g.Tenants[t.Name]; ok {
			return fmt.Errorf("tenant %q %w", t.Name, ErrGatewayExists)
		}
		c := *t
		c.Models = slices.Clone(t.Models)
		g.Tenants[c.Name] = &c
		return nil
	case AccessOpTenantSet:
		t := g.Tenants[req.Name]
		if t == nil {
			return fmt.Errorf("tenant %q %w", req.Name, ErrGatewayMissing)
		}
		if req.Patch == nil {
			return nil
		}
		a := req.Patch.Apply(t.Allowance)
		if err := a.Check(); err != nil {
			return fmt.Errorf("tenant %q: %w", t.Name, err)
		}
		c := *t
		c.Allowance = a
		g.Tenants[c.Name] = &c
		return nil
	case AccessOpTenantDelete:
		if g.Tenants[req.Name] == nil {
			return fmt.Errorf("tenant %q %w", req.Name, ErrGatewayMissing)
		}
		var keys []string
		for _, k := range g.APIKeys {
			if k.Tenant == req.Name {
				keys = append(keys, k.Name)
			}
		}
		if len(keys) > 0 {
			slices.Sort(keys)
			return fmt.Errorf("tenant %q %w: revoke its keys first (%s)", req.Name, ErrGatewayInUse, strings.Join(keys, ", "))
		}
		delete(g.Tenants, req.Name)
		return nil
	}
	return fmt.Errorf("unknown gateway access op %q", req.Op)
}

func (f *FSM) applyGatewayReserve(buf body) interface{} {
	var req GatewayReserveRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding gateway reservations: %w", err)
	}
	g := f.gatewayLocked()
	g.expireReservations(req.At)
	if req.Stale {
		server, _, _ := strings.Cut(req.Ledger, "/")
		for id, r := range g.Reservations {
			if r.Ledger != req.Ledger && strings.HasPrefix(r.Ledger, server+"/") {
				g.dropReservation(id)
			}
		}
	}
	for _, r := range req.Reserve {
		if r.ID == "" || !r.Expires.After(req.At) {
			continue
		}
		g.dropReservation(r.ID)
		c := r
		g.Reservations[c.ID] = &c
		g.resvLedgers[c.Ledger]++
	}
	for _, id := range req.Release {
		g.dropReservation(id)
	}
	return nil
}

// dropReservation removes a reservation (none: nothing).
func (g *GatewayState) dropReservation(id string) {
	r := g.Reservations[id]
	if r == nil {
		return
	}
	delete(g.Reservations, id)
	if g.resvLedgers[r.Ledger]--; g.resvLedgers[r.Ledger] <= 0 {
		delete(g.resvLedgers, r.Ledger)
	}
}

// expireReservations drops the reservations expired at at.
func (g *GatewayState) expireReservations(at time.Time) {
	for id, r := range g.Reservations {
		if !r.Expires.After(at) {
			g.dropReservation(id)
		}
	}
}

// GatewayAPIKeyByHash returns the key whose SHA-256 (hex) is hash.
func (f *FSM) GatewayAPIKeyByHash(hash string) (gatewaywire.APIKey, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.state.Gateway
	if g == nil || g.keyHash == nil {
		return gatewaywire.APIKey{}, false
	}
	k := g.APIKeys[g.keyHash[hash]]
	if k == nil {
		return gatewaywire.APIKey{}, false
	}
	return *k, true
}

// GatewayHasAPIKeys reports whether any key was created.
func (f *FSM) GatewayHasAPIKeys() bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Gateway != nil && len(f.state.Gateway.APIKeys) > 0
}

// GatewayAccess returns the key named name and its tenant (ok false: no
// such key; the tenant's Name is "" when it has none), read under one
// lock.
func (f *FSM) GatewayAccess(name string) (key gatewaywire.APIKey, tenant gatewaywire.Tenant, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.state.Gateway
	if g == nil || g.APIKeys[name] == nil {
		return key, tenant, false
	}
	key = *g.APIKeys[name]
	if t := g.Tenants[key.Tenant]; t != nil {
		tenant = *t
	}
	return key, tenant, true
}

// GatewayAPIKeys lists the keys, by name.
func (f *FSM) GatewayAPIKeys() []gatewaywire.APIKey {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []gatewaywire.APIKey
	if g := f.state.Gateway; g != nil {
		for _, k := range g.APIKeys {
			out = append(out, *k)
		}
	}
	slices.SortFunc(out, func(a, b gatewaywire.APIKey) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// GatewayTenants lists the tenants, by name.
func (f *FSM) GatewayTenants() []gatewaywire.Tenant {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []gatewaywire.Tenant
	if g := f.state.Gateway; g != nil {
		for _, t := range g.Tenants {
			out = append(out, *t)
		}
	}
	slices.SortFunc(out, func(a, b gatewaywire.Tenant) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// GatewayTenant returns the tenant named name.
func (f *FSM) GatewayTenant(name string) (gatewaywire.Tenant, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if g := f.state.Gateway; g != nil && g.Tenants[name] != nil {
		return *g.Tenants[name], true
	}
	return gatewaywire.Tenant{}, false
}

// GatewaySpentIn returns what the charges applied have spent in each of
// scopes, and the last batch applied of ledger: a ledger adds what it
// holds past it.
func (f *FSM) GatewaySpentIn(scopes []gatewaywire.Scope, ledger string) ([]int64, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]int64, len(scopes))
	g := f.state.Gateway
	if g == nil {
		return out, 0
	}
	for i, s := range scopes {
		out[i] = g.Counters.SpentIn(s)
	}
	return out, g.Ledgers[ledger].Batch
}

// GatewayHeldByOthers returns the reservations of ledgers other than
// ledger that have not expired at now (a ledger knows its own).
func (f *FSM) GatewayHeldByOthers(ledger string, now time.Time) []gatewaywire.Reservation {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.state.Gateway
	if g == nil || len(g.resvLedgers) == 0 || len(g.resvLedgers) == 1 && g.resvLedgers[ledger] > 0 {
		return nil
	}
	var out []gatewaywire.Reservation
	for _, r := range g.Reservations {
		if r.Ledger != ledger && r.Expires.After(now) {
			out = append(out, *r)
		}
	}
	return out
}

// GatewayTenantAccounts returns a copy of the tenants' counters, and the
// last batch applied of ledger.
func (f *FSM) GatewayTenantAccounts(ledger string) (map[string]gatewaywire.Account, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.state.Gateway
	if g == nil {
		return map[string]gatewaywire.Account{}, 0
	}
	c := gatewaywire.Counters{Tenants: g.Counters.Tenants}
	out := c.Clone().Tenants
	if out == nil {
		out = map[string]gatewaywire.Account{}
	}
	return out, g.Ledgers[ledger].Batch
}

// GatewayReservations returns every reservation the maps hold, by id.
func (f *FSM) GatewayReservations() []gatewaywire.Reservation {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []gatewaywire.Reservation
	if g := f.state.Gateway; g != nil {
		for _, r := range g.Reservations {
			out = append(out, *r)
		}
	}
	slices.SortFunc(out, func(a, b gatewaywire.Reservation) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Allows says whether every server of the cluster applies entries of
// type t (SetEntryGate), for writers of entries that are not encoded
// through EncodeEntry.
func (f *FSM) Allows(t MessageType) bool { return f.allows(t) }
