package governor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"time"
)

// Engine decides governance for every group. It holds the last reading and
// the memory history of each worker, the decisions handed out and not yet
// Done, the cool-downs and the event history. It is not safe for concurrent
// use: one goroutine owns it.
type Engine struct {
	policies map[string]Policy
	rng      *rand.Rand

	workers map[string]*worker
	groups  map[string]*group
	// retired holds, per worker retired by this engine, when: a late reading
	// taken before then does not bring the worker back.
	retired map[string]time.Time
	// pending holds the decisions handed out and not yet Done, by ID.
	pending map[uint64]Decision
	lastID  uint64
	// userFree holds, per user recently moved, when they may be chosen again.
	userFree map[string]time.Time
	history  ring
}

// worker is what the engine knows of one worker.
type worker struct {
	name, group string
	last        Reading
	// hot holds, per resource (index in allResources), whether the worker
	// went over the high mark and has not yet come back under the low mark.
	hot [len(allResources)]bool
	mem []sample
	// recent holds the last readings' memory and per-person growth, grown
	// each person's growth over them (keep); unseen counts, per resource,
	// the readings in a row while hot whose per-person numbers did not show
	// the consumption behind the level (UsageWait).
	recent []recentReading
	grown  map[string]float64
	unseen [len(allResources)]int
	// coolUntil: before it, the worker is not a saturation source or
	// destination (it just gave or received users).
	coolUntil time.Time
	// retryAt: before it, a failed replacement or retirement of the worker
	// is not tried again.
	retryAt  time.Time
	drain    *drain
	retiring bool
	// note is the cause of the last KindBlocked event about this worker, so
	// that the same cause is recorded once, not every round.
	note string
}

// drain is a worker being emptied, for replacement or compaction.
type drain struct {
	cause string // CauseReplace or CauseCompact
	// ready is set when the KindReplace or KindDrain decision is Done with
	// ok: the caller no longer places newcomers on the worker.
	ready bool
	// since is when it became ready; only a reading taken after it can
	// prove the worker empty.
	since time.Time
	// fresh is the worker started to replace this one, if known.
	fresh string
}

// group is what the engine knows of one group beyond its workers.
type group struct {
	// starting counts KindStart and KindReplace decisions not yet Done.
	starting int
	// expected lists workers started and not yet seen in a reading.
	expected []expected
	// lowSince is when the group was first seen all under the low-water
	// mark, zero when it is not.
	lowSince time.Time
	// startRetry: before it, no worker is started in the group (the last
	// start failed).
	startRetry time.Time
}

// expected is a started worker waiting for its first reading taken after
// the start completed (at since); worker is "" when the caller did not name
// it, and then the first reading of a worker never seen before counts.
type expected struct {
	worker string
	since  time.Time
	until  time.Time
}

// round is the state of one Decide call.
type round struct {
	now time.Time
	// moves is how many moves are on the road, counting those decided in
	// this round.
	moves int
}

// New returns an engine governing each group by its policy; a group absent
// from policies is governed by DefaultPolicy(). rng draws who leaves a
// saturated worker: seed it to make decisions reproducible. It returns an
// error if a policy is invalid or rng is nil.
func New(policies map[string]Policy, rng *rand.Rand) (*Engine, error) {
	if rng == nil {
		return nil, errors.New("creating governor: rng is nil")
	}
	e := &Engine{
		policies: make(map[string]Policy, len(policies)),
		rng:      rng,
		workers:  make(map[string]*worker),
		groups:   make(map[string]*group),
		retired:  make(map[string]time.Time),
		pending:  make(map[uint64]Decision),
		userFree: make(map[string]time.Time),
	}
	for g, p := range policies {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("checking policy of group %q: %w", g, err)
		}
		e.policies[g] = p.clone()
	}
	return e, nil
}

// SetPolicy governs group g by p from now on (a group created at run time).
func (e *Engine) SetPolicy(g string, p Policy) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("checking policy of group %q: %w", g, err)
	}
	e.policies[g] = p.clone()
	return nil
}

