package worker

import (
	"math"
	"strconv"
)

// encoded is an array or a map still in its encoding (codec.go). A tree keeps
// what it decoded from a package, and what Set gave it, so until something
// goes into it: a page woken from a package holds about its encoded size,
// not the five times that of boxed values, and an untouched part encodes
// again as a copy of its bytes. An encoded value never changes.
//
// A tree's values are of three kinds:
//
//   - JSON-like values (scalars, map[string]any, []any), which hold only
//     JSON-like values: what Get returns, as it is;
//   - encoded maps and arrays;
//   - openMap and openArray: a map or an array that a write or a read went
//     into, opened one level (openContainer: its scalars decoded, its maps
//     and arrays encoded), whose values are of any kind. The root is one,
//     though a map[string]any (code outside the tree sets and reads it).
//
// A write into an open one stores what it writes encoded; a write into a
// JSON-like one stores it JSON-like. A Get of an encoded or an open value
// makes it JSON-like in its place (materialize), once. What is opened or
// decoded is a copy, but for the encoded values in it, which share the
// bytes of the encoding they came in: a tree packs itself again when the
// encodings it may keep alive outgrow it (Tree.settle).
type encoded string

// openMap is a map opened from its encoding, or made by a write on its way
// into an open one: its values are of any kind.
type openMap map[string]any

// openArray is an array opened from its encoding: its values are of any
// kind.
type openArray []any

// noBound is the depth bound of an encoded value opened again: it was
// checked against maxDepth when it came in, or the tree made it.
const noBound = math.MaxInt

// open returns r opened one level: an openMap or an openArray.
func (r encoded) open() (any, error) {
	v, _, err := openContainer(string(r), 0, noBound)
	return v, err
}

// isMap says whether r is a map (else an array).
func (r encoded) isMap() bool { return r[0] == 'm' }

// count is how many elements or entries r holds as encoded (equal keys of
// a map, which a damaged package may hold, count each; opened, the last
// one stays).
func (r encoded) count() int {
	n, _, _ := lenAt(string(r), 1)
	return n
}

// child returns what r holds under seg, read where it lies, and whether it
// holds anything there.
func (r encoded) child(seg string) (any, bool) {
	s := string(r)
	n, j, err := lenAt(s, 1)
	if err != nil {
		return nil, false
	}
	if !r.isMap() {
		idx, err := strconv.Atoi(seg)
		if err != nil || idx < 0 || idx >= n {
			return nil, false
		}
		for ; idx > 0 && err == nil; idx-- {
			j, err = skipValue(s, j, noBound)
		}
		if err != nil {
			return nil, false
		}
		v, _, err := itemAt(s, j, noBound)
		return v, err == nil
	}
	var v any
	found := false
	for k := 0; k < n; k++ {
		kl, at, err := lenAt(s, j)
		if err != nil {
			return nil, false
		}
		j = at + kl
		if s[at:j] == seg {
			// Read on: of equal keys, the last is the one an opened map keeps.
			v, j, err = itemAt(s, j, noBound)
			found = true
		} else {
			j, err = skipValue(s, j, noBound)
		}
		if err != nil {
			return nil, false
		}
	}
	return v, found
}

// decode returns r whole, as JSON-like values.
func (r encoded) decode() any {
	v, _ := decodeAt(string(r), 0)
	return v
}

// MarshalJSON writes r as encoding/json writes what it decodes to, so that
// a tree's root marshals as it always did.
func (r encoded) MarshalJSON() ([]byte, error) { return appendJSON(nil, r) }

// isOpen says whether v, a value of a tree, may hold values that are not
// JSON-like: it is encoded, or open.
func isOpen(v any) bool {
	switch v.(type) {
	case encoded, openMap, openArray:
		return true
	}
	return false
}

// materialize makes v, a value of a tree no view shares, JSON-like, in its
// place: an encoded value decoded, an open map or array made a
// map[string]any or a []any with its values made JSON-like in turn.
func materialize(v any) any {
	switch x := v.(type) {
	case encoded:
		return x.decode()
	case openMap:
		for k, e := range x {
			if isOpen(e) {
				x[k] = materialize(e)
			}
		}
		return map[string]any(x)
	case openArray:
		for i, e := range x {
			if isOpen(e) {
				x[i] = materialize(e)
			}
		}
		return []any(x)
	}
	return v
}

// materialized returns v, a value of a tree a view may share, JSON-like:
// what is JSON-like already as it is, the rest a copy.
func materialized(v any) any {
	switch x := v.(type) {
	case encoded:
		return x.decode()
	case openMap:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = materialized(e)
		}
		return out
	case openArray:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = materialized(e)
		}
		return out
	}
	return v
}
