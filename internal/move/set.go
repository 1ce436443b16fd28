package move

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Request is one person's part in a set that takes the road together.
type Request struct {
	User string
	// To is the worker they go to; ignored when parking (their own).
	To string
}

// Options tune a MoveSet.
type Options struct {
	// Reason is counted in the metrics ("drain", "promote", "park", ...).
	Reason string
	// Park makes each person's own worker their destination: they end
	// parked where they live (a stop), and nothing is delivered or evicted.
	Park bool
	// Evict, with Park, has the worker let each parked person go (idle
	// parking: the worker stays up, and frees their memory); they wake
	// there from their package at their next frame.
	Evict bool
	// Freeze bounds each person's freeze; zero means FreezeTimeout.
	Freeze time.Duration
	// Parallel bounds how many people are between barrier and reassignment
	// at once (their freezes run concurrently). Default 64.
	Parallel int
}

// maxParts bounds the people of one log entry (about 150 bytes each).
const maxParts = 1024

// settleRetries bounds how many entries a barrier's drop is written in
// before it is given up to the next start's clean-up (abortStuckMoves):
// each entry already waits for a leader within its own bound.
const settleRetries = 5

// traveller is one person on the road.
type traveller struct {
	before placement.UserInfo // the maps before the barrier
	res    Result
	start  time.Time
	epoch  uint64 // the move's, once the barrier is up
	// After the freeze, one of: commit (a package, or none when the old
	// worker died: lost says so), or cause (roll back).
	commit *fsm.MoveCommitRequest
	lost   error
	cause  error
	// unsure is set when the entry raising the barrier failed: it may have
	// been applied, so it is dropped, and the person told it failed.
	unsure  error
	retries int
	// base and baseDigest name the precopy staged at the destination, if
	// any (stored as baseDigest until the person wakes).
	base       uint64
	baseDigest string
}