// policy returns the policy governing group g: its own, or DefaultPolicy().
func (e *Engine) policy(g string) Policy {
	p, ok := e.policies[g]
	if !ok {
		p = DefaultPolicy()
		e.policies[g] = p
	}
	return p
}

// group returns the state of group g, creating it.
func (e *Engine) group(g string) *group {
	gs := e.groups[g]
	if gs == nil {
		gs = &group{}
		e.groups[g] = gs
	}
	return gs
}

// Observe records a probe reading. A reading older than the worker's last
// one is ignored, as is a reading of a worker this engine retired taken
// before the retirement completed. The reading is copied.
func (e *Engine) Observe(r Reading) {
	if r.Worker == "" {
		return
	}
	if at, ok := e.retired[r.Worker]; ok {
		if !r.At.After(at) {
			return
		}
		delete(e.retired, r.Worker)
	}
	w := e.workers[r.Worker]
	if w == nil {
		w = &worker{name: r.Worker}
		e.workers[r.Worker] = w
	} else if r.At.Before(w.last.At) {
		return
	}
	e.arrived(r, w.last.At.IsZero())
	w.group = r.Group
	w.last = r.clone()

	p := e.policy(r.Group)
	for i, res := range allResources {
		th, ok := p.Thresholds[res]
		if !ok {
			w.hot[i] = false
			continue
		}
		switch lv := th.level(r.value(res)); {
		case lv > th.High:
			w.hot[i] = true
		case lv < th.Low:
			w.hot[i] = false
		}
	}
	w.remember(r, p)
	w.keep(r, p)
}

// arrived removes the start r answers from its group's expected starts: the
// one naming r's worker, if r was taken after it completed, or else, for a
// worker never seen before, the oldest start the caller did not name.
func (e *Engine) arrived(r Reading, first bool) {
	gs := e.group(r.Group)
	i := slices.IndexFunc(gs.expected, func(x expected) bool { return x.worker == r.Worker && r.At.After(x.since) })
	if i < 0 && first {
		i = slices.IndexFunc(gs.expected, func(x expected) bool { return x.worker == "" })
	}
	if i >= 0 {
		gs.expected = slices.Delete(gs.expected, i, i+1)
	}
}

// Forget drops everything known of worker (it died, or was removed outside
// the engine). Decisions about it that are pending stay until Done.
func (e *Engine) Forget(worker string) {
	delete(e.workers, worker)
}

// Events returns the history, oldest first: the last HistorySize decisions,
// completions, failures and blocked actions.
func (e *Engine) Events() []Event {
	return e.history.all()
}

// Decide returns what to do now; now is on the same clock as the readings'
// At. inFlight is the number of moves on the road now, whoever started them;
// the road's occupancy is the larger of inFlight and the engine's own moves
// not yet Done, and a move is decided for a group only while the occupancy
// (counting the moves decided in this call) is under the group's
// MaxConcurrentMoves. Within one call, saturation moves come first, then
// moves out of draining workers, then retirements, replacements and
// compactions. Every decision returned must be reported with Done.
func (e *Engine) Decide(now time.Time, inFlight int) []Decision {
	e.expire(now)
	rd := &round{now: now, moves: max(inFlight, e.pendingMoves())}
	groups := e.groupNames()
	var out []Decision
	for _, g := range groups {
		out = e.saturate(rd, g, out)
	}
	for _, g := range groups {
		out = e.drainMoves(rd, g, out)
	}
	for _, g := range groups {
		out = e.retire(rd, g, out)
	}
	for _, g := range groups {
		out = e.replace(rd, g, out)
	}
	for _, g := range groups {
		out = e.compact(rd, g, out)
	}
	return out
}

