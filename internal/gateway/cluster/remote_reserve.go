package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// Reservations of the calls that run on a follower (docs/gateway.md,
// "Budgets that never overshoot"): the budgets are counted in one place,
// the leader's ledger, so a follower sends its calls' reservations (each
// with its call's hold of its limits: one item), charges and releases to
// the leader, batched (while one batch is under way the next gathers;
// what no call waits for rides with the next item sent), and starts a
// call once the leader has its reservation in the log. The follower keeps
// its own reservations too, for its Check.

// remoteItem is what a server sends the leader for its calls: a
// reservation, a release or a charge (the ledger's); a hold of a key's and
// its tenant's limits (Limits, named Hold, for at most HoldFor), its end
// (Unhold), or tokens counted in them (Tokens, TokenCount).
type remoteItem struct {
	Reservation *gateway.Reservation `json:"reservation,omitempty"`
	Budgets     []gateway.Budget     `json:"budgets,omitempty"`
	Release     string               `json:"release,omitempty"`
	Charge      *gateway.Charge      `json:"charge,omitempty"`

	Limits     []gateway.LimitScope `json:"limits,omitempty"`
	Hold       string               `json:"hold,omitempty"`
	HoldFor    time.Duration        `json:"hold_for,omitempty"`
	Unhold     string               `json:"unhold,omitempty"`
	Tokens     []string             `json:"tokens,omitempty"`
	TokenCount int64                `json:"token_count,omitempty"`
}

// ledgers says whether the item is the ledger's.
func (it remoteItem) ledgers() bool {
	return it.Reservation != nil || it.Release != "" || it.Charge != nil
}

// remoteAnswer is the leader's answer: an error (EncodeFailure's words)
// for each item, "" where it holds.
type remoteAnswer struct {
	Errors []string `json:"errors"`
}

// remoteBatch is one request to the leader and the calls waiting for it.
type remoteBatch struct {
	items []remoteItem
	done  chan struct{}
	errs  []error // set before done closes, one per item
	// lingering says a deferred item's own wake-up is set.
	lingering bool
}

// remoteLinger is the longest an item no call waits for waits for a batch
// to ride in.
const remoteLinger = 2 * time.Millisecond

// reserveRemote reserves r through the leader.
func (l *raftLedger) reserveRemote(ctx context.Context, r gateway.Reservation, budgets []gateway.Budget) error {
	b, i := l.sendRemote(remoteItem{Reservation: &r, Budgets: budgets})
	select {
	case <-b.done:
	case <-ctx.Done():
		// It may hold on the leader: released there too.
		l.deferRemote(remoteItem{Release: r.ID})
		return ctx.Err()
	}
	if err := b.errs[i]; err != nil {
		return err
	}
	l.mu.Lock()
	l.held[r.ID] = r
	l.mu.Unlock()
	return nil
}

// sendRemote adds items to the next batch to the leader and returns the
// batch and the first item's place in it.
func (l *raftLedger) sendRemote(its ...remoteItem) (*remoteBatch, int) {
	l.rmu.Lock()
	if l.remoteNext == nil {
		l.remoteNext = &remoteBatch{done: make(chan struct{})}
	}
	b := l.remoteNext
	i := len(b.items)
	b.items = append(b.items, its...)
	l.rmu.Unlock()
	l.kickRemote()
	return b, i
}

// deferRemote adds items no call waits for (tokens counted, the end of a
// hold, a release) to the next batch without sending it: they ride with
// the next item sent (a call's tokens and the end of its hold go with its
// charge), or leave on their own after remoteLinger.
func (l *raftLedger) deferRemote(its ...remoteItem) {
	l.rmu.Lock()
	if l.remoteNext == nil {
		l.remoteNext = &remoteBatch{done: make(chan struct{})}
	}
	b := l.remoteNext
	b.items = append(b.items, its...)
	arm := !b.lingering
	b.lingering = true
	l.rmu.Unlock()
	if arm {
		time.AfterFunc(remoteLinger, l.kickRemote)
	}
}

func (l *raftLedger) kickRemote() {
	select {
	case l.remoteKick <- struct{}{}:
	default:
	}
}

// runRemote sends the batches to the leader until stop closes.
func (l *raftLedger) runRemote(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			l.rmu.Lock()
			b := l.remoteNext
			l.remoteNext = nil
			l.rmu.Unlock()
			if b != nil {
				b.fail(fmt.Errorf("%w: the gateway is stopping", gateway.ErrUnavailable))
			}
			return
		case <-l.remoteKick:
		}
		l.rmu.Lock()
		b := l.remoteNext
		l.remoteNext = nil
		l.rmu.Unlock()
		if b == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		l.trips.Add(1)
		l.tripItems.Add(uint64(len(b.items)))
		ans, err := l.postRemote(ctx, b.items)
		cancel()
		if err != nil {
			l.log.Warn("sending gateway reservations to the leader", "items", len(b.items), "error", err)
			b.fail(fmt.Errorf("%w: reserving the call's worst case on the leader: %v", gateway.ErrUnavailable, err))
			continue
		}
		b.errs = make([]error, len(b.items))
		for i := range b.items {
			if i < len(ans.Errors) && ans.Errors[i] != "" {
				b.errs[i] = refused(http.StatusTooManyRequests, ans.Errors[i])
			}
		}
		close(b.done)
	}
}

