package worker

import "time"

// What a worker keeps of the people who left it (docs/moves.md). A person
// evicted (moved away, parked here, forgotten) leaves their epoch behind:
// a fence that answers MOVED to a frame still on its way at an older
// epoch. The fence is needed for as long as such a frame can be in
// flight, not forever: past tombstoneTTL it goes, with the person's other
// marks; a forgotten person's goes at once (a new person of that name
// starts again at epoch 1). And a map emptied by many people leaving is
// rebuilt to its size: Go never shrinks a map, so a worker that held
// 30,000 people once would keep their buckets for good.

// tombstoneTTL is how long an evicted person's fence stays; far longer
// than any frame waits (frame_timeout, 30 s by default).
const tombstoneTTL = 2 * time.Minute

// leftLocked records that user left this worker now; forget drops their
// fence at once.
func (rt *runtime) leftLocked(user string, forget bool) {
	if forget {
		rt.dropMarksLocked(user)
		return
	}
	if rt.evicted == nil {
		rt.evicted = map[string]time.Time{}
	}
	rt.evicted[user] = time.Now()
	rt.grewLocked()
}

// grewLocked raises the maps' high-water marks to their sizes now: a map
// that grew and emptied between two probes is rebuilt at the next one.
func (rt *runtime) grewLocked() {
	m := &rt.marks
	m.users = max(m.users, len(rt.users))
	m.conns = max(m.conns, len(rt.conns))
	m.byUser = max(m.byUser, len(rt.byUser))
	m.epochs = max(m.epochs, len(rt.epochs))
	m.frozen = max(m.frozen, len(rt.frozen))
	m.yields = max(m.yields, len(rt.yields))
	m.accounts = max(m.accounts, len(rt.accounts))
	m.evicted = max(m.evicted, len(rt.evicted))
}

// dropMarksLocked forgets everything the worker kept of a person gone.
func (rt *runtime) dropMarksLocked(user string) {
	delete(rt.epochs, user)
	delete(rt.frozen, user)
	delete(rt.yields, user)
	delete(rt.evicted, user)
}

// tidyLocked lets the fences past their time go (those of people who came
// back are theirs again) and rebuilds the maps that shrank to a quarter
// of their high-water mark. It runs at each probe, and says whether it let
// many go or rebuilt a map: what they held is then given back (released),
// as after evictions.
func (rt *runtime) tidyLocked(now time.Time) (freed bool) {
	dropped := 0
	for user, at := range rt.evicted {
		switch {
		case len(rt.byUser[user]) > 0 || rt.users[user] != nil:
			delete(rt.evicted, user) // back here: the marks are live
		case now.Sub(at) >= tombstoneTTL:
			rt.dropMarksLocked(user)
			dropped++
		}
	}
	m := &rt.marks
	rebuilt := false
	rt.users = shrunk(rt.users, &m.users, &rebuilt)
	rt.conns = shrunk(rt.conns, &m.conns, &rebuilt)
	rt.byUser = shrunk(rt.byUser, &m.byUser, &rebuilt)
	rt.epochs = shrunk(rt.epochs, &m.epochs, &rebuilt)
	rt.frozen = shrunk(rt.frozen, &m.frozen, &rebuilt)
	rt.yields = shrunk(rt.yields, &m.yields, &rebuilt)
	rt.accounts = shrunk(rt.accounts, &m.accounts, &rebuilt)
	rt.evicted = shrunk(rt.evicted, &m.evicted, &rebuilt)
	return rebuilt || dropped >= releaseTombstones
}

// releaseTombstones is how many fences let go at one probe are worth a
// release of the memory they held.
const releaseTombstones = 256

// mapMarks are the high-water marks of the runtime's maps.
type mapMarks struct {
	users, conns, byUser, epochs, frozen, yields, accounts, evicted int
}

// shrinkFloor is the size below which a map is never rebuilt.
const shrinkFloor = 1024

// shrunk returns m, or a copy of it sized to its length once it has
// fallen to a quarter of its high-water mark (kept in high); it sets
// *rebuilt when it copied.
func shrunk[K comparable, V any](m map[K]V, high *int, rebuilt *bool) map[K]V {
	n := len(m)
	if n > *high {
		*high = n
		return m
	}
	if *high < shrinkFloor || n > *high/4 {
		return m
	}
	out := make(map[K]V, n)
	for k, v := range m {
		out[k] = v
	}
	*high, *rebuilt = n, true
	return out
}