// Done reports the outcome of a decision returned by Decide: ok is true when
// it was carried out. For KindStart and KindReplace, d.To names the started
// worker (it may be empty if unknown). Cool-downs start now. A decision that
// is not pending (unknown ID, or already Done) is ignored.
func (e *Engine) Done(d Decision, ok bool, now time.Time) {
	pd, found := e.pending[d.ID]
	if !found {
		return
	}
	delete(e.pending, d.ID)
	p := e.policy(pd.Group)
	gs := e.group(pd.Group)
	w := e.workers[pd.Worker]
	if pd.Kind == KindStart || pd.Kind == KindReplace {
		pd.To = d.To
	}

	switch pd.Kind {
	case KindMove:
		e.userFree[pd.User] = now.Add(p.UserCoolDown)
		for _, name := range []string{pd.Worker, pd.To} {
			if x := e.workers[name]; x != nil {
				x.coolUntil = laterOf(x.coolUntil, now.Add(p.WorkerCoolDown))
			}
		}
	case KindStart:
		gs.starting--
		if ok {
			gs.expected = append(gs.expected, expected{worker: pd.To, since: now, until: now.Add(p.StartGrace)})
		} else {
			gs.startRetry = now.Add(p.WorkerCoolDown)
		}
	case KindReplace:
		gs.starting--
		if ok {
			gs.expected = append(gs.expected, expected{worker: pd.To, since: now, until: now.Add(p.StartGrace)})
			if w != nil && w.drain != nil {
				w.drain.ready, w.drain.since, w.drain.fresh = true, now, pd.To
			}
		} else if w != nil {
			w.drain = nil
			w.retryAt = now.Add(p.WorkerCoolDown)
		}
	case KindDrain:
		if w != nil && w.drain != nil {
			if ok {
				w.drain.ready, w.drain.since = true, now
			} else {
				w.drain = nil
				w.retryAt = now.Add(p.WorkerCoolDown)
			}
		}
	case KindRetire:
		if ok {
			delete(e.workers, pd.Worker)
			e.retired[pd.Worker] = now
		} else if w != nil {
			w.retiring = false
			w.retryAt = now.Add(p.WorkerCoolDown)
		}
	}

	ev := Event{At: now, Kind: KindCompleted, ID: pd.ID, Group: pd.Group, Worker: pd.Worker, User: pd.User, To: pd.To}
	outcome := "completed"
	if !ok {
		ev.Kind, outcome = KindFailed, "failed"
	}
	ev.Reason = fmt.Sprintf("%s #%d %s: %s", pd.Kind, pd.ID, outcome, describe(pd))
	e.history.add(ev)
}

// describe names what a decision does, briefly.
func describe(d Decision) string {
	switch d.Kind {
	case KindMove:
		return fmt.Sprintf("%s from %s to %s", d.User, d.Worker, d.To)
	case KindStart:
		if d.To != "" {
			return fmt.Sprintf("worker %s in %s", d.To, d.Group)
		}
		return "a worker in " + d.Group
	case KindReplace:
		if d.To != "" {
			return fmt.Sprintf("%s by %s", d.Worker, d.To)
		}
		return d.Worker
	}
	return d.Worker
}

// expire forgets started workers that never reported and user cool-downs
// that are over.
func (e *Engine) expire(now time.Time) {
	for _, g := range sortedKeys(e.groups) {
		gs := e.groups[g]
		gs.expected = slices.DeleteFunc(gs.expected, func(x expected) bool {
			if x.until.After(now) {
				return false
			}
			name := x.worker
			if name == "" {
				name = "a started worker"
			}
			e.history.add(Event{At: now, Kind: KindBlocked, Group: g, Worker: x.worker,
				Reason: fmt.Sprintf("%s of %s sent no reading within %s: no longer counted", name, g, e.policy(g).StartGrace)})
			return true
		})
	}
	for u, t := range e.userFree {
		if !t.After(now) {
			delete(e.userFree, u)
		}
	}
}

