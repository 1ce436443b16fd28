package worker

import (
	"fmt"
	"runtime/debug"
	"sync"
	"time"
)

// sitePool runs a Site's HTTP requests on at most workers goroutines, with at
// most queueMax requests waiting for one. The goroutines start when requests
// arrive and end when none waits: an idle site costs no goroutine.
//
// The pool keeps no order of its own. Per-person order comes from the
// mailboxes: a mailbox hands one request to the pool and waits for it before
// it runs the next frame, so a person has at most one request in the pool.
// The pool never touches the runtime's state and its lock is never held with
// rt.mu: the channel's reader (probes, table changes, evictions) never waits
// for it.
type sitePool struct {
	workers, queueMax int

	mu     sync.Mutex // guards active, queue, urgent, hurry and closed
	active int        // goroutines serving requests
	queue  []*siteJob // requests waiting, in arrival order
	// urgent are the waiting requests of people a freeze waits for: they
	// are served before the queue, so a move waits for one free goroutine,
	// not for the whole queue.
	urgent []*siteJob
	// hurry counts, per user key, the freezes queued in the person's
	// mailbox and not yet run.
	hurry  map[string]int
	closed bool

	wg sync.WaitGroup // the serving goroutines
}

// siteJob is one request handed to the pool.
type siteJob struct {
	user  string
	serve func()
	since time.Time // when it was handed over
	done  chan struct{}
	// Set before done closes:
	waited   time.Duration // from hand-over to start
	err      error         // the request never ran
	panicked *handlerPanic
	// detached is set (under the pool's mu) when the request streams and
	// its goroutine left the pool.
	detached bool
	// began is closed when the request starts running (waited is set).
	began chan struct{}
}

// waitedFor is how long the job waited for a goroutine; it is called once
// the job streams, so it has begun.
func (j *siteJob) waitedFor() time.Duration {
	<-j.began
	return j.waited
}

// handlerPanic carries a handler's panic from the pool to the mailbox that
// waits for it, where it fails that frame only (runFrame).
type handlerPanic struct {
	value any
	stack []byte
}

func (p *handlerPanic) String() string { return fmt.Sprint(p.value) }

func newSitePool(workers, queueMax int) *sitePool {
	return &sitePool{workers: workers, queueMax: queueMax, hurry: map[string]int{}}
}

// serve runs fn on the pool for the person with user key user and waits
// for it, or until started is closed: fn's response streams, and fn goes
// on outside the pool (detach), the person's mailbox no longer waiting for
// it (streamed). It returns how long fn waited for a goroutine, or an
// unavailable error at once when the queue is full or the pool is closed.
// A panic in fn before it streams is raised again here. The wait has no
// timeout: a request that started runs to its end (its context ends with
// the worker), and close ends the wait of one that did not.
func (p *sitePool) serve(user string, fn func(), started chan struct{}) (waited time.Duration, streamed bool, err error) {
	j := &siteJob{user: user, serve: fn, done: make(chan struct{}), began: make(chan struct{})}
	if err := p.submit(j); err != nil {
		return 0, false, err
	}
	select {
	case <-j.done:
	case <-started:
		p.detach(j)
		return j.waitedFor(), true, nil
	}
	if j.panicked != nil {
		panic(j.panicked)
	}
	return j.waited, false, j.err
}

// detach lets j's goroutine leave the pool while it goes on serving a
// streamed response: the pool counts it no more, and a waiting request
// takes its place at once. The goroutine ends when the stream does.
func (p *sitePool) detach(j *siteJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	j.detached = true
	p.active--
	if p.closed {
		return
	}
	next := pop(&p.urgent)
	if next == nil {
		next = pop(&p.queue)
	}
	if next != nil {
		p.active++
		p.wg.Add(1)
		go p.work(next)
	}
}

var errSiteStopping = unavailable{fmt.Errorf("the worker is stopping; retry")}

func (p *sitePool) submit(j *siteJob) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errSiteStopping
	}
	j.since = time.Now()
	if p.active < p.workers {
		// Nothing waits (a goroutine leaves only when both queues are
		// empty): serve it now.
		p.active++
		p.wg.Add(1)
		go p.work(j)
		return nil
	}
	if p.hurry[j.user] > 0 {
		// A freeze waits for this person: ahead of the queue, and past
		// its bound (a freeze is one per moving person).
		p.urgent = append(p.urgent, j)
		return nil
	}
	if len(p.queue) >= p.queueMax {
		return unavailable{fmt.Errorf("the site is busy: %d requests are waiting; retry shortly", len(p.queue))}
	}
	p.queue = append(p.queue, j)
	return nil
}

// work serves j, then the waiting requests, until none is left. A job's
// caller is told it ended only once its goroutine took the next job or left
// the pool, so a request answered no longer holds a place in it.
func (p *sitePool) work(j *siteJob) {
	defer p.wg.Done()
	for j != nil {
		j.run()
		next := p.next(j)
		close(j.done)
		j = next
	}
}

// next takes the next waiting request after done, or retires the calling
// goroutine: at once when done was detached (it left the pool already).
func (p *sitePool) next(done *siteJob) *siteJob {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done.detached {
		return nil
	}
	if j := pop(&p.urgent); j != nil {
		return j
	}
	if j := pop(&p.queue); j != nil {
		return j
	}
	p.active--
	return nil
}

// pop takes the first job of q, or returns nil.
func pop(q *[]*siteJob) *siteJob {
	if len(*q) == 0 {
		return nil
	}
	j := (*q)[0]
	(*q)[0] = nil
	*q = (*q)[1:]
	return j
}

func (j *siteJob) run() {
	j.waited = time.Since(j.since)
	close(j.began)
	defer func() {
		if r := recover(); r != nil {
			j.panicked = &handlerPanic{value: r, stack: debug.Stack()}
		}
	}()
	j.serve()
}

// expedite is called when a freeze of user is queued in their mailbox: the
// person's waiting request, and any they hand over before the freeze runs,
// go ahead of the queue. settle undoes it once the freeze ran.
func (p *sitePool) expedite(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hurry[user]++
	kept := p.queue[:0]
	for _, j := range p.queue {
		if j.user == user {
			p.urgent = append(p.urgent, j)
		} else {
			kept = append(kept, j)
		}
	}
	clear(p.queue[len(kept):])
	p.queue = kept
}

func (p *sitePool) settle(user string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hurry[user]--; p.hurry[user] <= 0 {
		delete(p.hurry, user)
	}
}

// waiting is the number of requests waiting for a goroutine.
func (p *sitePool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) + len(p.urgent)
}

// close refuses new requests, ends the wait of those that did not start,
// and waits for those running. Idempotent.
func (p *sitePool) close() {
	p.mu.Lock()
	p.closed = true
	pending := append(p.urgent, p.queue...)
	p.urgent, p.queue = nil, nil
	p.mu.Unlock()
	for _, j := range pending {
		j.err = errSiteStopping
		close(j.done)
	}
	p.wg.Wait()
}
