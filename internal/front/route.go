package front

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// routeJob is one frame of a socket handed to a router.
type routeJob struct {
	c    *wsConn
	kind int
	msg  []byte
	open chan bool // the router's answer: the socket is still open
}

var routeJobs = sync.Pool{New: func() any { return &routeJob{open: make(chan bool, 1)} }}

// crew counts the goroutines of one kind of helper (routers, writers): how
// many run, how many wait for work now, and the fewest that waited at any
// moment since the last trim. Helpers take work from a channel with a plain
// receive (no timer, no select per piece of work) and stop when they
// receive nil: trim stops those no work needed for a whole interval, and
// the front's Close stops them all.
type crew struct {
	running atomic.Int32
	idle    atomic.Int32
	minIdle atomic.Int32
}

// took records a helper taking work.
func (w *crew) took() {
	n := w.idle.Add(-1)
	for {
		m := w.minIdle.Load()
		if n >= m || w.minIdle.CompareAndSwap(m, n) {
			return
		}
	}
}

// spare is how many helpers waited for work through the whole interval
// since the last call, and starts the next interval.
func (w *crew) spare() int {
	n := w.minIdle.Swap(w.idle.Load())
	return int(max(n, 0))
}

// routeFrame has a router route the ops of c's frame and waits for it; it
// reports whether the socket is still open. Routers are goroutines that
// outlive the frames they route: their stacks have grown to what routing
// needs, once, where a socket's reader that routed would keep that stack
// while idle, and a new goroutine for each frame would grow its own each
// time. A frame that waits (a person moving) holds its router; the next
// frame of any socket then starts another, so no socket waits for another's.
func (f *Front) routeFrame(c *wsConn, kind int, msg []byte) bool {
	j := routeJobs.Get().(*routeJob)
	j.c, j.kind, j.msg = c, kind, msg
	select {
	case f.routes <- j:
	default:
		f.routers.running.Add(1)
		go f.router(j)
	}
	open := <-j.open
	j.c, j.msg = nil, nil
	routeJobs.Put(j)
	return open
}

// router routes frames until it receives nil.
func (f *Front) router(j *routeJob) {
	defer f.routers.running.Add(-1)
	for j != nil {
		j.open <- j.c.handleFrame(j.kind, j.msg)
		f.routers.idle.Add(1)
		j = <-f.routes
		f.routers.took()
	}
}

// startWriter has an idle writer write c's answers out (wsConn.writeOut),
// or starts one. Writers, like routers, outlive their work: a write grows a
// goroutine's stack past its start, once per writer and not once per
// answer. A socket slow to take its answers holds its writer (up to the
// write timeout); the next socket's answers start another.
func (f *Front) startWriter(c *wsConn) {
	select {
	case f.writes <- c:
	default:
		f.writers.running.Add(1)
		go f.writer(c)
	}
}

// writer writes sockets' answers out until it receives nil.
func (f *Front) writer(c *wsConn) {
	defer f.writers.running.Add(-1)
	for c != nil {
		c.writeOut()
		f.writers.idle.Add(1)
		c = <-f.writes
		f.writers.took()
	}
}

// trimHelpers stops the routers and writers that waited for work through
// the whole interval since the last trim (the pinger's).
func (f *Front) trimHelpers() {
	for n := f.routers.spare(); n > 0; n-- {
		select {
		case f.routes <- nil:
		default:
			n = 0
		}
	}
	for n := f.writers.spare(); n > 0; n-- {
		select {
		case f.writes <- nil:
		default:
			n = 0
		}
	}
}

// stopHelpers stops every router and writer once it is done with its
// work; it returns when none runs.
func (f *Front) stopHelpers() {
	for f.routers.running.Load() > 0 || f.writers.running.Load() > 0 {
		select {
		case f.routes <- nil:
		case f.writes <- nil:
		case <-time.After(10 * time.Millisecond):
			// One that is busy, or was just started: look again.
		}
	}
}

// sendCtx is the context of one frame's send: the front's, with the frame's
// deadline. Its Done channel and timer are made only if someone asks for
// them, which a send does only when it has to wait (a worker being
// replaced): the common send costs no allocation and no timer. release
// ends it once the send returned.
type sendCtx struct {
	context.Context // the front's
	deadline        time.Time

	once   sync.Once
	ctx    context.Context
	cancel context.CancelFunc
	made   atomic.Bool
}

func (s *sendCtx) make() {
	s.ctx, s.cancel = context.WithDeadline(s.Context, s.deadline)
	s.made.Store(true)
}

func (s *sendCtx) Deadline() (time.Time, bool) { return s.deadline, true }

func (s *sendCtx) Done() <-chan struct{} {
	s.once.Do(s.make)
	return s.ctx.Done()
}

func (s *sendCtx) Err() error {
	s.once.Do(s.make)
	return s.ctx.Err()
}

// release stops the timer, if one was made.
func (s *sendCtx) release() {
	if s.made.Load() {
		s.cancel()
	}
}
