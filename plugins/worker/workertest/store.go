package workertest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Store is the global store's stand-in, with the real one's model (docs
// of the store): a flat set of entries, path → JSON, in which an object
// set at a path is exploded into its members; grants on sets of paths,
// held one at a time per path (a request waits for a held grant on a path
// it shares, first come first served), committed or released. Leases are
// not timed: a test's grant lasts until committed or released.
type Store struct {
	mu      sync.Mutex
	changed *sync.Cond
	data    map[string]json.RawMessage
	grants  map[uint64]*grant
	next    uint64
}

type grant struct {
	paths []string
	token uint64
	held  bool
}

var errStale = errors.New("grant is no longer held")

func newStore() *Store {
	s := &Store{data: map[string]json.RawMessage{}, grants: map[uint64]*grant{}}
	s.changed = sync.NewCond(&s.mu)
	return s
}

// Set stores v (JSON-encodable) at path, replacing what was there and
// under it: a test's seed.
func (s *Store) Set(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("storing %q: %w", path, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleteLocked(path)
	return s.putLocked(path, b)
}

// Get is what the store holds at or under paths, as the app's worker.Get
// reads it.
func (s *Store) Get(paths ...string) worker.Values {
	out := worker.Values{}
	for p, v := range s.get(paths) {
		out[p] = v
	}
	return out
}

// Decode reads the value at path into dst, as worker.GetInto does.
func (s *Store) Decode(path string, dst any) error { return s.Get(path).Decode(path, dst) }

func (s *Store) get(paths []string) map[string][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]byte{}
	for p, v := range s.data {
		for _, q := range paths {
			if under(p, q) {
				out[p] = v
			}
		}
	}
	return out
}

func (s *Store) acquire(req *protocol.GrantAcquire) (*protocol.GrantReply, error) {
	if len(req.Paths) == 0 {
		return nil, errors.New("a grant needs at least one path")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := s.next
	g := &grant{paths: slices.Clone(req.Paths)}
	s.grants[id] = g
	wait := time.Duration(req.WaitMs) * time.Millisecond
	if wait <= 0 {
		wait = callTimeout
	}
	deadline := time.Now().Add(wait)
	timer := time.AfterFunc(wait, func() {
		s.mu.Lock()
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	defer timer.Stop()
	for s.conflictsLocked(id, g) {
		if time.Now().After(deadline) {
			delete(s.grants, id)
			s.changed.Broadcast()
			return nil, fmt.Errorf("no grant on %v within %v: an earlier grant holds or waits for those paths", req.Paths, wait)
		}
		s.changed.Wait()
	}
	g.held, g.token = true, id
	vals := map[string][]byte{}
	for p, v := range s.data {
		for _, q := range g.paths {
			if under(p, q) {
				vals[p] = v
			}
		}
	}
	return &protocol.GrantReply{Id: id, Token: g.token, Values: vals, LeaseMs: int64(worker.DefaultLease / time.Millisecond)}, nil
}

// conflictsLocked says whether g must wait: an earlier grant (held or
// waiting) shares a path with it.
func (s *Store) conflictsLocked(id uint64, g *grant) bool {
	for oid, o := range s.grants {
		if oid >= id {
			continue
		}
		for _, p := range g.paths {
			for _, q := range o.paths {
				if under(p, q) || under(q, p) {
					return true
				}
			}
		}
	}
	return false
}

func (s *Store) commit(c *protocol.GrantCommit) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.grants[c.Id]
	if g == nil || !g.held || g.token != c.Token {
		return errStale
	}
	inside := func(p string) bool {
		return slices.ContainsFunc(g.paths, func(q string) bool { return under(p, q) })
	}
	for _, p := range c.Delete {
		if !inside(p) {
			return fmt.Errorf("deleting %q: outside the grant's paths %v", p, g.paths)
		}
	}
	for p := range c.Set {
		if !inside(p) {
			return fmt.Errorf("setting %q: outside the grant's paths %v", p, g.paths)
		}
	}
	for _, p := range c.Delete {
		s.deleteLocked(p)
	}
	keys := make([]string, 0, len(c.Set))
	for p := range c.Set {
		keys = append(keys, p)
	}
	slices.Sort(keys)
	for _, p := range keys {
		s.deleteLocked(p)
		if err := s.putLocked(p, c.Set[p]); err != nil {
			return err
		}
	}
	delete(s.grants, c.Id)
	s.changed.Broadcast()
	return nil
}

func (s *Store) release(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.grants, id)
	s.changed.Broadcast()
}

func (s *Store) deleteLocked(path string) {
	for p := range s.data {
		if under(p, path) {
			delete(s.data, p)
		}
	}
}

// putLocked stores b at path, exploding an object into its members.
func (s *Store) putLocked(path string, b []byte) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(b, &obj) == nil && obj != nil && len(obj) > 0 {
		for k, v := range obj {
			if k == "" || strings.Contains(k, "/") {
				s.data[path] = b // kept whole, as the store keeps such an object
				return nil
			}
			if err := s.putLocked(path+"/"+k, v); err != nil {
				return err
			}
		}
		return nil
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("storing %q: not JSON: %w", path, err)
	}
	s.data[path] = append(json.RawMessage(nil), b...)
	return nil
}

// under says whether path p is q or lies under it.
func under(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }
