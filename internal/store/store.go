package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Limits. Going over one is an error, except MaxHeld: a request that would
// go over it waits like a conflicting one.
const (
	MaxPathBytes  = 512       // bytes in a path
	MaxSegments   = 64        // segments in a path
	MaxPaths      = 64        // paths in a request or a read
	MaxValueBytes = 1 << 20   // bytes in a value, as given and as stored
	MaxWrites     = 256       // sets plus deletes in a commit
	MaxWaiting    = 10_000    // requests waiting in the queue
	MaxHeld       = 10_000    // grants held at once
	MaxLease      = time.Hour // longest lease
	MaxNameBytes  = 256       // bytes in Owner.Worker and Owner.User
)

// Errors. The store wraps them with what it was doing; test with errors.Is.
var (
	ErrBadPath       = errors.New("invalid path")
	ErrBadValue      = errors.New("invalid value")
	ErrValueTooLarge = errors.New("value too large")
	ErrTooManyPaths  = errors.New("too many paths")
	ErrTooManyWrites = errors.New("too many writes")
	ErrQueueFull     = errors.New("grant queue full")
	ErrBadOwner      = errors.New("invalid owner")
	ErrBadLease      = errors.New("invalid lease")
	ErrDuplicateID   = errors.New("grant id already used")
	ErrUnknownGrant  = errors.New("unknown grant")
	ErrStaleGrant    = errors.New("grant not held")
	ErrOutsideGrant  = errors.New("write outside the grant's paths")
	ErrNotObject     = errors.New("write under a value that is not an object")
	ErrBadOp         = errors.New("invalid operation")
	ErrBadSnapshot   = errors.New("invalid snapshot")
)

// Store is the global shared store: the tree, the grants and the queue.
// The zero value is not usable; call New. See the package documentation for
// the model and the concurrency rules.
type Store struct {
	data      tree
	clock     int64  // largest Now applied; never decreases
	lastID    uint64 // largest grant id accepted
	lastToken uint64 // last fencing token given
	grants    map[uint64]*grant
	queue     []uint64 // waiting requests, first come first; ids increase
	held      pathSet  // paths of the held grants
	waiting   pathSet  // paths of the waiting requests
	nheld     int
}

// New returns an empty store.
func New() *Store {
	return &Store{grants: map[uint64]*grant{}}
}

// advance returns the time an operation at now runs at: now, or the store's
// clock if now is older. It does not move the clock (see commitTime).
func (s *Store) advance(now int64) int64 { return max(s.clock, now) }

// Acquire requests a grant on paths for owner, with the caller-chosen id
// (above every id seen before). The request is granted at once if it
// conflicts with no held grant and no waiting request; then Result.Granted
// holds it, with its token and content. Otherwise it waits in the queue and
// is granted by a later operation; Grant(id) tells its position.
func (s *Store) Acquire(id uint64, owner Owner, paths []string, lease time.Duration, now int64) (Result, error) {
	fail := func(err error) (Result, error) {
		return Result{}, fmt.Errorf("acquiring grant %d: %w", id, err)
	}
	if id <= s.lastID {
		return fail(fmt.Errorf("%w: ids must increase, last was %d", ErrDuplicateID, s.lastID))
	}
	if err := owner.check(); err != nil {
		return fail(err)
	}
	if err := checkLease(lease); err != nil {
		return fail(err)
	}
	ps, err := normalizePaths(paths)
	if err != nil {
		return fail(err)
	}
	now = s.advance(now)
	free := s.nheld < MaxHeld && !s.held.hitsAny(ps) && !s.waiting.hitsAny(ps)
	if !free && len(s.queue) >= MaxWaiting {
		return fail(fmt.Errorf("%w: %d requests waiting", ErrQueueFull, len(s.queue)))
	}
	s.clock, s.lastID = now, id
	g := &grant{id: id, owner: owner, paths: ps, lease: lease, requestedAt: now}
	s.grants[id] = g
	var res Result
	if free {
		s.hold(g, now, &res)
	} else {
		s.queue = append(s.queue, id)
		s.waiting.addAll(ps)
	}
	return res, nil
}

