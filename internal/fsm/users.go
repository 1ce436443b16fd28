package fsm

import (
	"fmt"

	"github.com/stickyd/stickyd/internal/placement"
)

// userRec is a person as the maps store them: 56 bytes for a live person
// without login attributes; what few people have (a move under way, a
// package to wake from, attributes) is in x, shared with snapshots and
// replaced whole, never changed in place.
type userRec struct {
	worker string
	epoch  uint64
	since  uint64
	seen   int64
	conns  int32
	// refs counts the connections that point to this entry (connMap);
	// ghostBit marks an entry kept only for them (see userMap).
	refs uint32
	x    *userExtra
}

// ghostBit marks a userRec that is no person: its name is kept for the
// connections that still point to it.
const ghostBit = 1 << 31

func (r userRec) ghost() bool { return r.refs&ghostBit != 0 }

type userExtra struct {
	state    string
	movingTo string
	pkg      string
	attrs    map[string]string
}

func pack(h User) userRec {
	r := userRec{worker: h.Worker, epoch: h.Epoch, since: h.Since, seen: h.Seen, conns: int32(h.Conns)}
	if h.State != "" || h.MovingTo != "" || h.Package != "" || h.Attrs != nil {
		r.x = &userExtra{state: h.State, movingTo: h.MovingTo, pkg: h.Package, attrs: h.Attrs}
	}
	return r
}

func (r userRec) unpack() User {
	h := User{Worker: r.worker, Epoch: r.epoch, Since: r.since, Seen: r.seen, Conns: int(r.conns)}
	if x := r.x; x != nil {
		h.State, h.MovingTo, h.Package, h.Attrs = x.state, x.movingTo, x.pkg, x.attrs
	}
	return h
}

// userMap is the people, stored compact (userRec), read and written as
// User values.
//
// A connection points to its person by a ref (connMap); an entry stays in
// the map while a connection points to it, as a ghost if the person is
// gone: a ghost is no person (get, len and all skip it), only the name
// the connection resolves to. A ghost becomes a person again when one of
// that name is put, and leaves the map with the last connection to it.
type userMap struct {
	m *shardMap[userRec]
	// n counts the people (ghosts not included).
	n int
	// states counts the people in each state (placement.State*), kept
	// as they are written: a tally costs nothing per person.
	states map[string]int
}

func newUserMap() *userMap {
	return &userMap{m: newShardMap[userRec](), states: map[string]int{}}
}

func newUserMapSized(n int) *userMap {
	return &userMap{m: newShardMapSized[userRec](n), states: map[string]int{}}
}

func (r userRec) state() string {
	if r.x == nil || r.x.state == "" {
		return placement.StateLive
	}
	return r.x.state
}

func (u *userMap) get(k string) (User, bool) {
	r, ok := u.m.get(k)
	if !ok || r.ghost() {
		return User{}, false
	}
	return r.unpack(), true
}

// rec is k's stored record, for readers that need no User.
func (u *userMap) rec(k string) (userRec, bool) {
	r, ok := u.m.get(k)
	return r, ok && !r.ghost()
}

// put sets k's person to h, and returns k's ref.
func (u *userMap) put(k string, h User) ref {
	r := pack(h)
	if old, ok := u.m.get(k); ok {
		if old.ghost() {
			u.n++
		} else {
			u.states[old.state()]--
		}
		r.refs = old.refs &^ ghostBit
	} else {
		u.n++
	}
	u.states[r.state()]++
	return u.m.put(k, r)
}

func (u *userMap) del(k string) {
	old, ok := u.m.get(k)
	if !ok || old.ghost() {
		return
	}
	u.states[old.state()]--
	u.n--
	if old.refs == 0 {
		u.m.del(k)
		return
	}
	u.m.put(k, userRec{refs: old.refs | ghostBit})
}

// hold returns k's ref for a connection to keep, counted: k's entry (a
// ghost if k is no person) stays in the map until let go of.
func (u *userMap) hold(k string) ref {
	r, rec, ok := u.m.lookup(k)
	if !ok {
		return u.m.put(k, userRec{refs: ghostBit | 1})
	}
	rec.refs++
	u.m.setAt(r, rec)
	return r
}