// MoveSet moves a set of people by the one road, in batches: one log entry
// raises the barriers of many people at once, their workers freeze them
// concurrently (at most opt.Parallel people between barrier and
// reassignment), and one entry reassigns all those whose freeze finished
// since the last, rolls back the others and raises the next barriers. While
// entries are being written (at most maxEntries at once), the freezes that
// finish wait for the next: under load an entry carries many people, and a
// set of one costs what a single move always did.
//
// Each person's outcome is their own (one person's rollback never rolls
// back another) and is told to done, from this goroutine, once per
// request. MoveSet returns when every person is settled. A ctx that ends
// stops new barriers (the people not begun are told ctx's error); those
// already on the road are settled.
func (m *Mover) MoveSet(ctx context.Context, reqs []Request, opt Options, done func(Result, error)) {
	if opt.Freeze <= 0 {
		opt.Freeze = m.cfg.FreezeTimeout
	}
	if opt.Parallel <= 0 {
		opt.Parallel = 64
	}
	if opt.Reason == "" {
		opt.Reason = "admin"
	}
	finish := func(t *traveller, err error) {
		m.onRoad.CompareAndDelete(t.res.User, t)
		t.res.Duration = time.Since(t.start)
		m.moves.WithLabelValues(opt.Reason, t.res.Outcome).Inc()
		if t.res.Outcome == Moved {
			m.seconds.Observe(t.res.Duration.Seconds())
		}
		done(t.res, err)
	}
	ready := map[string]bool{}
	if !opt.Park {
		for _, w := range m.workers.Ready() {
			ready[w] = true
		}
	}
	queue := make([]*traveller, 0, len(reqs))
	for _, r := range reqs {
		t := &traveller{start: time.Now(), res: Result{User: r.User, To: r.To, Outcome: Failed}}
		u, ok := m.maps.User(r.User)
		if !ok {
			verb := "moving"
			if opt.Park {
				verb = "parking"
			}
			finish(t, fmt.Errorf("%s %q: %w", verb, r.User, fsm.ErrNoUser))
			continue
		}
		t.before, t.res.From = u, u.Worker
		switch {
		case opt.Park:
			t.res.To = u.Worker
		case u.Worker == r.To:
			finish(t, fmt.Errorf("moving %q: %w: they already live on %s", r.User, ErrBadDestination, r.To))
			continue
		case !ready[r.To]:
			finish(t, fmt.Errorf("moving %q: %w: worker %q is not ready", r.User, ErrBadDestination, r.To))
			continue
		}
		queue = append(queue, t)
	}

	var (
		frozen  = make(chan *traveller, opt.Parallel)
		entries = make(chan written, maxEntries)
		onRoad  int // people between their begin's entry and their outcome
		writing int // entries being written
		pending []*traveller
		// Precopies run ahead of the barriers: a person joins the queue
		// once theirs is staged (or was not worth it).
		prepared  chan *traveller
		preparing int
	)
	if pre, ok := m.workers.(Precopier); ok && !opt.Park && len(queue) > 0 {
		prepared = make(chan *traveller, len(queue))
		preparing = len(queue)
		go m.precopyAll(ctx, pre, queue, opt, prepared)
		queue = nil
	}
	for len(queue) > 0 || onRoad > 0 || preparing > 0 {
		if ctx.Err() != nil && len(queue) > 0 {
			for _, t := range queue {
				m.dropBase(t)
				finish(t, fmt.Errorf("moving %q: %w", t.res.User, ctx.Err()))
			}
			queue = nil
			continue
		}
		n := min(opt.Parallel-onRoad, len(queue), maxParts-min(len(pending), maxParts))
		if writing < maxEntries && (len(pending) > 0 || n > 0) {
			// Whatever is ready goes in the next entry; while entries are
			// being written, more gather for the one after.
			var e written
			e.settle = pending
			if len(e.settle) > maxParts {
				e.settle = e.settle[:maxParts]
			}
			pending = pending[len(e.settle):]
			if n > 0 {
				e.begin, queue = queue[:n], queue[n:]
				onRoad += n
			}
			writing++
			go m.write(ctx, e, entries)
			continue
		}
		select {
		case t := <-prepared:
			preparing--
			queue = append(queue, t)
		case t := <-frozen:
			pending = append(pending, t)
		case e := <-entries:
			writing--
			pending = m.settled(ctx, e, opt, frozen, pending, func(t *traveller, err error) {
				onRoad--
				finish(t, err)
			})
		}
	}
}

// maxEntries is how many of a set's entries are written at once: raft
// commits entries written together with one disk write, so a few in flight
// keep each person's pause short without giving up the batching.
const maxEntries = 3

// written is one entry of a set: the people whose barrier it raises, and
// those it settles (reassigns, or rolls back), with the outcome.
type written struct {
	begin, settle []*traveller
	commits       []*traveller
	aborts        []*traveller
	out           fsm.MoveBatchResult
	err           error
}

// write writes e's entry and hands it back on done.
func (m *Mover) write(ctx context.Context, e written, done chan<- written) {
	var req fsm.MoveBatchRequest
	now := time.Now()
	for _, t := range e.begin {
		t.start = now
		// Marked before the entry: a roll-back that reads the maps after
		// it must find the person already claimed.
		m.onRoad.LoadOrStore(t.res.User, t)
		req.Begin = append(req.Begin, fsm.MoveBeginRequest{User: t.res.User, From: t.before.Worker, To: t.res.To, Epoch: t.before.Epoch})
	}
	for _, t := range e.settle {
		if t.commit != nil {
			t.commit.Now = now.UnixNano()
			req.Commit = append(req.Commit, *t.commit)
			e.commits = append(e.commits, t)
		} else {
			req.Abort = append(req.Abort, fsm.MoveAbortRequest{User: t.res.User, Epoch: t.epoch})
			e.aborts = append(e.aborts, t)
		}
	}
	// Barriers already up are dropped whatever ctx says: nobody is left
	// behind one.
	actx, cancel := ctx, context.CancelFunc(func() {})
	if len(e.settle) > 0 {
		actx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		// Unless the caller ended ctx because the log is gone: then
		// nobody can drop them, and waiting only spends the caller's time.
		stop := context.AfterFunc(ctx, func() {
			if errors.Is(context.Cause(ctx), ErrLogGone) {
				cancel()
			}
		})
		defer stop()
	}
	e.out, e.err = m.applyBatch(actx, req)
	cancel()
	if e.err != nil && len(e.settle) > 0 {
		time.Sleep(100 * time.Millisecond) // the log is failing: do not spin
	}
	done <- e
}

