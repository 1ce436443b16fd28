package store

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

const ms = int64(time.Millisecond)

var (
	ada = Owner{Worker: "web-1#1", User: "ada"}
	bob = Owner{Worker: "web-1#1", User: "bob"}
	cyd = Owner{Worker: "web-2#1", User: "cyd"}
)

// conflictOracle is the definition of a conflict, written independently of
// the store's code: some path of a is, segment by segment, a prefix of some
// path of b, or the other way round.
func conflictOracle(a, b []string) bool {
	prefix := func(p, q string) bool {
		ps, qs := strings.Split(p, "/"), strings.Split(q, "/")
		return len(ps) <= len(qs) && slices.Equal(ps, qs[:len(ps)])
	}
	for _, p := range a {
		for _, q := range b {
			if prefix(p, q) || prefix(q, p) {
				return true
			}
		}
	}
	return false
}

func mustAcquire(t testing.TB, s *Store, id uint64, o Owner, now int64, paths ...string) Result {
	t.Helper()
	res, err := s.Acquire(id, o, paths, time.Minute, now)
	if err != nil {
		t.Fatalf("Acquire(%d, %v): %v", id, paths, err)
	}
	return res
}

func mustRelease(t testing.TB, s *Store, id uint64, now int64) Result {
	t.Helper()
	res, err := s.Release(id, now)
	if err != nil {
		t.Fatalf("Release(%d): %v", id, err)
	}
	return res
}

// commit commits grant id with its current token; set values are JSON text.
func commit(s *Store, id uint64, set map[string]string, del []string, now int64) (Result, error) {
	gi, _ := s.Grant(id)
	return s.Commit(id, gi.Token, rawMap(set), del, now)
}

func mustCommit(t testing.TB, s *Store, id uint64, set map[string]string, del []string, now int64) Result {
	t.Helper()
	res, err := commit(s, id, set, del, now)
	if err != nil {
		t.Fatalf("Commit(%d): %v", id, err)
	}
	return res
}

func rawMap(m map[string]string) map[string]json.RawMessage {
	if m == nil {
		return nil
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = json.RawMessage(v)
	}
	return out
}