func (b *remoteBatch) fail(err error) {
	b.errs = make([]error, len(b.items))
	for i := range b.errs {
		b.errs[i] = err
	}
	close(b.done)
}

// postRemote posts a batch to the leader's admin API (to the new leader
// after a change: Gateway.postLeader).
func (l *raftLedger) postRemote(ctx context.Context, items []remoteItem) (remoteAnswer, error) {
	var ans remoteAnswer
	body, err := json.Marshal(items)
	if err != nil {
		return ans, err
	}
	b, err := l.post(ctx, "/v1/internal/gateway/reserve", body)
	if err != nil {
		return ans, err
	}
	return ans, json.Unmarshal(b, &ans)
}

// reserveFor takes, on the leader, the reservations and releases a
// follower sent: each reservation is checked against every budget it
// counts in and held, then covered in the log (by its scopes' ceilings, or
// as itself) before the answer.
//
// An item refused already (its call's limits, clusterLimits.take) is
// skipped: its call will not start.
func (l *raftLedger) reserveFor(ctx context.Context, items []remoteItem, ans *remoteAnswer) {
	type waiting struct {
		i    int
		id   string
		b    *reserveBatch // the reservation's own entry
		ceil *ceilBatch    // or its ceilings'
	}
	var ws []waiting
	ceilings := l.ceilingsOn()
	for i, it := range items {
		if it.Charge != nil {
			l.takeRemote(*it.Charge)
			continue
		}
		if it.Release != "" {
			l.dropHeld(it.Release)
			if !ceilings {
				_, _ = l.enqueue(func(req *fsm.GatewayReserveRequest) { req.Release = append(req.Release, it.Release) })
			}
			continue
		}
		if it.Reservation == nil || ans.Errors[i] != "" {
			continue // not the ledger's (limits.go), or refused
		}
		r := *it.Reservation
		wait, err := l.hold(r, it.Budgets, ceilings)
		if err != nil {
			ans.Errors[i] = gateway.EncodeFailure(err)
			continue
		}
		if ceilings {
			if wait != nil {
				ws = append(ws, waiting{i: i, id: r.ID, ceil: wait})
			}
			continue
		}
		b, err := l.enqueue(func(req *fsm.GatewayReserveRequest) { req.Reserve = append(req.Reserve, r) })
		if err != nil {
			l.dropHeld(r.ID)
			ans.Errors[i] = gateway.EncodeFailure(err)
			continue
		}
		ws = append(ws, waiting{i: i, id: r.ID, b: b})
	}
	for _, w := range ws {
		if w.ceil != nil {
			// Held here under the ceilings, or refused.
			if err := waitCeil(ctx, w.ceil); err != nil {
				l.dropHeld(w.id)
				ans.Errors[w.i] = gateway.EncodeFailure(err)
			}
			continue
		}
		var err error
		select {
		case <-w.b.done:
			err = w.b.err
		case <-ctx.Done():
			err = ctx.Err()
		}
		// In the log now (the replica counts it under the follower's
		// ledger), or refused: not held here either way.
		l.dropHeld(w.id)
		if err != nil {
			ans.Errors[w.i] = gateway.EncodeFailure(err)
		}
	}
}

func (l *raftLedger) dropHeld(id string) {
	l.mu.Lock()
	delete(l.held, id)
	l.mu.Unlock()
}

// chargeRemote hands a charge of a call that ran here to the leader's
// ledger, which counts it at once and sends it to the log with its own
// (the calls' usage is exact on every server at once, and the log gets
// one entry a batch, not one a follower's call). When the leader cannot
// take it, it waits here, in this ledger's batches to the log: counted
// late, never lost.
func (l *raftLedger) chargeRemote(ctx context.Context, c gateway.Charge) {
	b, i := l.sendRemote(remoteItem{Charge: &c})
	wait := time.NewTimer(chargeWait)
	defer wait.Stop()
	select {
	case <-b.done:
		if b.errs[i] == nil {
			return
		}
	case <-wait.C:
		// The batch may still reach the leader: the charge is kept here
		// too.
	}
	l.mu.Lock()
	l.addPendingLocked(c)
	n := l.taken
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	// The answer waits until the charge is in the log (group-committed
	// with the others kept here), for at most chargeWait more.
	wait.Reset(chargeWait)
	for {
		l.mu.Lock()
		done, ch := l.applied >= n, l.appliedCh
		l.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-wait.C:
			return // counted late, never lost
		}
	}
}

// takeRemote takes, on the leader, a charge a follower sent: once, even
// if the follower sent it again (its request names it).
func (l *raftLedger) takeRemote(c gateway.Charge) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, dup := l.remoteSeen[c.Request]; dup && c.Request != "" {
		return
	}
	if l.remoteSeen == nil || now.After(l.remoteSwept.Add(time.Minute)) {
		for id, at := range l.remoteSeen {
			if now.Sub(at) > 2*time.Minute {
				delete(l.remoteSeen, id)
			}
		}
		if l.remoteSeen == nil {
			l.remoteSeen = map[string]time.Time{}
		}
		l.remoteSwept = now
	}
	l.remoteSeen[c.Request] = now
	l.addPendingLocked(c)
	delete(l.held, c.Reservation)
}
