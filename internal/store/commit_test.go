package store

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestStaleCommit: a commit for a grant that is not held with that token is
// rejected with ErrStaleGrant and changes nothing, whatever ended it.
func TestStaleCommit(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup leaves grant 1 on "a" stale and returns the token to try.
		setup func(t *testing.T, s *Store, token uint64) uint64
		now   int64
	}{
		{"after Release", func(t *testing.T, s *Store, tok uint64) uint64 {
			mustRelease(t, s, 1, 1)
			return tok
		}, 1},
		{"after a first commit", func(t *testing.T, s *Store, tok uint64) uint64 {
			mustCommit(t, s, 1, map[string]string{"a": `1`}, nil, 1)
			return tok
		}, 1},
		{"after Expire", func(t *testing.T, s *Store, tok uint64) uint64 {
			s.Expire(int64(time.Minute))
			return tok
		}, int64(time.Minute)},
		{"lease over, Expire not yet applied", func(t *testing.T, s *Store, tok uint64) uint64 {
			return tok
		}, int64(time.Minute)},
		{"after ReleaseWorker", func(t *testing.T, s *Store, tok uint64) uint64 {
			s.ReleaseWorker(ada.Worker, 1)
			return tok
		}, 1},
		{"after ReleaseUser", func(t *testing.T, s *Store, tok uint64) uint64 {
			s.ReleaseUser(ada.Worker, ada.User, 1)
			return tok
		}, 1},
		{"revoked and given to the next holder", func(t *testing.T, s *Store, tok uint64) uint64 {
			mustAcquire(t, s, 2, bob, 0, "a")
			if res := s.Expire(int64(time.Minute)); !slices.Equal(grantedIDs(res), []uint64{2}) {
				t.Fatalf("next holder not granted: %+v", res)
			}
			return tok
		}, int64(time.Minute)},
		{"wrong token", func(t *testing.T, s *Store, tok uint64) uint64 {
			return tok + 1
		}, 1},
		{"token of another grant", func(t *testing.T, s *Store, tok uint64) uint64 {
			res := mustAcquire(t, s, 2, bob, 0, "b")
			return res.Granted[0].Token
		}, 1},
		{"zero token", func(t *testing.T, s *Store, tok uint64) uint64 {
			return 0
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			res := mustAcquire(t, s, 1, ada, 0, "a")
			tok := tc.setup(t, s, res.Granted[0].Token)
			before := snap(t, s)
			res, err := s.Commit(1, tok, rawMap(map[string]string{"a": `"late"`}), nil, tc.now)
			if !errors.Is(err, ErrStaleGrant) {
				t.Fatalf("stale commit: %v", err)
			}
			if len(res.Granted)+len(res.Ended)+len(res.Written) != 0 {
				t.Fatalf("failed commit reported events %+v", res)
			}
			unchanged(t, s, before)
			checkInvariants(t, s)
		})
	}

	t.Run("waiting and unknown grants", func(t *testing.T) {
		s := New()
		mustAcquire(t, s, 1, ada, 0, "a")
		mustAcquire(t, s, 2, bob, 0, "a")
		before := snap(t, s)
		for _, id := range []uint64{2, 3} {
			for _, tok := range []uint64{0, 1, 2} {
				if _, err := s.Commit(id, tok, nil, nil, 0); !errors.Is(err, ErrStaleGrant) {
					t.Fatalf("Commit(%d, %d): %v", id, tok, err)
				}
			}
		}
		if _, err := s.Commit(3, 1, nil, nil, 0); !errors.Is(err, ErrUnknownGrant) {
			t.Fatalf("commit of a never acquired grant should also be ErrUnknownGrant: %v", err)
		}
		unchanged(t, s, before)
	})
}

