package worker

import (
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// maxPending is how many deltas a silent page keeps. Past it, deltas that a
// later write to the same path superseded are dropped (their sequence numbers
// are skipped); if that is not enough, everything folds into one RESET
// carrying the whole tree. A page that never pulls costs bounded memory and
// still ends with exactly the worker's tree.
const maxPending = 4096

// collector holds a page's deltas until the page pulls them. Sequences start
// at 1 and never repeat for the life of the page; deltas at or below the
// floor were acknowledged (or folded into a RESET) and are gone.
type collector struct {
	mu      sync.Mutex // guards all below
	seq     uint64
	floor   uint64
	pending []*protocol.Delta
	waiters []*pullWaiter
	fold    func() []byte // the whole tree, for a RESET
	// held counts the messages running on the page (hold): their writes
	// do not wake a waiting pull until the message ends, or holdMax after
	// its first write (a long message, a streamed answer, still streams),
	// so a message's deltas travel together, before its reply.
	held      int
	holdTimer *time.Timer
}

// holdMax bounds how long a running message keeps its deltas from a
// waiting pull.
const holdMax = 20 * time.Millisecond

type pullWaiter struct {
	after uint64
	reply func([]*protocol.Delta, uint64)
	// answer, if set, makes the pull's answer for a message to send
	// with its reply (releaseTaking).
	answer func([]*protocol.Delta, uint64) *protocol.Envelope
	timer  *time.Timer
	done   bool
}

func (c *collector) add(op protocol.Delta_Op, path string, value []byte) {
	c.mu.Lock()
	c.seq++
	c.pending = append(c.pending, &protocol.Delta{Seq: c.seq, Op: op, Path: path, Value: value})
	if len(c.pending) > maxPending {
		c.coalesceLocked()
		if len(c.pending) > maxPending*3/4 && c.fold != nil {
			c.resetLocked()
		}
	}
	var ready []firing
	switch {
	case c.held == 0:
		ready = c.takeWaitersLocked()
	case c.holdTimer == nil && len(c.waiters) > 0:
		c.holdTimer = time.AfterFunc(holdMax, c.flushHeld)
	}
	c.mu.Unlock()
	c.fire(ready)
}

// hold keeps the page's new deltas from waking a waiting pull until
// release (at most holdMax): a message is running.
func (c *collector) hold() {
	c.mu.Lock()
	c.held++
	c.mu.Unlock()
}

// release ends a hold, waking the pulls the held deltas answer.
func (c *collector) release() { c.fire(c.endHold()) }

// endHold ends a hold and returns the pulls to wake once the last one
// ends.
func (c *collector) endHold() []firing {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held--
	if c.held > 0 {
		return nil
	}
	if c.holdTimer != nil {
		c.holdTimer.Stop()
		c.holdTimer = nil
	}
	return c.takeWaitersLocked()
}

// releaseTaking ends a message's hold like release, but the answers of the
// pulls it wakes that can be made (pullWaiter.answer) are appended to out,
// for the message to send with its reply, instead of being sent.
func (c *collector) releaseTaking(out []*protocol.Envelope) []*protocol.Envelope {
	for _, f := range c.endHold() {
		if f.w.answer == nil {
			f.w.reply(f.ds, f.seq)
			continue
		}
		out = append(out, f.w.answer(f.ds, f.seq))
	}
	return out
}

// flushHeld wakes the pulls a long message's deltas answer, holdMax after
// its first write.
func (c *collector) flushHeld() {
	c.mu.Lock()
	c.holdTimer = nil
	ready := c.takeWaitersLocked()
	c.mu.Unlock()
	c.fire(ready)
}

// coalesceLocked keeps only the last delta of each path, in sequence order.
// Replaying the survivors gives the same tree: a later write to a path
// replaces whatever an earlier one put there.
func (c *collector) coalesceLocked() {
	last := make(map[string]uint64, len(c.pending))
	for _, d := range c.pending {
		if d.Op != protocol.Delta_RESET {
			last[d.Path] = d.Seq
		}
	}
	keep := c.pending[:0]
	for _, d := range c.pending {
		if d.Op == protocol.Delta_RESET || last[d.Path] == d.Seq {
			keep = append(keep, d)
		}
	}
	for i := len(keep); i < len(c.pending); i++ {
		c.pending[i] = nil
	}
	c.pending = keep
}

// resetLocked replaces everything pending with one RESET of the whole tree.
func (c *collector) resetLocked() {
	c.seq++
	c.floor = c.seq - 1
	c.pending = append(c.pending[:0:0], &protocol.Delta{Seq: c.seq, Op: protocol.Delta_RESET, Value: c.fold()})
}

// restartClean makes the page's next delta a RESET of its (new) tree that
// carries notice, for a page whose state could not be kept.
func (c *collector) restartClean(notice string) {
	c.mu.Lock()
	c.resetLocked()
	c.pending[0].Notice = notice
	ready := c.takeWaitersLocked()
	c.mu.Unlock()
	c.fire(ready)
}

// resync makes the next delta after the returned base a RESET of the whole
// tree, for a client that lost its copy.
func (c *collector) resync() uint64 {
	c.mu.Lock()
	c.resetLocked()
	base := c.floor
	ready := c.takeWaitersLocked()
	c.mu.Unlock()
	c.fire(ready)
	return base
}

// ackLocked forgets the deltas the page has.
func (c *collector) ackLocked(after uint64) {
	if after <= c.floor {
		return
	}
	i := 0
	for i < len(c.pending) && c.pending[i].Seq <= after {
		i++
	}
	c.pending = c.pending[i:]
	if after > c.seq {
		after = c.seq
	}
	c.floor = after
}

// unservableLocked says the deltas a reader at after needs are no longer
// all held: some at or below the floor, and no RESET just above it that
// replaces them.
func (c *collector) unservableLocked(after uint64) bool {
	if after >= c.floor || c.fold == nil {
		return false
	}
	return len(c.pending) == 0 || c.pending[0].Op != protocol.Delta_RESET || c.pending[0].Seq != c.floor+1
}

func (c *collector) sinceLocked(after uint64) []*protocol.Delta {
	for i, d := range c.pending {
		if d.Seq > after {
			return append([]*protocol.Delta(nil), c.pending[i:]...)
		}
	}
	return nil
}

// pull answers with the deltas after after, at once if there are some,
// otherwise when the first arrives or wait runs out (with none).
//
// answer, if not nil, makes the answer instead of sending it, for a message
// whose deltas wake the pull (releaseTaking).
func (c *collector) pull(after uint64, wait time.Duration, reply func([]*protocol.Delta, uint64), answer func([]*protocol.Delta, uint64) *protocol.Envelope) {
	c.mu.Lock()
	if c.unservableLocked(after) {
		// The deltas after after are gone (another reader of the page
		// acknowledged them: a duplicated tab): the reader gets the whole
		// tree, never later deltas applied to a stale one.
		c.resetLocked()
	}
	c.ackLocked(after)
	if ds := c.sinceLocked(after); len(ds) > 0 || wait <= 0 {
		seq := c.seq
		c.mu.Unlock()
		reply(ds, seq)
		return
	}
	w := &pullWaiter{after: after, reply: reply, answer: answer}
	c.waiters = append(c.waiters, w)
	w.timer = time.AfterFunc(wait, func() {
		c.mu.Lock()
		if w.done {
			c.mu.Unlock()
			return
		}
		w.done = true
		for i, x := range c.waiters {
			if x == w {
				c.waiters = append(c.waiters[:i], c.waiters[i+1:]...)
				break
			}
		}
		seq := c.seq
		c.mu.Unlock()
		w.reply(nil, seq)
	})
	c.mu.Unlock()
}

type firing struct {
	w   *pullWaiter
	ds  []*protocol.Delta
	seq uint64
}

func (c *collector) takeWaitersLocked() []firing {
	if len(c.waiters) == 0 {
		return nil
	}
	var out []firing
	keep := c.waiters[:0]
	for _, w := range c.waiters {
		ds := c.sinceLocked(w.after)
		if len(ds) == 0 {
			keep = append(keep, w)
			continue
		}
		w.done = true
		w.timer.Stop()
		out = append(out, firing{w, ds, c.seq})
	}
	c.waiters = keep
	return out
}

func (c *collector) fire(fs []firing) {
	for _, f := range fs {
		f.w.reply(f.ds, f.seq)
	}
}

// cancel answers every waiting pull with nothing, for a page that closes.
func (c *collector) cancel() {
	c.mu.Lock()
	ws := c.waiters
	c.waiters = nil
	seq := c.seq
	for _, w := range ws {
		w.done = true
		w.timer.Stop()
	}
	c.mu.Unlock()
	for _, w := range ws {
		w.reply(nil, seq)
	}
}

func (c *collector) last() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}