// settled tells the outcomes of a written entry: the people whose barrier
// it raised start their freeze, those it reassigned or rolled back are
// done. It returns pending with whoever must be written again.
func (m *Mover) settled(ctx context.Context, e written, opt Options, frozen chan<- *traveller, pending []*traveller, done func(*traveller, error)) []*traveller {
	if e.err != nil {
		for _, t := range e.begin {
			// It may have been applied: drop it to be sure.
			t.epoch = t.before.Epoch + 1
			t.unsure = fmt.Errorf("moving %q: raising the barrier: %w", t.res.User, e.err)
			pending = append(pending, t)
		}
		for _, t := range e.settle {
			if t.retries++; t.retries < settleRetries {
				pending = append(pending, t)
				continue
			}
			m.cfg.Logger.Error("could not drop a move's barrier; the next start rolls it back", "user", t.res.User, "error", e.err)
			done(t, fmt.Errorf("moving %q: dropping the barrier: %w", t.res.User, e.err))
		}
		return pending
	}
	for i, t := range e.begin {
		p := e.out.Begin[i]
		if perr := p.Err(); perr != nil {
			done(t, fmt.Errorf("moving %q: raising the barrier: %w", t.res.User, perr))
			continue
		}
		t.epoch = p.User.Epoch
		t.res.Epoch = t.epoch
		go func() {
			m.freeze(ctx, t, opt)
			frozen <- t
		}()
	}
	for i, t := range e.commits {
		if perr := e.out.Commit[i].Err(); perr != nil {
			m.dropBase(t)
			if t.lost == nil {
				m.thaw(ctx, t)
			}
			done(t, m.rolledBack(&t.res, fmt.Errorf("reassigning: %w", perr)))
			continue
		}
		m.arrived(ctx, t, opt)
		done(t, t.lost)
	}
	for i, t := range e.aborts {
		perr := e.out.Abort[i].Err()
		switch {
		case t.unsure != nil:
			done(t, t.unsure)
		case perr != nil:
			t.res.Outcome = RolledBack
			done(t, fmt.Errorf("moving %q: rolling back after %v: %w", t.res.User, t.cause, perr))
		default:
			m.dropBase(t)
			m.thaw(ctx, t)
			done(t, m.rolledBack(&t.res, t.cause))
		}
	}
	return pending
}

// freezeSlack is what a freeze's call waits past the bounds the worker
// enforces, for the answer to come back.
const freezeSlack = time.Second

// millis is d in whole milliseconds, at least 1, for the channel.
func millis(d time.Duration) uint32 {
	return uint32(max(d/time.Millisecond, 1))
}

