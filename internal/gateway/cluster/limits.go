package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The keys' and tenants' limits (RPM, TPM, concurrency) are counted in
// one place, the leader's router, wherever a call runs: a server holds its
// call's limits on the leader (batched with its reservations and
// charges), ends the hold when the call ends, and sends the tokens the
// call used. A hold a server never ended (it died) ends once its call must
// have ended. A new leader starts its minutes afresh.

// clusterLimits is the router's LimitKeeper in a cluster.
type clusterLimits struct {
	g *Gateway

	mu    sync.Mutex // guards holds
	holds map[string]limitHold
}

// limitHold is a follower's call's hold on the leader.
type limitHold struct {
	release func()
	until   time.Time
}

var _ gateway.LimitKeeper = (*clusterLimits)(nil)

// Acquire implements gateway.LimitKeeper.
func (c *clusterLimits) Acquire(ctx context.Context, now time.Time, scopes []gateway.LimitScope) (func(), error) {
	g := c.g
	if !c.remote() {
		return g.router.AcquireLimits(now, scopes)
	}
	id := newID()
	b, i := g.ledger.sendRemote(remoteItem{Limits: scopes, Hold: id, HoldFor: g.callBound()})
	select {
	case <-b.done:
	case <-ctx.Done():
		g.ledger.deferRemote(remoteItem{Unhold: id})
		return nil, ctx.Err()
	}
	if err := b.errs[i]; err != nil {
		return nil, err
	}
	return c.unholder(id), nil
}

// HoldAndReserve implements gateway.HoldReserver: on a follower, the hold
// of the call's limits and its reservation go to the leader as one item
// (the leader reserves nothing for a call its limits refuse).
func (c *clusterLimits) HoldAndReserve(ctx context.Context, now time.Time, scopes []gateway.LimitScope, r gateway.Reservation, budgets []gateway.Budget) (func(), error) {
	g, l := c.g, c.g.ledger
	if !c.remote() {
		end, err := c.Acquire(ctx, now, scopes)
		if err != nil {
			return nil, err
		}
		if err := l.Reserve(ctx, r, budgets); err != nil {
			end()
			return nil, err
		}
		return end, nil
	}
	r.Ledger = l.id
	id := newID()
	b, i := l.sendRemote(remoteItem{Limits: scopes, Hold: id, HoldFor: g.callBound(), Reservation: &r, Budgets: budgets})
	var err error
	select {
	case <-b.done:
		err = b.errs[i]
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		// Whichever of the two the leader holds (a leader of an older
		// version holds the reservation whatever the limits said) ends.
		l.deferRemote(remoteItem{Unhold: id}, remoteItem{Release: r.ID})
		return nil, err
	}
	l.mu.Lock()
	l.held[r.ID] = r
	l.mu.Unlock()
	return c.unholder(id), nil
}

// remote says whether a call's limits are held on another server (the
// leader): where its reservations are.
func (c *clusterLimits) remote() bool { return c.g.ledger.follower() }

// unholder ends hold id on the leader, once.
func (c *clusterLimits) unholder(id string) func() {
	return sync.OnceFunc(func() { c.g.ledger.deferRemote(remoteItem{Unhold: id}) })
}

// AddTokens implements gateway.LimitKeeper.
func (c *clusterLimits) AddTokens(now time.Time, names []string, n int64) {
	if !c.remote() {
		c.g.router.AddLimitTokens(now, names, n)
		return
	}
	c.g.ledger.deferRemote(remoteItem{Tokens: names, TokenCount: n})
}

// take handles, on the leader, the limits' items of a batch a server sent,
// writing each hold's refusal into ans.
func (c *clusterLimits) take(items []remoteItem, ans *remoteAnswer) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holds == nil {
		c.holds = map[string]limitHold{}
	}
	for id, h := range c.holds {
		if now.After(h.until) {
			h.release()
			delete(c.holds, id)
		}
	}
	for i, it := range items {
		switch {
		case it.Hold != "":
			release, err := c.g.router.AcquireLimits(now, it.Limits)
			if err != nil {
				ans.Errors[i] = gateway.EncodeFailure(err)
				continue
			}
			c.holds[it.Hold] = limitHold{release: release, until: now.Add(it.HoldFor)}
		case it.Unhold != "":
			if h, ok := c.holds[it.Unhold]; ok {
				h.release()
				delete(c.holds, it.Unhold)
			}
		case len(it.Tokens) > 0:
			c.g.router.AddLimitTokens(now, it.Tokens, it.TokenCount)
		}
	}
}

// callBound is the longest a call may hold its limits: its wait for a
// slot, a try of each deployment and one more, and the longest wait for
// rate limits.
func (g *Gateway) callBound() time.Duration {
	deps := 1
	for _, m := range g.cfg.Models {
		deps = max(deps, len(m.Deployments))
	}
	queue := duration(g.cfg.QueueTimeout)
	if queue <= 0 {
		queue = time.Minute
	}
	capWait := duration(g.cfg.RetryAfterCap)
	if capWait <= 0 {
		capWait = 10 * time.Second
	}
	return queue + time.Duration(deps+1)*g.grace() + capWait
}
