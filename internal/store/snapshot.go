package store

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
)

// snapshotVersion is the version of the snapshot format. A new format gets
// a new number; a restore refuses a version it does not know.
const snapshotVersion = 1

// snapshotJSON is the snapshot format: the entries as a flat map (encoding/json
// writes map keys sorted), the held grants by id, the queue in order.
type snapshotJSON struct {
	Version   int                        `json:"version"`
	Clock     int64                      `json:"clock"`
	LastID    uint64                     `json:"last_id"`
	LastToken uint64                     `json:"last_token"`
	Entries   map[string]json.RawMessage `json:"entries"`
	Held      []grantJSON                `json:"held"`
	Queue     []grantJSON                `json:"queue"`
}

type grantJSON struct {
	ID          uint64        `json:"id"`
	Owner       Owner         `json:"owner"`
	Paths       []string      `json:"paths"`
	Lease       time.Duration `json:"lease"`
	RequestedAt int64         `json:"requested_at"`
	GrantedAt   int64         `json:"granted_at,omitempty"`
	Token       uint64        `json:"token,omitempty"`
}

// MarshalJSON encodes the whole state. The same state always gives the same
// bytes, and UnmarshalJSON restores it exactly.
func (s *Store) MarshalJSON() ([]byte, error) {
	sn := snapshotJSON{
		Version: snapshotVersion, Clock: s.clock, LastID: s.lastID, LastToken: s.lastToken,
		Entries: make(map[string]json.RawMessage, s.data.n),
		Held:    make([]grantJSON, 0, s.nheld),
		Queue:   make([]grantJSON, 0, len(s.queue)),
	}
	s.data.each(func(p string, v json.RawMessage) { sn.Entries[p] = v })
	for _, g := range s.heldSorted() {
		sn.Held = append(sn.Held, toJSON(g))
	}
	for _, id := range s.queue {
		sn.Queue = append(sn.Queue, toJSON(s.grants[id]))
	}
	return json.Marshal(sn)
}

func toJSON(g *grant) grantJSON {
	return grantJSON{ID: g.id, Owner: g.owner, Paths: g.paths, Lease: g.lease,
		RequestedAt: g.requestedAt, GrantedAt: g.grantedAt, Token: g.token}
}

// UnmarshalJSON replaces the state with a snapshot written by MarshalJSON.
// It checks every invariant (valid paths and values, no entry under another,
// held grants that do not conflict, distinct ids and tokens within the
// counters, a queue in id order in which nobody could be granted) and fails
// with ErrBadSnapshot, leaving the store unchanged, if one does not hold.
func (s *Store) UnmarshalJSON(b []byte) error {
	var sn snapshotJSON
	if err := json.Unmarshal(b, &sn); err != nil {
		return fmt.Errorf("restoring store: %w: %v", ErrBadSnapshot, err)
	}
	r, err := restore(&sn)
	if err != nil {
		return fmt.Errorf("restoring store: %w: %v", ErrBadSnapshot, err)
	}
	*s = *r
	return nil
}

func restore(sn *snapshotJSON) (*Store, error) {
	if sn.Version != snapshotVersion {
		return nil, fmt.Errorf("version %d, want %d", sn.Version, snapshotVersion)
	}
	if sn.Clock < 0 {
		return nil, fmt.Errorf("negative clock %d", sn.Clock)
	}
	s := New()
	s.clock, s.lastID, s.lastToken = sn.Clock, sn.LastID, sn.LastToken

	var placed pathSet
	for _, p := range slices.Sorted(maps.Keys(sn.Entries)) {
		if err := checkPath(p); err != nil {
			return nil, err
		}
		if placed.hits(p) {
			return nil, fmt.Errorf("entry %s lies above or under another", quote(p))
		}
		placed.add(p)
		v, err := canonical(sn.Entries[p])
		if err != nil {
			return nil, fmt.Errorf("entry %s: %w", quote(p), err)
		}
		s.data.put(p, v)
	}

	tokens := map[uint64]bool{}
	for _, gj := range sn.Held {
		g, err := s.restoreGrant(gj)
		if err != nil {
			return nil, err
		}
		switch {
		case g.token == 0 || g.token > s.lastToken || tokens[g.token]:
			return nil, fmt.Errorf("grant %d: token %d not unique in [1, %d]", g.id, g.token, s.lastToken)
		case g.grantedAt < g.requestedAt || g.grantedAt > s.clock:
			return nil, fmt.Errorf("grant %d: granted at %d, outside [%d, %d]", g.id, g.grantedAt, g.requestedAt, s.clock)
		case s.held.hitsAny(g.paths):
			return nil, fmt.Errorf("held grant %d conflicts with another", g.id)
		case s.nheld >= MaxHeld:
			return nil, fmt.Errorf("more than %d held grants", MaxHeld)
		}
		tokens[g.token] = true
		s.held.addAll(g.paths)
		s.nheld++
	}
	if len(sn.Queue) > MaxWaiting {
		return nil, fmt.Errorf("%d waiting requests, limit %d", len(sn.Queue), MaxWaiting)
	}
	var ahead pathSet
	for _, gj := range sn.Queue {
		g, err := s.restoreGrant(gj)
		if err != nil {
			return nil, err
		}
		switch {
		case g.token != 0 || g.grantedAt != 0:
			return nil, fmt.Errorf("waiting request %d has a token or a grant time", g.id)
		case len(s.queue) > 0 && g.id < s.queue[len(s.queue)-1]:
			return nil, fmt.Errorf("queue out of order at %d", g.id)
		case s.nheld < MaxHeld && !s.held.hitsAny(g.paths) && !ahead.hitsAny(g.paths):
			return nil, fmt.Errorf("waiting request %d could be granted", g.id)
		}
		ahead.addAll(g.paths)
		s.queue = append(s.queue, g.id)
	}
	s.waiting = ahead
	return s, nil
}

// restoreGrant checks the fields every grant shares and records it.
func (s *Store) restoreGrant(gj grantJSON) (*grant, error) {
	if gj.ID == 0 || gj.ID > s.lastID || s.grants[gj.ID] != nil {
		return nil, fmt.Errorf("grant id %d not unique in [1, %d]", gj.ID, s.lastID)
	}
	if err := gj.Owner.check(); err != nil {
		return nil, fmt.Errorf("grant %d: %w", gj.ID, err)
	}
	if err := checkLease(gj.Lease); err != nil {
		return nil, fmt.Errorf("grant %d: %w", gj.ID, err)
	}
	ps, err := normalizePaths(gj.Paths)
	if err != nil {
		return nil, fmt.Errorf("grant %d: %w", gj.ID, err)
	}
	if !slices.Equal(ps, gj.Paths) {
		return nil, fmt.Errorf("grant %d: paths not sorted and minimal", gj.ID)
	}
	if gj.RequestedAt < 0 || gj.RequestedAt > s.clock {
		return nil, fmt.Errorf("grant %d: requested at %d, outside [0, %d]", gj.ID, gj.RequestedAt, s.clock)
	}
	g := &grant{id: gj.ID, owner: gj.Owner, paths: ps, lease: gj.Lease,
		requestedAt: gj.RequestedAt, grantedAt: gj.GrantedAt, token: gj.Token}
	s.grants[g.id] = g
	return g, nil
}