func textMap(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// write sets and deletes through a grant of its own on exactly those paths.
func write(t testing.TB, s *Store, set map[string]string, del ...string) error {
	t.Helper()
	paths := slices.Concat(slices.Collect(maps.Keys(set)), del)
	id := s.lastID + 1
	res, err := s.Acquire(id, ada, paths, time.Minute, s.clock)
	if err != nil {
		t.Fatalf("acquiring for a write: %v", err)
	}
	if len(res.Granted) != 1 {
		t.Fatalf("write: grant %d not given at once", id)
	}
	if _, err := commit(s, id, set, del, s.clock); err != nil {
		mustRelease(t, s, id, s.clock)
		return err
	}
	return nil
}

func get(t testing.TB, s *Store, paths ...string) map[string]string {
	t.Helper()
	m, err := s.Get(paths)
	if err != nil {
		t.Fatalf("Get(%v): %v", paths, err)
	}
	return textMap(m)
}

func grantedIDs(res Result) []uint64 {
	out := []uint64{}
	for _, g := range res.Granted {
		out = append(out, g.ID)
	}
	return out
}

func endedIDs(res Result) []uint64 {
	out := []uint64{}
	for _, e := range res.Ended {
		out = append(out, e.ID)
	}
	return out
}

func snap(t testing.TB, s *Store) []byte {
	t.Helper()
	b, err := s.MarshalJSON()
	if err != nil {
		t.Fatalf("MarshalJSON: %v", err)
	}
	return b
}

func restored(t testing.TB, s *Store) *Store {
	t.Helper()
	r := New()
	if err := r.UnmarshalJSON(snap(t, s)); err != nil {
		t.Fatalf("UnmarshalJSON: %v", err)
	}
	return r
}

// unchanged fails unless s encodes to before.
func unchanged(t testing.TB, s *Store, before []byte) {
	t.Helper()
	if after := snap(t, s); !bytes.Equal(before, after) {
		t.Fatalf("state changed:\nbefore %s\nafter  %s", before, after)
	}
}

// oracleSet answers "does p conflict with a member" like pathSet, but is
// written independently, with strings.Split, for the checks.
type oracleSet struct {
	members  map[string]uint64 // path → id of the grant holding it
	prefixes map[string]uint64 // every segment prefix of a member, itself included
}

func newOracleSet() *oracleSet {
	return &oracleSet{members: map[string]uint64{}, prefixes: map[string]uint64{}}
}

func segmentPrefixes(p string) []string {
	segs := strings.Split(p, "/")
	out := make([]string, len(segs))
	for i := range segs {
		out[i] = strings.Join(segs[:i+1], "/")
	}
	return out
}

// conflict returns the id of a member that conflicts with a path of paths.
func (o *oracleSet) conflict(paths []string) (uint64, bool) {
	for _, p := range paths {
		if id, ok := o.prefixes[p]; ok { // p is a member or lies above one
			return id, true
		}
		for _, q := range segmentPrefixes(p) {
			if id, ok := o.members[q]; ok { // a member is p or lies above it
				return id, true
			}
		}
	}
	return 0, false
}

func (o *oracleSet) add(id uint64, paths []string) {
	for _, p := range paths {
		o.members[p] = id
		for _, q := range segmentPrefixes(p) {
			o.prefixes[q] = id
		}
	}
}

// checkHeld fails if two held grants conflict. Run after every op.
func checkHeld(t testing.TB, s *Store) {
	t.Helper()
	o := newOracleSet()
	for _, g := range s.heldSorted() {
		if other, ok := o.conflict(g.paths); ok {
			t.Fatalf("held grants %d %v and %d conflict", g.id, g.paths, other)
		}
		o.add(g.id, g.paths)
	}
}

// checkInvariants checks everything the store promises about its state, from
// outside (Grants) and inside (the derived indexes and the tree).
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	checkHeld(t, s)
	var held, waiting []GrantInfo
	for _, g := range s.Grants() {
		if g.State == StateHeld {
			held = append(held, g)
		} else {
			waiting = append(waiting, g)
		}
	}
	blockers := newOracleSet()
	for _, h := range held {
		blockers.add(h.ID, h.Paths)
	}
	for i, w := range waiting {
		if i > 0 && waiting[i-1].ID >= w.ID {
			t.Fatalf("queue out of id order: %d before %d", waiting[i-1].ID, w.ID)
		}
		if w.Position != i+1 || w.Token != 0 {
			t.Fatalf("waiting %d: position %d token %d", w.ID, w.Position, w.Token)
		}
		if _, blocked := blockers.conflict(w.Paths); !blocked && len(held) < MaxHeld {
			t.Fatalf("request %d %v waits though nothing blocks it", w.ID, w.Paths)
		}
		blockers.add(w.ID, w.Paths)
	}
	for _, h := range held {
		if h.Token == 0 || h.Token > s.lastToken || h.ID > s.lastID {
			t.Fatalf("held %d: token %d id beyond counters", h.ID, h.Token)
		}
	}
	var hs, ws pathSet
	for _, g := range s.grants {
		if g.held() {
			hs.addAll(g.paths)
		} else {
			ws.addAll(g.paths)
		}
	}
	if !maps.Equal(hs.exact, s.held.exact) || !maps.Equal(hs.cover, s.held.cover) {
		t.Fatalf("held index out of step")
	}
	if !maps.Equal(ws.exact, s.waiting.exact) || !maps.Equal(ws.cover, s.waiting.cover) {
		t.Fatalf("waiting index out of step")
	}
	if s.nheld != len(held) || len(s.queue) != len(waiting) || len(s.grants) != len(held)+len(waiting) {
		t.Fatalf("counts out of step: nheld %d held %d queue %d waiting %d grants %d",
			s.nheld, len(held), len(s.queue), len(waiting), len(s.grants))
	}
	if n := s.data.root.count(); n != s.data.n {
		t.Fatalf("entry count %d, tree has %d", s.data.n, n)
	}
	checkNode(t, &s.data.root, "", true)
}

func checkNode(t testing.TB, n *node, path string, root bool) {
	t.Helper()
	if n.val != nil && len(n.kids) > 0 {
		t.Fatalf("node %q has a value and children", path)
	}
	if !root && n.val == nil && len(n.kids) == 0 {
		t.Fatalf("node %q is empty", path)
	}
	for k, c := range n.kids {
		checkNode(t, c, strings.TrimPrefix(path+"/"+k, "/"), false)
	}
}