// issue hands out d: it gets an ID, becomes pending and enters the history.
func (e *Engine) issue(rd *round, d Decision, out []Decision) []Decision {
	e.lastID++
	d.ID = e.lastID
	e.pending[d.ID] = d
	e.history.add(Event{At: rd.now, Kind: d.Kind, ID: d.ID, Group: d.Group, Worker: d.Worker, User: d.User, To: d.To, Reason: d.Reason})
	if d.Kind == KindMove {
		rd.moves++
	}
	return append(out, d)
}

// block records, once per cause, that a rule wanted to act on w and could not.
func (e *Engine) block(rd *round, w *worker, cause, reason string) {
	if w.note == cause {
		return
	}
	w.note = cause
	e.history.add(Event{At: rd.now, Kind: KindBlocked, Group: w.group, Worker: w.name, Reason: reason})
}

// pendingMoves counts the engine's moves not yet Done.
func (e *Engine) pendingMoves() int {
	n := 0
	for _, d := range e.pending {
		if d.Kind == KindMove {
			n++
		}
	}
	return n
}

// movesTouching counts the pending moves out of (from) and into (to) worker.
func (e *Engine) movesTouching(worker string) (from, to int) {
	for _, d := range e.pending {
		if d.Kind != KindMove {
			continue
		}
		if d.Worker == worker {
			from++
		}
		if d.To == worker {
			to++
		}
	}
	return from, to
}

// moving reports whether user has a pending move.
func (e *Engine) moving(user string) bool {
	for _, d := range e.pending {
		if d.Kind == KindMove && d.User == user {
			return true
		}
	}
	return false
}

// groupNames lists the groups known by a worker or a start, sorted.
func (e *Engine) groupNames() []string {
	set := make(map[string]struct{})
	for _, w := range e.workers {
		set[w.group] = struct{}{}
	}
	for g := range e.groups {
		set[g] = struct{}{}
	}
	return sortedKeys(set)
}

// workersOf lists the workers of group g, sorted by name.
func (e *Engine) workersOf(g string) []*worker {
	var ws []*worker
	for _, w := range e.workers {
		if w.group == g {
			ws = append(ws, w)
		}
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].name < ws[j].name })
	return ws
}

// size counts the workers of g: known, being started, and started but not
// yet known.
func (e *Engine) size(g string) int {
	gs := e.group(g)
	n := len(e.workersOf(g)) + gs.starting
	for _, x := range gs.expected {
		if _, known := e.workers[x.worker]; !known || x.worker == "" {
			n++
		}
	}
	return n
}

// fresh reports whether w's last reading is recent enough to act on.
func (w *worker) fresh(now time.Time, p Policy) bool {
	return !w.last.At.IsZero() && now.Sub(w.last.At) <= p.StaleAfter
}

// level returns w's level of res as a fraction of its limit, and whether res
// is watched.
func (w *worker) level(res Resource, p Policy) (float64, Threshold, bool) {
	th, ok := p.Thresholds[res]
	if !ok {
		return 0, th, false
	}
	return th.level(w.last.value(res)), th, true
}

// peak returns w's highest level over the watched resources, and which.
func (w *worker) peak(p Policy) (float64, Resource) {
	best, which := 0.0, CPU
	for _, res := range allResources {
		if lv, _, ok := w.level(res, p); ok && lv > best {
			best, which = lv, res
		}
	}
	return best, which
}

// crowded returns the first watched resource of w at or above its low mark;
// ok is false when w has room (every resource under its low mark).
func (w *worker) crowded(p Policy) (Resource, float64, Threshold, bool) {
	for _, res := range allResources {
		if lv, th, ok := w.level(res, p); ok && lv >= th.Low {
			return res, lv, th, true
		}
	}
	return 0, 0, Threshold{}, false
}

// available reports whether w can take part in decisions as a worker in
// service: fresh, not draining, not being retired.
func (w *worker) available(now time.Time, p Policy) bool {
	return w.fresh(now, p) && w.drain == nil && !w.retiring
}

func laterOf(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