// TestCommitAtomic: a commit with any bad write (outside the grant, under a
// scalar, invalid JSON, overlapping sets) applies nothing and keeps the grant
// held; a good commit applies all its writes, reports them and ends the grant.
func TestCommitAtomic(t *testing.T) {
	for _, tc := range []struct {
		name    string
		set     map[string]string
		del     []string
		wantErr error
	}{
		{"set a parent of the grant", map[string]string{"a/b/x": `1`, "a": `1`}, nil, ErrOutsideGrant},
		{"set a segment-prefix sibling", map[string]string{"a/b/x": `1`, "a/bc": `1`}, nil, ErrOutsideGrant},
		{"set elsewhere", map[string]string{"a/b/x": `1`, "d": `1`}, nil, ErrOutsideGrant},
		{"delete outside", map[string]string{"a/b/x": `1`}, []string{"k/x"}, ErrOutsideGrant},
		{"delete a parent of the grant", nil, []string{"a"}, ErrOutsideGrant},
		{"set under a scalar", map[string]string{"a/b/x": `1`, "c/s/y": `2`}, nil, ErrNotObject},
		{"invalid JSON", map[string]string{"a/b/x": `1`, "c/t": `{"a":`}, nil, ErrBadValue},
		{"empty value", map[string]string{"a/b/x": `1`, "c/t": ``}, nil, ErrBadValue},
		{"overlapping sets", map[string]string{"a/b/x": `1`, "a/b": `{}`}, nil, ErrBadPath},
		{"bad path", map[string]string{"a/b/x": `1`, "c/../d": `1`}, nil, ErrBadPath},
		{"bad delete path", map[string]string{"a/b/x": `1`}, []string{"c//"}, ErrBadPath},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			if err := write(t, s, map[string]string{"a/b/old": `0`, "c/s": `5`, "d": `0`}); err != nil {
				t.Fatal(err)
			}
			mustAcquire(t, s, 10, ada, 0, "a/b", "c")
			before := snap(t, s)
			res, err := commit(s, 10, tc.set, tc.del, 1)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("commit error %v, want %v", err, tc.wantErr)
			}
			if len(res.Granted)+len(res.Ended)+len(res.Written) != 0 {
				t.Fatalf("failed commit reported events %+v", res)
			}
			unchanged(t, s, before)
			// The grant is still held and a good commit goes through.
			res = mustCommit(t, s, 10, map[string]string{"a/b/x": `1`, "c/s": `{"y":2}`}, []string{"a/b/old", "c/none"}, 2)
			if want := []string{"a/b/old", "a/b/x", "c/none", "c/s"}; !slices.Equal(res.Written, want) {
				t.Fatalf("written %v, want %v", res.Written, want)
			}
			if len(res.Ended) != 1 || res.Ended[0].ID != 10 || res.Ended[0].Reason != EndCommitted {
				t.Fatalf("ended %+v", res.Ended)
			}
			want := map[string]string{"a/b/x": `1`, "c/s/y": `2`, "d": `0`}
			if got := get(t, s, "a", "c", "d"); !maps.Equal(got, want) {
				t.Fatalf("after commit %v, want %v", got, want)
			}
			if _, ok := s.Grant(10); ok {
				t.Fatal("grant still known after its commit")
			}
			checkInvariants(t, s)
		})
	}
}

func TestCommitLimits(t *testing.T) {
	s := New()
	mustAcquire(t, s, 1, ada, 0, "a")
	before := snap(t, s)
	set := map[string]string{}
	for i := range MaxWrites + 1 {
		set["a/"+strconv.Itoa(i)] = `1`
	}
	if _, err := commit(s, 1, set, nil, 0); !errors.Is(err, ErrTooManyWrites) {
		t.Fatalf("too many writes: %v", err)
	}
	big := "1" + strings.Repeat(" ", MaxValueBytes)
	if _, err := commit(s, 1, map[string]string{"a": big}, nil, 0); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("value too large: %v", err)
	}
	// Within the limit as given, but larger once escaped.
	escaped := `"` + strings.Repeat("<", MaxValueBytes/2) + `"`
	if _, err := commit(s, 1, map[string]string{"a": escaped}, nil, 0); !errors.Is(err, ErrValueTooLarge) {
		t.Fatalf("value too large once escaped: %v", err)
	}
	unchanged(t, s, before)
	if _, err := commit(s, 1, map[string]string{"a": `"` + strings.Repeat("x", MaxValueBytes-2) + `"`}, nil, 0); err != nil {
		t.Fatalf("value at the limit: %v", err)
	}
}