// freeze has the person's old worker hand them over, and stores the
// package: the old worker runs what is already in the person's mailbox (a
// wake included), then hands over everything and refuses the rest. A
// parked person the worker never woke is absent there: their parked package
// stays the truth.
func (m *Mover) freeze(ctx context.Context, t *traveller, opt Options) {
	user, from, to := t.res.User, t.before.Worker, t.res.To
	// The worker bounds the freeze itself (opt.Freeze, or requestWait while
	// the person's site request runs in the app); the call's own timeout, past
	// both, is for a worker or a host that does not answer at all.
	requestWait := opt.Freeze
	if !opt.Park {
		requestWait = max(m.cfg.RequestWait, opt.Freeze)
	}
	fstart := time.Now()
	var fz *protocol.Frozen
	var err error
	var cancel context.CancelFunc
	if pre, ok := m.workers.(Precopier); ok {
		var fctx context.Context
		fctx, cancel = context.WithTimeout(ctx, requestWait+freezeSlack)
		fz, err = pre.FreezeWith(fctx, from, &protocol.Freeze{User: user, Epoch: t.epoch, Base: t.base, BaseDigest: t.baseDigest,
			WaitMs: millis(opt.Freeze), RequestWaitMs: millis(requestWait)})
	} else {
		var fctx context.Context
		fctx, cancel = context.WithTimeout(ctx, opt.Freeze)
		fz, err = m.workers.Freeze(fctx, from, user, t.epoch)
	}
	t.res.Freeze = time.Since(fstart)
	cancel()
	if err != nil || fz.FromBase == 0 {
		m.dropBase(t) // not used: whatever the freeze said is whole
	}
	switch {
	case err != nil && isWorkerGone(err):
		m.cfg.Logger.Warn("worker died during a move; reassigning without state", "user", user, "from", from, "error", err)
		t.commit = &fsm.MoveCommitRequest{User: user, To: to, Epoch: t.epoch}
		t.lost = fmt.Errorf("moving %q: %w (%v)", user, ErrStateLost, err)
		return
	case err != nil:
		t.cause = fmt.Errorf("freezing: %w", err)
		return
	}
	t.res.Bytes, t.res.Conns, t.res.Pages, t.res.FromBase = len(fz.Package), int(fz.Conns), int(fz.Pages), int(fz.FromBase)
	var digest string
	if fz.Absent && t.before.State == placement.StateParked {
		digest = t.before.Package
		if opt.Park && !m.store.Has(digest) {
			t.cause = fmt.Errorf("%w: %s", park.ErrNotFound, digest)
			return
		}
	} else {
		// The package is stored, content-addressed, before the maps point
		// anywhere else.
		digest, err = m.keep(fz.Package, park.DigestOfSum(fz.Sha256), opt.Park)
		if err != nil {
			t.cause = err
			return
		}
	}
	t.res.Package = digest
	if d, ok := m.workers.(Deliverer); ok && !opt.Park {
		pkg := fz.Package
		if fz.Absent {
			pkg, _ = m.store.Get(digest) // elsewhere: the wake fetches it
			if base := protocol.PackageBase(pkg); base != "" {
				// Parked as the changes since a precopy: that goes too.
				if b, err := m.store.Get(base); err == nil {
					if err := d.Deliver(ctx, to, base, b); err != nil {
						t.cause = err
						return
					}
				}
			}
		}
		if pkg != nil {
			if err := d.Deliver(ctx, to, digest, pkg); err != nil {
				m.dropBase(t)
				t.cause = err
				return
			}
		}
	}
	t.commit = &fsm.MoveCommitRequest{User: user, To: to, Epoch: t.epoch, Package: digest}
}

// precopyAll precopies each person of list (at most opt.Parallel at once)
// and hands them on to prepared, staged or not.
func (m *Mover) precopyAll(ctx context.Context, pre Precopier, list []*traveller, opt Options, prepared chan<- *traveller) {
	sem := make(chan struct{}, opt.Parallel)
	for _, t := range list {
		if ctx.Err() != nil {
			prepared <- t
			continue
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			m.precopy(ctx, pre, t, opt)
			prepared <- t
		}()
	}
}

