package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// The ceilings of the budgets' holds (fsm/gateway_ceilings.go): the
// leader's ledger holds its calls' reservations in memory (the followers'
// calls' too) and keeps, for each budget scope, a ceiling in the log over
// what they hold and the charges it has taken that the log has not
// applied. A call within its scopes' ceilings writes nothing and waits for
// nothing; one that would pass a ceiling, or outlast it, waits for one
// entry that raises it (to twice what the scope then holds, as far as the
// budget's room goes) or renews it, group-committed with every other call
// that needs one. A scope still in use is renewed in the background
// before its ceiling lapses; one unused lapses on its own.

// ceilSlack is how long a ceiling outlasts the bound of the calls it was
// written for; ceilEvery how often the ledger renews the ceilings of the
// scopes in use and forgets those lapsed.
const (
	ceilSlack = 30 * time.Second
	ceilEvery = 5 * time.Second
)

// scopeCeil is one scope's ceiling as this ledger last wrote it, and when
// a call last drew on it.
type scopeCeil struct {
	micros int64
	until  time.Time
	used   time.Time
}

// ceilBatch is one entry of ceilings and the calls waiting for it.
type ceilBatch struct {
	set  map[gateway.Scope]fsm.GatewayScopeCeiling
	done chan struct{}
	err  error // set before done closes
}

// ceilingsOn says whether the ledger keeps ceilings rather than writing
// each reservation: once every server applies them.
func (l *raftLedger) ceilingsOn() bool { return l.maps.Allows(fsm.GatewayCeilingsRequestType) }

// coverLocked makes sure, for a reservation r just held, that every one of
// its budgets' scopes has a ceiling over what the scope holds and outlasting
// r; it returns the batch to wait for when one must be written (nil: none).
func (l *raftLedger) coverLocked(r gateway.Reservation, budgets []gateway.Budget, t func(gateway.Scope) tally) *ceilBatch {
	now := time.Now()
	if b := r.Expires.Sub(now); b > l.bound {
		l.bound = b
	}
	var need []fsm.GatewayScopeCeiling
	for _, b := range budgets {
		s := b.Scope
		c := l.ceils[s]
		if c == nil {
			c = &scopeCeil{}
			l.ceils[s] = c
		}
		c.used = now
		tl := t(s)
		mine := tl.own + tl.unapplied
		if mine <= c.micros && !r.Expires.After(c.until) {
			continue
		}
		room := b.Limit - tl.spent - tl.others
		target := min(room, max(2*mine, mine+4*r.Micros, c.micros))
		need = append(need, fsm.GatewayScopeCeiling{Scope: s, Micros: max(target, mine), Until: maxTime(r.Expires.Add(l.slack), c.until)})
	}
	if len(need) == 0 {
		return nil
	}
	return l.raiseLocked(need)
}

// raiseLocked adds ceilings to the next batch and wakes its writer.
func (l *raftLedger) raiseLocked(need []fsm.GatewayScopeCeiling) *ceilBatch {
	if l.ceilNext == nil {
		l.ceilNext = &ceilBatch{set: map[gateway.Scope]fsm.GatewayScopeCeiling{}, done: make(chan struct{})}
	}
	b := l.ceilNext
	for _, c := range need {
		if o, ok := b.set[c.Scope]; ok {
			c.Micros, c.Until = max(c.Micros, o.Micros), maxTime(c.Until, o.Until)
		}
		b.set[c.Scope] = c
	}
	select {
	case l.ckick <- struct{}{}:
	default:
	}
	return b
}

// renewLocked renews the ceilings of the scopes calls drew on lately that
// would lapse within half the slack (a call under way needs none: its
// ceiling outlasts it), and forgets the lapsed ones.
func (l *raftLedger) renewLocked(now time.Time) {
	var need []fsm.GatewayScopeCeiling
	for s, c := range l.ceils {
		inUse := now.Sub(c.used) < l.slack
		switch {
		case !inUse && !c.until.After(now):
			delete(l.ceils, s)
		case inUse && c.micros > 0 && c.until.Before(now.Add(l.bound+l.slack/2)):
			need = append(need, fsm.GatewayScopeCeiling{Scope: s, Micros: c.micros, Until: now.Add(l.bound + l.slack)})
		}
	}
	if len(need) > 0 {
		l.raiseLocked(need)
	}
}

// runCeilings writes the batches of ceilings to the log, and renews them,
// until stop closes; the calls still waiting then are refused (they have
// not started).
func (l *raftLedger) runCeilings(stop <-chan struct{}) {
	t := time.NewTicker(min(ceilEvery, l.slack/4))
	defer t.Stop()
	for {
		select {
		case <-stop:
			l.mu.Lock()
			b := l.ceilNext
			l.ceilNext, l.ceilStopped = nil, true
			l.mu.Unlock()
			if b != nil {
				b.err = fmt.Errorf("%w: the gateway is stopping", gateway.ErrUnavailable)
				close(b.done)
			}
			return
		case <-t.C:
			if rn := l.srv.Raft(); rn == nil || rn.IsLeader() {
				l.mu.Lock()
				l.renewLocked(time.Now())
				l.mu.Unlock()
			}
		case <-l.ckick:
		}
		l.mu.Lock()
		b := l.ceilNext
		l.ceilNext = nil
		l.mu.Unlock()
		if b == nil {
			continue
		}
		req := fsm.GatewayCeilingsRequest{Ledger: l.id, At: time.Now().UTC()}
		for _, c := range b.set {
			req.Set = append(req.Set, c)
		}
		entry, err := fsm.Encode(fsm.GatewayCeilingsRequestType, req)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = l.srv.Apply(ctx, entry)
			cancel()
		}
		l.mu.Lock()
		if err == nil {
			l.ceilWrites++
			for _, c := range req.Set {
				sc := l.ceils[c.Scope]
				if sc == nil {
					sc = &scopeCeil{used: req.At}
					l.ceils[c.Scope] = sc
				}
				sc.micros, sc.until = c.Micros, c.Until
			}
		}
		l.mu.Unlock()
		if err != nil {
			l.log.Warn("recording gateway budget ceilings", "scopes", len(req.Set), "error", err)
			err = l.notRecorded("budget ceiling", err)
		}
		b.err = err
		close(b.done)
	}
}

// waitCeil waits for batch b, if any.
func waitCeil(ctx context.Context, b *ceilBatch) error {
	if b == nil {
		return nil
	}
	select {
	case <-b.done:
		return b.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
