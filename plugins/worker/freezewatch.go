package worker

import (
	"fmt"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A freeze waits in the person's mailbox behind the frames queued before
// it. The mover bounds that wait (Freeze.wait_ms), and lets a site request
// that is running in the app (a slow report, an upload) finish up to a
// longer bound (request_wait_ms): a move then waits for the request instead
// of rolling back. A page's message is meant to be quick: one stuck past
// wait_ms rolls the move back. The worker enforces both bounds, because
// only it knows whether the person's request is in the app or the mailbox
// is just stuck.

// freezeWatchTick is how often an overdue freeze looks again whether the
// person's frame is still running.
const freezeWatchTick = 50 * time.Millisecond

// freezeWatch is one freeze waiting in a mailbox, with its bounds.
type freezeWatch struct {
	id, waitMs, requestWaitMs uint64
	user                      string
	since                     time.Time
	timer                     *time.Timer
	// Guarded by rt.mu: begun when the mailbox runs the freeze, answered
	// when the worker refused it for being late.
	begun, answered bool
}

// watchFreeze starts the bounds of a freeze just queued.
func (rt *runtime) watchFreeze(id uint64, fz *protocol.Freeze) {
	if fz.WaitMs == 0 {
		return
	}
	w := &freezeWatch{id: id, user: fz.User, since: time.Now(), waitMs: uint64(fz.WaitMs), requestWaitMs: uint64(max(fz.RequestWaitMs, fz.WaitMs))}
	rt.mu.Lock()
	if rt.freezeWatches == nil {
		rt.freezeWatches = map[uint64]*freezeWatch{}
	}
	rt.freezeWatches[id] = w
	w.timer = time.AfterFunc(time.Duration(fz.WaitMs)*time.Millisecond, func() { rt.freezeOverdue(w) })
	rt.mu.Unlock()
}

// freezeOverdue runs when a freeze passed its wait: it waits on while the
// person's frame is in the app (up to request_wait), else refuses it.
func (rt *runtime) freezeOverdue(w *freezeWatch) {
	rt.mu.Lock()
	if w.begun {
		rt.mu.Unlock()
		return
	}
	waited := time.Since(w.since)
	u := rt.users[w.user]
	inApp := u != nil && u.inRequest.Load()
	if inApp && waited < time.Duration(w.requestWaitMs)*time.Millisecond {
		w.timer.Reset(freezeWatchTick)
		rt.mu.Unlock()
		return
	}
	w.answered = true
	delete(rt.freezeWatches, w.id)
	rt.mu.Unlock()
	why := "the person's mailbox did not reach it"
	if inApp {
		why = "the person's request in the app did not finish"
	}
	_ = rt.peer.ReplyError(w.id, protocol.Error_UNAVAILABLE, fmt.Sprintf("freezing %q: %s within %v", w.user, why, waited.Round(time.Millisecond)))
}

// freezeBegins says the mailbox runs the freeze id; it reports whether the
// freeze is still to be answered (false: it was refused for being late,
// and the mover rolled back).
func (rt *runtime) freezeBegins(id uint64) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	w := rt.freezeWatches[id]
	if w == nil {
		return true
	}
	delete(rt.freezeWatches, id)
	w.begun = true
	w.timer.Stop()
	return !w.answered
}
