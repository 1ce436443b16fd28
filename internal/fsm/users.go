package fsm

import "github.com/stickyd/stickyd/internal/placement"

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
	x      *userExtra
}

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
type userMap struct {
	m *shardMap[userRec]
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
	if !ok {
		return User{}, false
	}
	return r.unpack(), true
}

func (u *userMap) put(k string, h User) {
	r := pack(h)
	if old, ok := u.m.get(k); ok {
		u.states[old.state()]--
	}
	u.states[r.state()]++
	u.m.put(k, r)
}

func (u *userMap) del(k string) {
	if old, ok := u.m.get(k); ok {
		u.states[old.state()]--
		u.m.del(k)
	}
}

func (u *userMap) len() int { return u.m.len() }

// all calls yield for every person until it returns false.
func (u *userMap) all(yield func(string, User) bool) {
	u.m.all(func(k string, r userRec) bool { return yield(k, r.unpack()) })
}

func (u *userMap) freeze() *frozenUsers { return &frozenUsers{u.m.freeze()} }

// frozenUsers is the people as a snapshot took them.
type frozenUsers struct{ m *frozenMap[userRec] }

func (f *frozenUsers) all(yield func(string, User) bool) {
	f.m.all(func(k string, r userRec) bool { return yield(k, r.unpack()) })
}