// precopy copies a person to their destination ahead of their barrier. A
// person too small for it to pay, or whose workers do not precopy, goes
// without: anything that fails here only makes their freeze a full one.
func (m *Mover) precopy(ctx context.Context, pre Precopier, t *traveller, opt Options) {
	from, to, user := t.before.Worker, t.res.To, t.res.User
	if _, no := m.noPrecopy.Load(from); no {
		return
	}
	if _, no := m.noPrecopy.Load(to); no {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, precopyTimeout)
	defer cancel()
	unhandled := func(worker string, err error) {
		var re *channel.RemoteError
		if errors.As(err, &re) && re.Code == protocol.Error_BAD_REQUEST {
			m.noPrecopy.Store(worker, true)
		}
		m.cfg.Logger.Debug("no precopy; the freeze hands over everything", "user", user, "worker", worker, "error", err)
	}
	// The copy is taken in the person's mailbox: one busy past the
	// freeze's bound (a held request) moves by a full freeze instead.
	pctx, pcancel := context.WithTimeout(ctx, opt.Freeze)
	pc, err := pre.Precopy(pctx, from, user)
	pcancel()
	if err != nil {
		unhandled(from, err)
		return
	}
	if pc.Small || len(pc.Package) == 0 {
		return
	}
	digest, err := m.keep(pc.Package, "", false)
	if err != nil {
		return
	}
	drop := func() { _ = m.store.Delete(digest) }
	if d, ok := m.workers.(Deliverer); ok {
		if err := d.Deliver(ctx, to, digest, pc.Package); err != nil {
			drop()
			return
		}
	}
	// Only a destination that staged it takes packages that continue a
	// precopy; a wake whose staged copy went is sent it again.
	if err := pre.Stage(ctx, to, user, digest, pc.Package); err != nil {
		drop()
		unhandled(to, err)
		return
	}
	t.base, t.baseDigest, t.res.Precopied = pc.Base, digest, len(pc.Package)
}

// dropBase lets go of a precopy the person will not wake from.
func (m *Mover) dropBase(t *traveller) {
	if t.baseDigest != "" {
		_ = m.store.Delete(t.baseDigest)
		t.baseDigest, t.base = "", 0
	}
}

// keep stores a package the cheapest way its use allows: a move's is held
// in memory if the store can (it stands in for the worker's memory and is
// read back at the person's next frame); a stop's is appended to the
// store's open pack if it can (it must outlive the process; the stop syncs
// the store once at the end); otherwise it is written to its file.
func (m *Mover) keep(b []byte, digest string, parking bool) (string, error) {
	if a, ok := m.store.(park.Appender); ok && parking {
		return a.Append(b, digest)
	}
	if h, ok := m.store.(park.Holder); ok && !parking {
		return h.Hold(b, digest)
	}
	return m.store.Put(b, false)
}

// arrived finishes a reassigned person's move: the package they were
// woken from before is superseded, and the old worker lets them go.
func (m *Mover) arrived(ctx context.Context, t *traveller, opt Options) {
	t.res.Outcome = Moved
	if t.lost != nil {
		t.res.Outcome = StateLost
	}
	if old := t.before.Package; old != "" && old != t.res.Package {
		_ = m.store.Delete(old) // superseded: it was woken, then frozen again
	}
	if opt.Park && !opt.Evict || t.lost != nil {
		return // the worker goes down with the agent, or is gone
	}
	user, from := t.res.User, t.before.Worker
	go func() {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := m.workers.Evict(ectx, from, user); err != nil {
			m.cfg.Logger.Warn("evicting a moved user from their old worker", "user", user, "worker", from, "error", err)
		}
	}()
}

// thaw lets the old worker run a person whose move was rolled back. The
// thaw is queued in the person's mailbox after the freeze, so it undoes
// the freeze even if the freeze completes late.
func (m *Mover) thaw(ctx context.Context, t *traveller) {
	user, from, epoch := t.res.User, t.before.Worker, t.epoch
	go func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := m.workers.Thaw(tctx, from, user, epoch); err != nil {
			m.cfg.Logger.Warn("thawing a user after a rolled-back move", "user", user, "worker", from, "error", err)
		}
	}()
}

func (m *Mover) applyBatch(ctx context.Context, req fsm.MoveBatchRequest) (fsm.MoveBatchResult, error) {
	entry, err := m.cfg.Encode(fsm.MoveBatchRequestType, req)
	if err != nil {
		return fsm.MoveBatchResult{}, err
	}
	out, err := m.log.Apply(ctx, entry)
	if err != nil {
		return fsm.MoveBatchResult{}, err
	}
	res, ok := out.(fsm.MoveBatchResult)
	if !ok || len(res.Begin) != len(req.Begin) || len(res.Commit) != len(req.Commit) || len(res.Abort) != len(req.Abort) {
		return fsm.MoveBatchResult{}, fmt.Errorf("the log answered a batch of moves with %T", out)
	}
	return res, nil
}
