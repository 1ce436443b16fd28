package cluster

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// leaderLease says whether this server still leads, before it grants a
// share of the limits (shares.go): a server that lost the lead (a new
// leader elected while it was stopped or cut off) must grant none. Raft's
// own state may lag (a leader that was SIGSTOPped believes it leads until
// it hears the new term), so the lead is verified with a quorum (raft's
// VerifyLeader, one round trip) at most once per leaseFresh: a grant
// comes within leaseFresh of a proof that this server led.
type leaderLease struct {
	srv Server
	mu  sync.Mutex // one verification at a time; the others wait for it
	// verified is when the lead was last proved (unix nanoseconds), read
	// without the lock: a call in a fresh lease takes no lock at all.
	verified   atomic.Int64
	refreshing atomic.Bool
}

// leaseFresh is how long a verification of the lead stands. Past half of
// it, a call starts a verification in the background, so that under a
// steady flow of calls none waits for one.
const leaseFresh = 100 * time.Millisecond

func (l *leaderLease) check() error {
	r := l.srv.Raft()
	if r == nil || !r.IsLeader() {
		return gateway.ErrNotLeader
	}
	age := time.Duration(time.Now().UnixNano() - l.verified.Load())
	if age < leaseFresh {
		if age > leaseFresh/2 && l.refreshing.CompareAndSwap(false, true) {
			go func() {
				defer l.refreshing.Store(false)
				_ = l.verify(r)
			}()
		}
		return nil
	}
	return l.verify(r)
}

// verify proves the lead with a quorum, unless another verification just
// did.
func (l *leaderLease) verify(r *raftnode.Node) error {
	start := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.verified.Load() >= start.UnixNano() {
		return nil // proved while this one waited for the lock
	}
	if err := r.Raft.VerifyLeader().Error(); err != nil {
		return gateway.ErrNotLeader
	}
	// The proof stands from before it was asked for.
	l.verified.Store(start.UnixNano())
	return nil
}
