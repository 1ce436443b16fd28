package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// Reservations (docs/gateway.md, "Budgets that never overshoot"): the
// leader's ledger checks a call's worst case against its budgets, with
// every charge taken and every reservation held counted, holds it, and
// writes it to the log before the call starts. A batch of reservations is
// one entry: while one is in the log's hands the next gathers, so a call
// waits for about one commit. A new leader reads the reservations of the
// calls an old leader still runs from its replica until their charges
// settle them (the charge and the release are one entry: never counted
// twice) or they expire (never held for ever).

// reserveBatch is one entry of reservations and releases, and the calls
// waiting for it.
type reserveBatch struct {
	req  fsm.GatewayReserveRequest
	done chan struct{}
	err  error // set before done closes
}

// Check implements gateway.Ledger.
//
// On a follower it leaves the leader's ceilings out: they cover this
// server's calls too, and their room not yet used (the leader decides,
// as it reserves); counted as held, a budget whose room a ceiling covers
// would refuse every call here until the ceiling lapsed.
func (l *raftLedger) Check(budgets []gateway.Budget) error {
	follower := l.follower()
	l.mu.Lock()
	defer l.mu.Unlock()
	return gateway.FitBudgets(budgets, 0, spentIn(l.tallyLocked(budgets, !follower)))
}

// Reserve implements gateway.Ledger: it returns once the reservation is
// covered in the log, by its scopes' ceilings or (while a rolling update
// still runs a server without them) as itself; ErrNotLeader if this
// server lost the lead meanwhile: the call has not started and goes to
// the new leader.
func (l *raftLedger) Reserve(ctx context.Context, r gateway.Reservation, budgets []gateway.Budget) error {
	r.Ledger = l.id
	if l.follower() {
		// A call that runs here: the leader counts the budgets.
		return l.reserveRemote(ctx, r, budgets)
	}
	ceilings := l.ceilingsOn()
	if rn := l.srv.Raft(); ceilings && rn != nil && !rn.IsLeader() {
		return gateway.ErrNotLeader
	}
	wait, err := l.hold(r, budgets, ceilings)
	if err != nil {
		return err
	}
	if ceilings {
		if err := waitCeil(ctx, wait); err != nil {
			l.dropHeld(r.ID)
			return err
		}
		return nil
	}
	if !l.maps.Allows(fsm.GatewayReserveRequestType) {
		// A rolling update still runs a server that would skip the
		// entry: the reservation holds in this leader alone.
		return nil
	}
	b, err := l.enqueue(func(req *fsm.GatewayReserveRequest) { req.Reserve = append(req.Reserve, r) })
	if err == nil {
		select {
		case <-b.done:
			err = b.err
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		l.Release(r.ID)
		return err
	}
	return nil
}

// hold checks r against its budgets, with everything held counted, and
// holds it; with ceilings, it returns the batch of ceilings to wait for
// before the call starts (nil: its ceilings cover it already).
func (l *raftLedger) hold(r gateway.Reservation, budgets []gateway.Budget, ceilings bool) (*ceilBatch, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.tallyLocked(budgets, true)
	if err := gateway.FitBudgets(budgets, r.Micros, spentIn(t)); err != nil {
		return nil, err
	}
	if ceilings && l.ceilStopped {
		return nil, fmt.Errorf("%w: the gateway is stopping", gateway.ErrUnavailable)
	}
	l.held[r.ID] = r
	if !ceilings {
		return nil, nil
	}
	return l.coverLocked(r, budgets, t), nil
}

// Release implements gateway.Ledger.
func (l *raftLedger) Release(id string) {
	l.mu.Lock()
	r, ok := l.held[id]
	delete(l.held, id)
	l.mu.Unlock()
	if ok && r.Ledger == l.id && l.follower() {
		l.deferRemote(remoteItem{Release: id})
		return
	}
	if ok && !l.ceilingsOn() && l.maps.Allows(fsm.GatewayReserveRequestType) {
		_, _ = l.enqueue(func(req *fsm.GatewayReserveRequest) { req.Release = append(req.Release, id) })
	}
}

// enqueue adds to the next batch and wakes its writer.
func (l *raftLedger) enqueue(add func(*fsm.GatewayReserveRequest)) (*reserveBatch, error) {
	l.rmu.Lock()
	if l.stopped {
		l.rmu.Unlock()
		return nil, fmt.Errorf("%w: the gateway is stopping", gateway.ErrUnavailable)
	}
	if l.next == nil {
		l.next = &reserveBatch{done: make(chan struct{})}
	}
	b := l.next
	add(&b.req)
	l.rmu.Unlock()
	select {
	case l.rkick <- struct{}{}:
	default:
	}
	return b, nil
}

// runReservations writes the batches to the log until stop closes; the
// calls still waiting then are refused (they have not started).
func (l *raftLedger) runReservations(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			l.rmu.Lock()
			l.stopped = true
			b := l.next
			l.next = nil
			l.rmu.Unlock()
			if b != nil {
				b.err = fmt.Errorf("%w: the gateway is stopping", gateway.ErrUnavailable)
				close(b.done)
			}
			return
		case <-l.rkick:
		}
		l.rmu.Lock()
		b := l.next
		l.next = nil
		stale := !l.staleGone
		l.rmu.Unlock()
		if b == nil {
			continue
		}
		// The first entry of this process drops the reservations of the
		// calls an earlier process of this server ran: they died with it.
		b.req.Stale = stale
		b.req.Ledger, b.req.At = l.id, time.Now().UTC()
		entry, err := fsm.Encode(fsm.GatewayReserveRequestType, b.req)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = l.srv.Apply(ctx, entry)
			cancel()
		}
		if err == nil {
			l.rmu.Lock()
			l.staleGone = true
			l.rmu.Unlock()
		} else {
			l.log.Warn("recording gateway reservations", "reservations", len(b.req.Reserve), "releases", len(b.req.Release), "error", err)
			err = l.notRecorded("reservation", err)
		}
		b.err = err
		close(b.done)
	}
}

