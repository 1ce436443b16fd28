package worker

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// account is what one user has consumed on this worker since they arrived.
// The probe reports the accounts that changed since the previous probe, so
// that the supervisor can tell who is heavy on a saturated worker.
type account struct {
	busy       atomic.Int64 // nanoseconds in the user's handlers
	frames     atomic.Uint64
	stateBytes atomic.Uint64 // bytes written into the user's trees
	pages      atomic.Int64  // the user's open pages here
	// held is the size of the user's state here, roughly (sizeHint).
	held  atomic.Int64
	dirty atomic.Bool
}

// accountLocked returns the user's account, creating it. rt.mu is held.
func (rt *runtime) accountLocked(key string) *account {
	a := rt.accounts[key]
	if a == nil {
		a = &account{}
		if rt.accounts == nil {
			rt.accounts = map[string]*account{}
		}
		rt.accounts[key] = a
		rt.grewLocked()
	}
	return a
}

// charge records one handled frame of a user who still has an account (a
// frame that released their last connection closed it).
func (rt *runtime) charge(key string, began time.Time) {
	rt.mu.Lock()
	a := rt.accounts[key]
	rt.mu.Unlock()
	if a == nil {
		return
	}
	a.busy.Add(int64(time.Since(began)))
	a.frames.Add(1)
	a.dirty.Store(true)
}

// wrote records bytes written into a page tree of the session's user.
func (s *Session) wrote(n int) {
	if a := s.acct; a != nil {
		a.stateBytes.Add(uint64(n))
		a.held.Add(int64(n))
		a.dirty.Store(true)
	}
}

// dropAccountLocked forgets a user who left; the next probe says so.
func (rt *runtime) dropAccountLocked(key string) {
	if _, ok := rt.accounts[key]; ok {
		delete(rt.accounts, key)
		rt.left = append(rt.left, key)
	}
}

// usageLocked lists the accounts that changed since the previous call, and
// the users who left. rt.mu is held.
func (rt *runtime) usageLocked() ([]*protocol.UserUsage, []string) {
	var out []*protocol.UserUsage
	for key, a := range rt.accounts {
		if !a.dirty.Swap(false) {
			continue
		}
		var queued int64
		if u := rt.users[key]; u != nil {
			u.mu.Lock()
			queued = int64(len(u.queue))
			u.mu.Unlock()
		}
		out = append(out, &protocol.UserUsage{
			Pages:       a.pages.Load(),
			User:        key,
			BusySeconds: math.Round(float64(a.busy.Load())/1e3) / 1e6,
			Frames:      a.frames.Load(),
			StateBytes:  a.stateBytes.Load(),
			Queued:      queued,
		})
	}
	left := rt.left
	rt.left = nil
	return out, left
}

// countPages counts n pages opened (or closed, n < 0) on session s, for the
// worker and for the account of its person.
func (rt *runtime) countPages(s *Session, n int64) {
	rt.pages.Add(n)
	if a := s.acct; a != nil {
		a.pages.Add(n)
		a.dirty.Store(true)
	}
}
