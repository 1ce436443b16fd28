package worker

import (
	"math"
	"strconv"
)

// encoded is an array or a map still in its encoding (codec.go). A tree keeps
// what it decoded from a package, and what Set gave it, so until something
// goes into it: a page woken from a package holds about its encoded size,
// not the five times that of boxed values, and an untouched part encodes
// again as a copy of its bytes.
//
// An encoded value never changes. A write that goes into one opens it, one
// level (openContainer: its scalars decoded, its arrays and maps encoded),
// and the opened map or array takes its place in its parent; a read opens
// it the same way, unless a view of the tree is being read (a view may
// share the parent), and then reads it where it lies. What is opened from
// one is a copy but for the encoded values in it, which share the bytes of
// the encoding they came in: a tree packs itself again when the encodings
// it may keep alive outgrow it (Tree.settle).
type encoded string

// noBound is the depth bound of an encoded value opened again: it was
// checked against maxDepth when it came in, or the tree made it.
const noBound = math.MaxInt

// open returns r opened one level: a map[string]any or a []any.
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

// materialize returns v, a value of a tree, as Get gives it: JSON-like
// values only, a map or an array a copy of its own.
func materialize(v any) any {
	switch x := v.(type) {
	case encoded:
		return x.decode()
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = materialize(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = materialize(e)
		}
		return out
	}
	return v
}