// notRecorded is what the calls waiting for an entry of what the log did
// not take are told: ErrNotLeader when this server no longer leads (they
// go to the new leader), ErrUnavailable otherwise.
func (l *raftLedger) notRecorded(what string, err error) error {
	if r := l.srv.Raft(); r == nil || !r.IsLeader() {
		return gateway.ErrNotLeader
	}
	return fmt.Errorf("%w: recording the call's %s: %v", gateway.ErrUnavailable, what, err)
}

// HeldIn is what the reservations of the calls under way hold in scope
// s.
func (l *raftLedger) HeldIn(s gateway.Scope) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, held := spentIn(l.tallyLocked([]gateway.Budget{{Scope: s}}, true))(s)
	return held
}

// tally is what a budget scope holds, as this ledger reads it.
type tally struct {
	spent     int64 // by the charges the replica has applied
	unapplied int64 // by the charges taken here it has not applied
	own       int64 // by the reservations held here
	others    int64 // by other ledgers' reservations and ceilings in the replica
}

// spentIn reads a tally as FitBudgets counts: what the charges have
// spent and what reservations hold.
func spentIn(t func(gateway.Scope) tally) func(gateway.Scope) (int64, int64) {
	return func(s gateway.Scope) (int64, int64) {
		x := t(s)
		return x.spent + x.unapplied, x.own + x.others
	}
}

// tallyLocked reads, for each of budgets' scopes, what the charges have
// spent (the replica's, and those taken here it has not applied) and what
// reservations hold (those taken here, and those of other servers'
// ledgers in the replica that have not expired, or the ceilings over
// them; the ceilings only if ceilings).
func (l *raftLedger) tallyLocked(budgets []gateway.Budget, ceilings bool) func(gateway.Scope) tally {
	scopes := make([]gateway.Scope, len(budgets))
	for i, b := range budgets {
		scopes[i] = b.Scope
	}
	spent, applied := l.maps.GatewaySpentIn(scopes, l.id)
	inflight := l.inflight != nil && l.inflight.Batch > applied // not applied yet
	// A reservation past its expiry holds nothing, here as in the log
	// (its call cannot run past it).
	now := time.Now()
	for id, r := range l.held {
		if !r.Expires.After(now) {
			delete(l.held, id)
		}
	}
	// Other servers' ledgers' reservations in the log (written one by
	// one while a rolling update runs a server without ceilings). Those
	// of an earlier process of this server died with it (the first entry
	// of this one drops them from the log); those a charge taken here
	// settles (a follower's call's, whose charge the log has not applied
	// yet) are counted as the charge.
	others := l.maps.GatewayHeldByOthers(l.id, now)
	if len(others) > 0 {
		settled := map[string]bool{}
		for _, ch := range l.unappliedLocked(applied) {
			if ch.Reservation != "" {
				settled[ch.Reservation] = true
			}
		}
		others = slices.DeleteFunc(others, func(r gateway.Reservation) bool {
			return strings.HasPrefix(r.Ledger, l.srv.Name()+"/") || settled[r.ID]
		})
	}
	// Other ledgers' ceilings count whole, an earlier process of this
	// server's too: the followers' calls it covered may still run.
	var ceils []int64
	if ceilings && l.ceilingsOn() {
		ceils = l.maps.GatewayCeilingsIn(scopes, l.id, now)
	}
	return func(s gateway.Scope) tally {
		var t tally
		for i, sc := range scopes {
			if sc == s {
				t.spent = spent[i]
				if ceils != nil {
					t.others = ceils[i]
				}
				break
			}
		}
		t.unapplied = l.pendingSums.in(s)
		if inflight {
			t.unapplied += l.inflightSums.in(s)
		}
		for _, r := range l.held {
			if r.In(s) {
				t.own += r.Micros
			}
		}
		for i := range others {
			if others[i].In(s) {
				t.others += others[i].Micros
			}
		}
		return t
	}
}
