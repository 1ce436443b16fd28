package store

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestCheckPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"a", true},
		{"customers/42/name", true},
		{"A-z_0.9~", true},
		{"a..b/.c/d.", true},
		{strings.Repeat("a", MaxPathBytes), true},
		{strings.Repeat("a/", MaxSegments-1) + "a", true},
		{"", false},
		{"/a", false},
		{"a/", false},
		{"a//b", false},
		{".", false},
		{"a/./b", false},
		{"a/..", false},
		{"a b", false},
		{"a\x00", false},
		{"ä", false},
		{"a/b?c", false},
		{strings.Repeat("a", MaxPathBytes+1), false},
		{strings.Repeat("a/", MaxSegments) + "a", false},
	} {
		name := tc.path
		if len(name) > 20 {
			name = name[:20] + "..."
		}
		t.Run(name, func(t *testing.T) {
			err := checkPath(tc.path)
			if (err == nil) != tc.ok {
				t.Fatalf("checkPath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadPath) {
				t.Fatalf("error %v is not ErrBadPath", err)
			}
		})
	}
}

// TestConflicts: two requests conflict exactly when one path is, by whole
// segments, a prefix of (or equal to) a path of the other; the second is
// granted at once exactly when they do not conflict.
func TestConflicts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		a, b     []string
		conflict bool
	}{
		{"same path", []string{"a"}, []string{"a"}, true},
		{"parent and child", []string{"a"}, []string{"a/b"}, true},
		{"child and parent", []string{"a/b"}, []string{"a"}, true},
		{"grandchild", []string{"a"}, []string{"a/b/c"}, true},
		{"segment prefix is not a path prefix", []string{"a/b"}, []string{"a/bc"}, false},
		{"string prefix across a separator", []string{"a-b"}, []string{"a/b"}, false},
		{"dot extension", []string{"a"}, []string{"a.b"}, false},
		{"siblings", []string{"a/b"}, []string{"a/c"}, false},
		{"suffix is not prefix", []string{"x/y"}, []string{"y"}, false},
		{"one of several overlaps", []string{"a/b", "c"}, []string{"d", "c/d"}, true},
		{"several disjoint", []string{"a/b", "c/d"}, []string{"a/c", "c/e", "b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conflictOracle(tc.a, tc.b); got != tc.conflict {
				t.Fatalf("oracle says %v, table says %v", got, tc.conflict)
			}
			s := New()
			mustAcquire(t, s, 1, ada, 0, tc.a...)
			res := mustAcquire(t, s, 2, bob, 0, tc.b...)
			if granted := len(res.Granted) == 1; granted == tc.conflict {
				t.Fatalf("second request granted=%v, conflict=%v", granted, tc.conflict)
			}
			checkInvariants(t, s)
		})
	}
}

func TestNormalizePaths(t *testing.T) {
	for _, tc := range []struct {
		in, want []string
	}{
		{[]string{"b", "a"}, []string{"a", "b"}},
		{[]string{"a", "a"}, []string{"a"}},
		{[]string{"a/b", "a", "a-b"}, []string{"a", "a-b"}},
		{[]string{"a/b/c", "a/b", "a/bc"}, []string{"a/b", "a/bc"}},
	} {
		got, err := normalizePaths(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("normalizePaths(%v) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
