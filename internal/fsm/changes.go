package fsm

import "github.com/stickyd/stickyd/internal/placement"

// maxTrackedChanges bounds the people remembered as changed: past it, the
// reader is told to read everyone again (cheaper than a set that large).
const maxTrackedChanges = 1 << 18

// changes remembers which people changed since a reader last took them, so
// that a reader publishing the maps elsewhere (the Consul mirror) writes
// only them instead of everyone each time.
type changes struct {
	on    bool
	users map[string]struct{}
	// all asks the reader to read everyone: a restore, an agent's
	// registration (hosts of workers), a catalog change (groups of
	// workers), or too many changes.
	all bool
}

// changedLocked records that user changed.
func (c *changes) changedLocked(user string) {
	if !c.on || c.all {
		return
	}
	if len(c.users) >= maxTrackedChanges {
		c.everyoneLocked()
		return
	}
	c.users[user] = struct{}{}
}

// everyoneLocked records that everyone must be read again.
func (c *changes) everyoneLocked() {
	if !c.on {
		return
	}
	c.all = true
	clear(c.users)
}

// TakeChanges returns the index of the last applied entry and the people
// who changed up to it since the previous call (their placement, or a
// missing entry for one the maps no longer hold), and starts a new set.
// all reports that everyone must be read instead (then users is nil): the
// first call, and after a restore, a registration or a catalog change.
func (f *FSM) TakeChanges() (index uint64, users map[string]*placement.UserInfo, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := &f.changes
	if !c.on {
		c.on, c.users = true, map[string]struct{}{}
		return f.index, nil, true
	}
	if c.all {
		c.all = false
		return f.index, nil, true
	}
	users = make(map[string]*placement.UserInfo, len(c.users))
	for u := range c.users {
		if h, ok := f.state.Users.get(u); ok {
			in := info(u, h)
			users[u] = &in
		} else {
			users[u] = nil
		}
	}
	if len(c.users) > 1024 {
		c.users = map[string]struct{}{} // a burst's room is given back
	} else {
		clear(c.users)
	}
	return f.index, users, false
}