// Commit applies writes under grant id and releases it: deletes first, then
// sets, all or nothing. Every path written must lie at or under the grant's
// paths. If the grant is not held with token, or its lease ended at now, it
// fails with ErrStaleGrant and changes nothing.
func (s *Store) Commit(id, token uint64, set map[string]json.RawMessage, del []string, now int64) (Result, error) {
	fail := func(err error) (Result, error) {
		return Result{}, fmt.Errorf("committing grant %d: %w", id, err)
	}
	now = s.advance(now)
	g, err := s.heldGrant(id, token, now)
	if err != nil {
		return fail(err)
	}
	if n := len(set) + len(del); n > MaxWrites {
		return fail(fmt.Errorf("%w: %d, limit %d", ErrTooManyWrites, n, MaxWrites))
	}
	for _, p := range del {
		if err := checkPath(p); err != nil {
			return fail(err)
		}
		if !within(p, g.paths) {
			return fail(fmt.Errorf("%w: delete %s", ErrOutsideGrant, quote(p)))
		}
	}
	setPaths := slices.Sorted(maps.Keys(set))
	values := make([]json.RawMessage, len(setPaths))
	var seen pathSet
	for i, p := range setPaths {
		if err := checkPath(p); err != nil {
			return fail(err)
		}
		if !within(p, g.paths) {
			return fail(fmt.Errorf("%w: set %s", ErrOutsideGrant, quote(p)))
		}
		if seen.hits(p) {
			return fail(fmt.Errorf("%w: set %s overlaps another set of the commit", ErrBadPath, quote(p)))
		}
		seen.add(p)
		v, err := canonical(set[p])
		if err != nil {
			return fail(fmt.Errorf("setting %s: %w", quote(p), err))
		}
		values[i] = v
		if b, ok := s.data.blocker(p); ok && !within(b, del) {
			return fail(fmt.Errorf("%w: set %s, %s holds a value", ErrNotObject, quote(p), quote(b)))
		}
	}
	// Everything is checked: from here on nothing fails.
	s.clock = now
	delPaths := slices.Sorted(slices.Values(del))
	for _, p := range delPaths {
		s.data.del(p)
	}
	for i, p := range setPaths {
		s.data.set(p, values[i])
	}
	var res Result
	res.Written = slices.Compact(slices.Sorted(slices.Values(append(delPaths, setPaths...))))
	if s.end(g, EndCommitted, &res) {
		s.settle(now, &res)
	}
	return res, nil
}

// heldGrant returns grant id if it is held with token and its lease has not
// ended at now.
func (s *Store) heldGrant(id, token uint64, now int64) (*grant, error) {
	g := s.grants[id]
	switch {
	case g == nil && id > s.lastID:
		return nil, fmt.Errorf("%w: %w: never acquired", ErrStaleGrant, ErrUnknownGrant)
	case g == nil:
		return nil, fmt.Errorf("%w: it has ended", ErrStaleGrant)
	case !g.held():
		return nil, fmt.Errorf("%w: it is still waiting", ErrStaleGrant)
	case token != g.token:
		return nil, fmt.Errorf("%w: token %d, held with %d", ErrStaleGrant, token, g.token)
	case g.expiresAt() <= now:
		return nil, fmt.Errorf("%w: its lease ended at %d", ErrStaleGrant, g.expiresAt())
	}
	return g, nil
}

// Release ends grant id without writes: a held grant is released, a waiting
// request is cancelled. It fails with ErrUnknownGrant for an id never
// acquired and ErrStaleGrant for a grant that has already ended.
func (s *Store) Release(id uint64, now int64) (Result, error) {
	g := s.grants[id]
	if g == nil {
		if id > s.lastID {
			return Result{}, fmt.Errorf("releasing grant %d: %w", id, ErrUnknownGrant)
		}
		return Result{}, fmt.Errorf("releasing grant %d: %w: it has ended", id, ErrStaleGrant)
	}
	now = s.advance(now)
	s.clock = now
	var res Result
	reason := EndReleased
	if !g.held() {
		reason = EndCancelled
	}
	if s.end(g, reason, &res) {
		s.settle(now, &res)
	}
	return res, nil
}

// ReleaseWorker ends every grant and request of worker (one incarnation),
// which has died: nothing it meant to commit is applied.
func (s *Store) ReleaseWorker(worker string, now int64) Result {
	return s.endWhere(func(g *grant) bool { return g.owner.Worker == worker }, EndWorkerGone, now)
}

// ReleaseUser ends every grant and request of user on worker: the person was
// moved away from it. Nothing they meant to commit is applied.
func (s *Store) ReleaseUser(worker, user string, now int64) Result {
	return s.endWhere(func(g *grant) bool { return g.owner == Owner{Worker: worker, User: user} }, EndUserGone, now)
}

// Expire revokes every held grant whose lease has ended at now (granted-at +
// lease <= now) and grants the requests that were waiting for them.
func (s *Store) Expire(now int64) Result {
	now = s.advance(now)
	return s.endWhere(func(g *grant) bool { return g.held() && g.expiresAt() <= now }, EndExpired, now)
}