// holdRefs is n holds of the entry r names.
func (u *userMap) holdRefs(r ref, n uint32) {
	_, rec := u.m.at(r)
	rec.refs += n
	u.m.setAt(r, rec)
}

// letGo drops a connection's hold on r (from hold); a ghost leaves with
// its last.
func (u *userMap) letGo(r ref) {
	name, rec := u.m.at(r)
	rec.refs--
	if rec.refs == ghostBit {
		u.m.del(name)
		return
	}
	u.m.setAt(r, rec)
}

// nameAt is the name r points to.
func (u *userMap) nameAt(r ref) string {
	name, _ := u.m.at(r)
	return name
}

func (u *userMap) len() int { return u.n }

// all calls yield for every person until it returns false.
func (u *userMap) all(yield func(string, User) bool) {
	u.m.all(func(k string, r userRec) bool {
		return r.ghost() || yield(k, r.unpack())
	})
}

func (u *userMap) freeze() *frozenUsers { return &frozenUsers{m: u.m.freeze(), n: u.n} }

// frozenUsers is the people as a snapshot took them.
type frozenUsers struct {
	m *frozenMap[userRec]
	n int
}

func (f *frozenUsers) all(yield func(string, User) bool) {
	f.m.all(func(k string, r userRec) bool {
		return r.ghost() || yield(k, r.unpack())
	})
}

// connRec is a connection as the maps store it: its person's ref (in the
// userMap beside it) and when a front last saw it, in unix seconds (until
// 2106), 8 bytes in all.
type connRec struct {
	user ref
	seen uint32
}

func seenSecs(s int64) uint32 {
	return uint32(min(max(s, 0), 1<<32-1))
}

// connMap is the connections, each pointing to its person in users by a
// ref, read and written as Conn values.
type connMap struct {
	m     *shardMap[connRec]
	users *userMap
}

func newConnMap(users *userMap) *connMap {
	return &connMap{m: newShardMap[connRec](), users: users}
}

func newConnMapSized(users *userMap, n int) *connMap {
	return &connMap{m: newShardMapSized[connRec](n), users: users}
}

func (c *connMap) get(k string) (Conn, bool) {
	r, ok := c.m.get(k)
	if !ok {
		return Conn{}, false
	}
	return Conn{User: c.users.nameAt(r.user), Seen: int64(r.seen)}, true
}

func (c *connMap) put(k string, v Conn) {
	old, ok := c.m.get(k)
	if ok && c.users.nameAt(old.user) == v.User {
		c.m.put(k, connRec{user: old.user, seen: seenSecs(v.Seen)})
		return
	}
	r := c.users.hold(v.User)
	c.m.put(k, connRec{user: r, seen: seenSecs(v.Seen)})
	if ok {
		c.users.letGo(old.user)
	}
}

// restoreRef adds connection k of the person r names, without holding
// r: a restore counts the holds of each person and adds them in one pass
// (userMap.holdRefs), reading the people in their order instead of one
// at random for each connection. k must be new.
func (c *connMap) restoreRef(k string, r ref, seen int64) error {
	if c.m.has(k) {
		return fmt.Errorf("connection %q twice in the snapshot", k)
	}
	c.m.put(k, connRec{user: r, seen: seenSecs(seen)})
	return nil
}

func (c *connMap) del(k string) {
	if old, ok := c.m.get(k); ok {
		c.m.del(k)
		c.users.letGo(old.user)
	}
}

func (c *connMap) len() int { return c.m.len() }

// all calls yield for every connection until it returns false.
func (c *connMap) all(yield func(string, Conn) bool) {
	c.m.all(func(k string, r connRec) bool {
		return yield(k, Conn{User: c.users.nameAt(r.user), Seen: int64(r.seen)})
	})
}

// freeze takes the connections as they are; users is the people frozen
// at the same moment, which the connections point into.
func (c *connMap) freeze(users *frozenUsers) *frozenConns {
	return &frozenConns{m: c.m.freeze(), users: users}
}

// frozenConns is the connections as a snapshot took them.
type frozenConns struct {
	m     *frozenMap[connRec]
	users *frozenUsers
}

func (f *frozenConns) all(yield func(string, Conn) bool) {
	f.m.all(func(k string, r connRec) bool {
		name, _ := f.users.m.at(r.user)
		return yield(k, Conn{User: name, Seen: int64(r.seen)})
	})
}
