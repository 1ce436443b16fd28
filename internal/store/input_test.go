package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestBadInput: every malformed operation returns its sentinel error, changes
// nothing and reports no events.
func TestBadInput(t *testing.T) {
	paths := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = "p/" + strings.Repeat("x", i+1)
		}
		return out
	}
	acquire := func(id uint64, o Owner, ps []string, lease time.Duration) func(*Store) (Result, error) {
		return func(s *Store) (Result, error) { return s.Acquire(id, o, ps, lease, 0) }
	}
	// The store holds grant 1 on "a" (token 1) and nothing else.
	for _, tc := range []struct {
		name    string
		op      func(*Store) (Result, error)
		wantErr error
	}{
		{"empty path", acquire(2, ada, []string{""}, time.Second), ErrBadPath},
		{"leading slash", acquire(2, ada, []string{"/a"}, time.Second), ErrBadPath},
		{"trailing slash", acquire(2, ada, []string{"a/"}, time.Second), ErrBadPath},
		{"dot-dot", acquire(2, ada, []string{"a/../b"}, time.Second), ErrBadPath},
		{"space", acquire(2, ada, []string{"a b"}, time.Second), ErrBadPath},
		{"non-ASCII", acquire(2, ada, []string{"caffè"}, time.Second), ErrBadPath},
		{"path too long", acquire(2, ada, []string{strings.Repeat("x", MaxPathBytes+1)}, time.Second), ErrBadPath},
		{"too many segments", acquire(2, ada, []string{strings.Repeat("x/", MaxSegments) + "x"}, time.Second), ErrBadPath},
		{"one bad path among good ones", acquire(2, ada, []string{"b", "c//d"}, time.Second), ErrBadPath},
		{"no paths", acquire(2, ada, nil, time.Second), ErrBadPath},
		{"too many paths", acquire(2, ada, paths(MaxPaths+1), time.Second), ErrTooManyPaths},
		{"duplicate id", acquire(1, ada, []string{"b"}, time.Second), ErrDuplicateID},
		{"id zero", acquire(0, ada, []string{"b"}, time.Second), ErrDuplicateID},
		{"zero lease", acquire(2, ada, []string{"b"}, 0), ErrBadLease},
		{"negative lease", acquire(2, ada, []string{"b"}, -time.Second), ErrBadLease},
		{"lease too long", acquire(2, ada, []string{"b"}, MaxLease+1), ErrBadLease},
		{"no worker", acquire(2, Owner{User: "ada"}, []string{"b"}, time.Second), ErrBadOwner},
		{"long user", acquire(2, Owner{Worker: "w", User: strings.Repeat("u", MaxNameBytes+1)}, []string{"b"}, time.Second), ErrBadOwner},
		{"invalid JSON", func(s *Store) (Result, error) {
			return s.Commit(1, 1, map[string]json.RawMessage{"a": json.RawMessage(`{'a':1}`)}, nil, 0)
		}, ErrBadValue},
		{"nil value", func(s *Store) (Result, error) {
			return s.Commit(1, 1, map[string]json.RawMessage{"a": nil}, nil, 0)
		}, ErrBadValue},
		{"two values", func(s *Store) (Result, error) {
			return s.Commit(1, 1, map[string]json.RawMessage{"a": json.RawMessage(`1 2`)}, nil, 0)
		}, ErrBadValue},
		{"value too large", func(s *Store) (Result, error) {
			v := json.RawMessage(`"` + strings.Repeat("x", MaxValueBytes) + `"`)
			return s.Commit(1, 1, map[string]json.RawMessage{"a": v}, nil, 0)
		}, ErrValueTooLarge},
		{"bad set path", func(s *Store) (Result, error) {
			return s.Commit(1, 1, map[string]json.RawMessage{"a/.": json.RawMessage(`1`)}, nil, 0)
		}, ErrBadPath},
		{"commit of an unknown grant", func(s *Store) (Result, error) { return s.Commit(9, 1, nil, nil, 0) }, ErrUnknownGrant},
		{"release of an unknown grant", func(s *Store) (Result, error) { return s.Release(9, 0) }, ErrUnknownGrant},
		{"nil op", func(s *Store) (Result, error) { return s.Apply(nil) }, ErrBadOp},
		{"pointer op", func(s *Store) (Result, error) { return s.Apply(&ExpireOp{}) }, ErrBadOp},
		{"nil pointer op", func(s *Store) (Result, error) { return s.Apply((*CommitOp)(nil)) }, ErrBadOp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			mustAcquire(t, s, 1, ada, 0, "a")
			before := snap(t, s)
			res, err := tc.op(s)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			if len(res.Granted)+len(res.Ended)+len(res.Written) != 0 {
				t.Fatalf("failed op reported events %+v", res)
			}
			unchanged(t, s, before)
		})
	}
}

func TestBadReads(t *testing.T) {
	s := New()
	for _, tc := range []struct {
		paths   []string
		wantErr error
	}{
		{[]string{"a", "b//c"}, ErrBadPath},
		{[]string{""}, ErrBadPath},
		{make([]string, MaxPaths+1), ErrTooManyPaths},
	} {
		if _, err := s.Get(tc.paths); !errors.Is(err, tc.wantErr) {
			t.Errorf("Get(%d paths): %v, want %v", len(tc.paths), err, tc.wantErr)
		}
	}
	if got, err := s.Get(nil); err != nil || len(got) != 0 {
		t.Errorf("Get(nil) = %v, %v", got, err)
	}
	if _, ok := s.Grant(1); ok {
		t.Error("Grant(1) of an empty store")
	}
}

// TestReadsAreCopies: changing what Get or a grant's content returned does
// not change the store.
func TestReadsAreCopies(t *testing.T) {
	s := New()
	if err := write(t, s, map[string]string{"a": `"abc"`}); err != nil {
		t.Fatal(err)
	}
	m, _ := s.Get([]string{"a"})
	m["a"][1] = 'X'
	res := mustAcquire(t, s, 10, ada, 0, "a")
	res.Granted[0].Content["a"][1] = 'Y'
	res.Granted[0].Paths[0] = "zzz"
	if got := get(t, s, "a"); got["a"] != `"abc"` {
		t.Fatalf("store changed through a read: %v", got)
	}
	if gi, _ := s.Grant(10); gi.Paths[0] != "a" {
		t.Fatalf("grant paths changed through a result: %v", gi.Paths)
	}
}