func (s *Store) endWhere(match func(*grant) bool, reason EndReason, now int64) Result {
	now = s.advance(now)
	s.clock = now
	var ids []uint64
	for id, g := range s.grants {
		if match(g) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var res Result
	unblock := false
	for _, id := range ids {
		unblock = s.end(s.grants[id], reason, &res) || unblock
	}
	if unblock {
		s.settle(now, &res)
	}
	return res
}

// hold gives g its token and records it as held at now.
func (s *Store) hold(g *grant, now int64, res *Result) {
	s.lastToken++
	g.token, g.grantedAt = s.lastToken, now
	s.held.addAll(g.paths)
	s.nheld++
	res.Granted = append(res.Granted, s.info(g, true))
}

// end forgets g, held or waiting, and reports it. It returns whether that
// may let a waiting request through, in which case the caller settles: only
// a request that conflicted with g, or any request if g freed a place below
// MaxHeld, can be unblocked by g's end.
func (s *Store) end(g *grant, reason EndReason, res *Result) bool {
	full := s.nheld >= MaxHeld
	if g.held() {
		s.held.removeAll(g.paths)
		s.nheld--
	} else {
		s.waiting.removeAll(g.paths)
		if i, ok := slices.BinarySearch(s.queue, g.id); ok {
			s.queue = slices.Delete(s.queue, i, i+1)
		}
	}
	delete(s.grants, g.id)
	res.Ended = append(res.Ended, Ended{ID: g.id, Owner: g.owner, Token: g.token, Reason: reason})
	return len(s.queue) > 0 && (full && g.held() || s.waiting.hitsAny(g.paths))
}

// settle grants, in queue order, every waiting request that conflicts with
// no held grant and with no request still waiting ahead of it.
func (s *Store) settle(now int64, res *Result) {
	if len(s.queue) == 0 {
		return
	}
	var ahead pathSet
	kept := s.queue[:0]
	for _, id := range s.queue {
		g := s.grants[id]
		if s.nheld < MaxHeld && !s.held.hitsAny(g.paths) && !ahead.hitsAny(g.paths) {
			s.waiting.removeAll(g.paths)
			s.hold(g, now, res)
			continue
		}
		ahead.addAll(g.paths)
		kept = append(kept, id)
	}
	clear(s.queue[len(kept):])
	s.queue = kept
}

// Get returns a copy of every entry at or under each of paths, keyed by
// full path. A path with nothing stored adds nothing.
func (s *Store) Get(paths []string) (map[string]json.RawMessage, error) {
	if len(paths) > MaxPaths {
		return nil, fmt.Errorf("reading: %w: %d paths, limit %d", ErrTooManyPaths, len(paths), MaxPaths)
	}
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, fmt.Errorf("reading: %w", err)
		}
	}
	out := map[string]json.RawMessage{}
	for _, p := range paths {
		s.data.get(p, out)
	}
	return out, nil
}

// Grant looks up a held grant or a waiting request. A held grant comes with
// its content; a waiting one with its position in the queue.
func (s *Store) Grant(id uint64) (GrantInfo, bool) {
	g := s.grants[id]
	if g == nil {
		return GrantInfo{}, false
	}
	return s.info(g, true), true
}

// Grants lists the held grants by id, then the waiting requests in queue
// order, without content.
func (s *Store) Grants() []GrantInfo {
	out := make([]GrantInfo, 0, len(s.grants))
	for _, g := range s.heldSorted() {
		out = append(out, s.info(g, false))
	}
	for i, id := range s.queue {
		gi := s.info(s.grants[id], false)
		gi.Position = i + 1
		out = append(out, gi)
	}
	return out
}

func (s *Store) heldSorted() []*grant {
	out := make([]*grant, 0, s.nheld)
	for _, g := range s.grants {
		if g.held() {
			out = append(out, g)
		}
	}
	slices.SortFunc(out, func(a, b *grant) int { return cmpU64(a.id, b.id) })
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (s *Store) info(g *grant, detail bool) GrantInfo {
	gi := GrantInfo{
		ID: g.id, Owner: g.owner, Paths: slices.Clone(g.paths), Lease: g.lease,
		State: StateWaiting, Token: g.token, RequestedAt: g.requestedAt,
	}
	if g.held() {
		gi.State, gi.GrantedAt, gi.ExpiresAt = StateHeld, g.grantedAt, g.expiresAt()
		if detail {
			gi.Content = map[string]json.RawMessage{}
			for _, p := range g.paths {
				s.data.get(p, gi.Content)
			}
		}
	} else if detail {
		i, _ := slices.BinarySearch(s.queue, g.id)
		gi.Position = i + 1
	}
	return gi
}

// NextExpiry returns the earliest time (unix nanoseconds) at which a held
// grant's lease ends, or 0 if no grant is held: the leader applies Expire then.
// A held grant's lease always ends after 0, since the store's clock starts
// at 0 and leases are positive.
func (s *Store) NextExpiry() int64 {
	var next int64
	for _, g := range s.grants {
		if e := g.expiresAt(); g.held() && (next == 0 || e < next) {
			next = e
		}
	}
	return next
}

// Stats are the store's sizes, for metrics and the monitor.
type Stats struct {
	Entries   int    `json:"entries"`
	Held      int    `json:"held"`
	Waiting   int    `json:"waiting"`
	LastToken uint64 `json:"last_token"`
	Clock     int64  `json:"clock"` // the largest Now applied
}

// Stats returns the store's sizes.
func (s *Store) Stats() Stats {
	return Stats{Entries: s.data.n, Held: s.nheld, Waiting: len(s.queue), LastToken: s.lastToken, Clock: s.clock}
}

// Clone returns a deep copy that shares no mutable memory with s.
func (s *Store) Clone() *Store {
	c := &Store{
		data: s.data.clone(), clock: s.clock, lastID: s.lastID, lastToken: s.lastToken,
		grants: make(map[uint64]*grant, len(s.grants)), queue: slices.Clone(s.queue), nheld: s.nheld,
	}
	for id, g := range s.grants {
		cg := *g
		c.grants[id] = &cg
	}
	c.held = s.held.clone()
	c.waiting = s.waiting.clone()
	return c
}
