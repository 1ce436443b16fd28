package store

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// checkPath returns an ErrBadPath error unless p is a valid path.
func checkPath(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty path", ErrBadPath)
	}
	if len(p) > MaxPathBytes {
		return fmt.Errorf("%w: %s is %d bytes, limit %d", ErrBadPath, quote(p), len(p), MaxPathBytes)
	}
	segs, start := 1, 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if !segmentByte(p[i]) {
				return fmt.Errorf("%w: %s has byte %q", ErrBadPath, quote(p), p[i])
			}
			continue
		}
		switch p[start:i] {
		case "":
			return fmt.Errorf("%w: %s has an empty segment", ErrBadPath, quote(p))
		case ".", "..":
			return fmt.Errorf("%w: %s has a %q segment", ErrBadPath, quote(p), p[start:i])
		}
		if i < len(p) {
			segs++
		}
		start = i + 1
	}
	if segs > MaxSegments {
		return fmt.Errorf("%w: %s has %d segments, limit %d", ErrBadPath, quote(p), segs, MaxSegments)
	}
	return nil
}

// isSegment reports whether s can be one segment of a path.
func isSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !segmentByte(s[i]) {
			return false
		}
	}
	return true
}

func segmentByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '_' || c == '~' || c == '-'
}

// quote quotes p for an error message, cut short if it is long.
func quote(p string) string {
	const keep = 64
	if len(p) > keep {
		return fmt.Sprintf("%q...", p[:keep])
	}
	return fmt.Sprintf("%q", p)
}

// under reports whether p is root or lies below it, by whole segments:
// under("a/b", "a") is true, under("ab", "a") is false.
func under(p, root string) bool {
	return p == root || len(p) > len(root) && p[len(root)] == '/' && strings.HasPrefix(p, root)
}

// overlaps reports whether p and q conflict: one is the other or under it.
func overlaps(p, q string) bool {
	return under(p, q) || under(q, p)
}

// within reports whether p lies at or under one of roots.
func within(p string, roots []string) bool {
	for _, r := range roots {
		if under(p, r) {
			return true
		}
	}
	return false
}

// normalizePaths checks the paths of a request and returns them sorted,
// without duplicates and without any path that lies under another one of the
// set (which would add nothing to what the set covers).
func normalizePaths(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no paths", ErrBadPath)
	}
	if len(paths) > MaxPaths {
		return nil, fmt.Errorf("%w: %d paths, limit %d", ErrTooManyPaths, len(paths), MaxPaths)
	}
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return nil, err
		}
	}
	sorted := slices.Clone(paths)
	slices.Sort(sorted)
	// A path sorts after every path above it, so keeping a path only if none
	// kept so far covers it leaves the minimal cover.
	out := sorted[:0]
	for _, p := range sorted {
		if !within(p, out) {
			out = append(out, p)
		}
	}
	return slices.Clip(out), nil
}

// pathSet is a multiset of paths that answers "does p conflict with any
// member" in time proportional to the segments of p, whatever its size.
type pathSet struct {
	exact map[string]int // each member, with multiplicity
	cover map[string]int // each member and each of its ancestors, with multiplicity
}

func (ps *pathSet) add(p string) {
	if ps.exact == nil {
		ps.exact = map[string]int{}
		ps.cover = map[string]int{}
	}
	ps.exact[p]++
	ps.cover[p]++
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			ps.cover[p[:i]]++
		}
	}
}

func (ps *pathSet) remove(p string) {
	dec(ps.exact, p)
	dec(ps.cover, p)
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			dec(ps.cover, p[:i])
		}
	}
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// hits reports whether p conflicts with a member: p is a member, lies above
// one, or lies under one.
func (ps *pathSet) hits(p string) bool {
	if ps.cover[p] > 0 {
		return true
	}
	for i := 0; i < len(p); i++ {
		if p[i] == '/' && ps.exact[p[:i]] > 0 {
			return true
		}
	}
	return false
}

func (ps *pathSet) hitsAny(paths []string) bool {
	for _, p := range paths {
		if ps.hits(p) {
			return true
		}
	}
	return false
}

func (ps *pathSet) addAll(paths []string) {
	for _, p := range paths {
		ps.add(p)
	}
}

func (ps *pathSet) removeAll(paths []string) {
	for _, p := range paths {
		ps.remove(p)
	}
}

func (ps *pathSet) clone() pathSet {
	return pathSet{exact: maps.Clone(ps.exact), cover: maps.Clone(ps.cover)}
}
