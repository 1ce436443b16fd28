package worker

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"
)

// Tree is a page's data, held as JSON-like values only (nil, bool, float64,
// string, []any, map[string]any), so it is serialisable by construction and
// can move with its person. Set takes those, and any value that marshals to
// JSON (an int, a struct, a slice of them), stored as the JSON-like values
// it marshals to: Get returns those (a number as float64, a struct as a
// map[string]any), never the value given. Every write produces a delta that
// the page pulls.
//
// Paths name a value by its keys separated by "/": "grid/filter/text". A
// numeric segment indexes an array. The empty path is the root, a map.
//
// A tree keeps the maps and arrays nobody has gone into in their encoding
// (encoded.go): what it decoded from a package, and what Set was given. A
// page woken from a package costs about its encoded size; a write, or a
// read of a value inside, opens the maps and arrays on its path, one level
// each; a Get of a whole map or array decodes it, once.
//
// A Tree is used only from its user's mailbox: it is not safe for concurrent
// use, and values returned by Get must be treated as read-only (write them
// back with Set).
type Tree struct {
	// root is an open map (encoded.go): its values are of any kind.
	root map[string]any
	emit func(op deltaOp, path string, value []byte)
	// touch, if set, is told of every write (a connection's values, which
	// have no deltas, note their changes for the next checkpoint).
	touch func()
	// readers counts the views of the tree being read outside its mailbox
	// (a precopy being encoded). While there is one, a write copies each
	// map and array on its path before changing it, once per view: own
	// holds those copied (or made) since the last view was taken. Encoded
	// values never change, and are shared as they are.
	readers atomic.Int32
	own     map[unsafe.Pointer]struct{}
	// size is the tree's size as the tree codec writes it, kept as it is
	// written (exact for Set and Delete, close after a journal replay);
	// room, if set, is asked before a write that grows it by delta, and
	// its error refuses the write (Options.MaxPageBytes).
	size int64
	room func(delta int64) error
	// held bounds the bytes of the encodings the tree may keep alive
	// through its encoded values: what it decoded or last packed, and the
	// maps and arrays written since (0: not known yet, taken to be the
	// size). See settle.
	held int64
}

// ErrStateTooLarge is returned by a write that would take a page's state,
// or a person's, past its bound (Options.MaxPageBytes, MaxPersonBytes).
var ErrStateTooLarge = errors.New("state too large")

type deltaOp int

const (
	opSet deltaOp = iota
	opDelete
)

// ErrBadPath is returned for a path that does not name a place in the tree.
var ErrBadPath = errors.New("bad tree path")

func newTree(emit func(deltaOp, string, []byte)) *Tree {
	return &Tree{root: map[string]any{}, emit: emit, size: 2}
}

// Get returns the value at path, or nil when there is none. A map or an
// array is the tree's own, to be read only. One the tree keeps encoded (or
// holds encoded parts of) is decoded at its first Get and kept so: reading
// a large one whole costs its size once, and its boxed values from then
// on. The root is a copy of the root map, its values the tree's own.
func (t *Tree) Get(path string) any {
	if path == "" {
		return t.rootValue()
	}
	v, _ := t.find(path)
	if !isOpen(v) {
		return v
	}
	if t.readers.Load() > 0 {
		return materialized(v) // a view may share it: a copy
	}
	m := materialize(v)
	parent, last := splitLast(path)
	p, _ := t.find(parent)
	if pm, ok := asMap(p); ok {
		pm[last] = m
	} else if pa, ok := asArray(p); ok {
		i, _ := strconv.Atoi(last)
		pa[i] = m
	}
	return m
}

// rootValue is Get(""): a copy of the root, its values made JSON-like in
// their place (the root is open: Set stores encoded values in it).
func (t *Tree) rootValue() map[string]any {
	out := make(map[string]any, len(t.root))
	viewed := t.readers.Load() > 0
	for k, v := range t.root {
		switch {
		case !isOpen(v):
		case viewed:
			v = materialized(v)
		default:
			v = materialize(v)
			t.root[k] = v
		}
		out[k] = v
	}
	return out
}

// String returns the string at path, or "".
func (t *Tree) String(path string) string {
	v, _ := t.find(path)
	s, _ := v.(string)
	return s
}

// Len returns how many elements the array at path holds, or entries the
// map at path, and 0 for a scalar or nothing there. It reads no value: an
// array the tree keeps encoded is counted where it lies, not decoded (a
// handler that needs a grid's length should ask Len, not Get).
func (t *Tree) Len(path string) int {
	v, _ := t.find(path)
	_, n, _ := shape(v)
	return n
}

// Number returns the number at path, or 0.
func (t *Tree) Number(path string) float64 {
	v, _ := t.find(path)
	f, _ := v.(float64)
	return f
}

// Set stores a copy of v at path, creating the maps on the way. v must be
// JSON-like or marshal to JSON; anything else (a channel, a func) is refused,
// and so is a NaN or an infinity where there is a delta to write.
// Setting the root replaces the whole tree and requires a map.
func (t *Tree) Set(path string, v any) error {
	nv, err := storable(v)
	if err != nil {
		return fmt.Errorf("setting %q: %w", path, err)
	}
	if r, ok := nv.(encoded); path == "" && (!ok || !r.isMap()) {
		return fmt.Errorf("setting the root: %w: the root must be a map", ErrBadPath)
	}
	var js []byte
	if t.emit != nil {
		if js, err = appendJSON(nil, nv); err != nil {
			return fmt.Errorf("encoding %q: %w", path, err)
		}
	}
	delta := t.growth(path, nv, false)
	if delta > 0 && t.room != nil {
		if err := t.room(delta); err != nil {
			return fmt.Errorf("setting %q: %w", path, err)
		}
	}
	if path == "" {
		root, err := nv.(encoded).open()
		if err != nil {
			return fmt.Errorf("setting the root: %w", err)
		}
		t.root, t.held = map[string]any(root.(openMap)), 0
	} else if err := t.place(path, nv, false); err != nil {
		return err
	}
	t.held += int64(heldBy(nv))
	t.size += delta
	t.settle()
	if t.touch != nil {
		t.touch()
	}
	if t.emit != nil {
		t.emit(opSet, path, js)
	}
	return nil
}

// Delete removes the value at path; deleting what is not there is a no-op
// that produces no delta.
func (t *Tree) Delete(path string) {
	if path == "" {
		return
	}
	if _, ok := t.find(path); !ok {
		return
	}
	delta := t.growth(path, nil, true)
	if err := t.place(path, nil, true); err != nil {
		return
	}
	t.size += delta
	t.settle()
	if t.touch != nil {
		t.touch()
	}
	if t.emit != nil {
		t.emit(opDelete, path, nil)
	}
}

// storable returns v as a tree stores it: a scalar as itself, an array or
// a map in its encoding (encoded), sized first and written into one buffer
// of its size.
func storable(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, float64, string:
		return x, nil
	}
	var b []byte
	if n, ok := sizeAny(v); ok {
		b = make([]byte, 0, n)
	}
	b, err := appendAny(b, v)
	if err != nil {
		return nil, err
	}
	if b[0] == 'a' || b[0] == 'm' {
		return encoded(ownString(b)), nil
	}
	x, _, err := itemAt(string(b), 0, 0)
	return x, err
}

// heldBy is what a stored value may keep alive of an encoding: an
// encoded value its bytes, a scalar nothing.
func heldBy(v any) int {
	if x, ok := v.(encoded); ok {
		return len(x)
	}
	return 0
}

// find returns the value the tree stores at path, of any kind (encoded.go),
// and whether it stores one there: a key holding nil counts, an index out
// of range does not.
func (t *Tree) find(path string) (any, bool) {
	if path == "" {
		return t.root, true
	}
	var cur any = t.root
	for {
		seg, rest, more := strings.Cut(path, "/")
		next, ok := t.step(cur, seg, more)
		if !ok || !more {
			return next, ok
		}
		cur, path = next, rest
	}
}

// step returns what cur holds under seg and whether it holds anything
// there. into says the walk goes on into it: an encoded value is then
// opened in its place, unless a view is being read (it may share the
// parent), and then read where it lies.
func (t *Tree) step(cur any, seg string, into bool) (any, bool) {
	if m, ok := asMap(cur); ok {
		v, ok := m[seg]
		if r, isEnc := v.(encoded); isEnc && into && t.readers.Load() == 0 {
			if o, err := r.open(); err == nil {
				m[seg], v = o, o
			}
		}
		return v, ok
	}
	if a, ok := asArray(cur); ok {
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(a) {
			return nil, false
		}
		v := a[i]
		if r, isEnc := v.(encoded); isEnc && into && t.readers.Load() == 0 {
			if o, err := r.open(); err == nil {
				a[i], v = o, o
			}
		}
		return v, true
	}
	if r, ok := cur.(encoded); ok {
		return r.child(seg)
	}
	return nil, false
}

// asMap returns v as a map if it is one: JSON-like or open.
func asMap(v any) (map[string]any, bool) {
	switch x := v.(type) {
	case map[string]any:
		return x, true
	case openMap:
		return x, true
	}
	return nil, false
}

// asArray returns v as an array if it is one: JSON-like or open.
func asArray(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case openArray:
		return x, true
	}
	return nil, false
}

// shape says whether cur is a map or an array, and how many it holds; ok
// is false for a scalar.
func shape(cur any) (isMap bool, n int, ok bool) {
	if m, ok := asMap(cur); ok {
		return true, len(m), true
	}
	if a, ok := asArray(cur); ok {
		return false, len(a), true
	}
	if r, ok := cur.(encoded); ok {
		return r.isMap(), r.count(), true
	}
	return false, 0, false
}

// growth is what writing nv at path (or deleting it) adds to the tree's
// size: the entries it adds or removes, the maps it makes on the way, and
// the counts that take a byte more or less. It walks the write's path
// first, opening what the write will go into. A write place refuses adds
// nothing.
func (t *Tree) growth(path string, nv any, del bool) int64 {
	if t.held == 0 {
		// Not known: the root was decoded elsewhere (a precopy's, loadTree).
		t.held = t.size
	}
	if path == "" {
		return int64(sizeValue(nv)) - t.size
	}
	entry := func(key string) int64 { return int64(uvarintLen(len(key)) + len(key)) }
	counted := func(n, by int) int64 { return int64(uvarintLen(n+by) - uvarintLen(n)) }
	var cur any = t.root
	for {
		seg, rest, more := strings.Cut(path, "/")
		isMap, n, ok := shape(cur)
		if !ok {
			return 0
		}
		next, present := t.step(cur, seg, more)
		if !more {
			switch {
			case !isMap && (del || !present):
				return 0 // an index out of range, or an element deleted: refused
			case !isMap || (present && !del):
				return int64(sizeValue(nv) - sizeValue(next))
			case del && present:
				return -entry(seg) - int64(sizeValue(next)) + counted(n, -1)
			case del:
				return 0
			}
			return entry(seg) + int64(sizeValue(nv)) + counted(n, 1)
		}
		if isMap && (!present || next == nil) {
			if del {
				return 0
			}
			// A new map from here down, each holding the next.
			d := int64(1) // a nil becomes an empty map
			if !present {
				d = entry(seg) + 2 + counted(n, 1)
			}
			for {
				seg, rest, more = strings.Cut(rest, "/")
				if !more {
					return d + entry(seg) + int64(sizeValue(nv))
				}
				d += entry(seg) + 2
			}
		}
		if !present {
			return 0
		}
		cur, path = next, rest
	}
}

// packSlack is how much the encodings a tree may keep alive can exceed
// twice its size before it packs.
const packSlack = 64 << 10

// settle packs the tree when the encodings it may keep alive (held) pass
// twice its size: a page whose writes replaced most of what it was woken
// with (a grid's rows that became a page of them) would otherwise keep all
// of that encoding alive for the few encoded values left of it. The
// encodings a tree holds so stay under twice its size plus packSlack;
// beside them are the maps and arrays its writes and reads opened, and
// what Gets decoded.
func (t *Tree) settle() {
	if t.held > 2*t.size+packSlack {
		t.pack()
	}
}

// pack encodes the tree again, whole, and opens its root: everything
// under it is encoded again, in one encoding of the tree's size. It costs
// an encoding of the tree (a copy, for what is still encoded), and comes
// once per at least about its size in maps and arrays written.
func (t *Tree) pack() {
	b, err := appendValue(make([]byte, 0, sizeValue(t.root)), t.root)
	if err != nil {
		return // not a tree value: cannot happen, and the tree stays as it is
	}
	s := ownString(b)
	root, _, err := openContainer(s, 0, noBound)
	if err != nil {
		return
	}
	t.root, t.size, t.held = map[string]any(root.(openMap)), int64(len(s)), int64(len(s))
	if t.readers.Load() > 0 {
		t.mark(identity(t.root)) // the view has the old root
	}
}

// view returns the tree as it is now, which stays so while the tree goes
// on being written, and release, to be called once it has been read. It is
// taken from the tree's mailbox; the view may be read from anywhere.
func (t *Tree) view() (root map[string]any, release func()) {
	t.readers.Add(1)
	t.own = nil // everything is shared with the new view
	var done atomic.Bool
	return t.root, func() {
		if done.CompareAndSwap(false, true) {
			t.readers.Add(-1)
		}
	}
}

// identity is what owned knows a map or an array by.
func identity(x any) unsafe.Pointer {
	if m, ok := asMap(x); ok {
		return reflect.ValueOf(m).UnsafePointer()
	}
	if a, ok := asArray(x); ok {
		return unsafe.Pointer(unsafe.SliceData(a))
	}
	return nil
}

// owned returns x (a value of the tree) ready to be changed in place: while
// a view is being read, a map or an array the view may hold is copied
// first (its values stay shared until they are written in turn).
func (t *Tree) owned(x any) any {
	_, isMap := asMap(x)
	_, isArray := asArray(x)
	if !isMap && !isArray {
		return x
	}
	if _, ok := t.own[identity(x)]; ok {
		return x
	}
	switch c := x.(type) {
	case map[string]any:
		m := maps.Clone(c)
		if m == nil {
			m = map[string]any{}
		}
		x = m
	case openMap:
		m := maps.Clone(c)
		if m == nil {
			m = openMap{}
		}
		x = m
	case []any:
		x = slices.Clone(c)
	case openArray:
		x = slices.Clone(c)
	}
	t.mark(identity(x))
	return x
}

func (t *Tree) mark(key unsafe.Pointer) {
	if t.own == nil {
		t.own = map[unsafe.Pointer]struct{}{}
	}
	t.own[key] = struct{}{}
}

// writable returns x, the value a write goes on into, ready to be changed
// in place: an encoded value opened, and while a view is being read, owned.
func (t *Tree) writable(x any, cow bool) (any, error) {
	if r, ok := x.(encoded); ok {
		o, err := r.open()
		if err == nil && cow {
			t.mark(identity(o))
		}
		return o, err
	}
	if cow {
		return t.owned(x), nil
	}
	return x, nil
}

// place writes v (or deletes) at path. What it writes into an open map or
// array (the root is one) goes as it is given; into a JSON-like one, made
// JSON-like (v is the write's own: Set's encoding, a journal's decoding).
func (t *Tree) place(path string, v any, del bool) error {
	cow := t.readers.Load() > 0
	if cow {
		t.root = t.owned(t.root).(map[string]any)
	} else {
		t.own = nil // no view left: what it held goes with it
	}
	var cur any = t.root
	open := true
	// The path's segments in turn, without a slice of them: off is where
	// seg starts.
	for off := 0; ; {
		seg, _, more := strings.Cut(path[off:], "/")
		if more {
			var err error
			cur, open, err = t.into(cur, open, seg, del, cow)
			switch {
			case errors.Is(err, errIndexRange):
				return fmt.Errorf("%w: %q: index %q out of range", ErrBadPath, path, seg)
			case errors.Is(err, errNotContainer):
				return fmt.Errorf("%w: %q: %q is not a map or an array", ErrBadPath, path, strings.TrimSuffix(path[:off], "/"))
			case err != nil:
				return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
			case cur == nil && del:
				return nil // what is to be deleted is not there
			}
			off += len(seg) + 1
			continue
		}
		if !open {
			v = materialize(v)
		}
		if m, ok := asMap(cur); ok {
			if del {
				delete(m, seg)
			} else {
				m[seg] = v
			}
			return nil
		}
		if a, ok := asArray(cur); ok {
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || idx >= len(a) {
				return fmt.Errorf("%w: %q: index %q out of range", ErrBadPath, path, seg)
			}
			if del {
				return fmt.Errorf("%w: %q: cannot delete an array element, set the array", ErrBadPath, path)
			}
			a[idx] = v
			return nil
		}
		return fmt.Errorf("%w: %q: %q is not a map or an array", ErrBadPath, path, strings.TrimSuffix(path[:off], "/"))
	}
}

var (
	errIndexRange   = errors.New("index out of range")
	errNotContainer = errors.New("not a map or an array")
)

// into returns what cur holds under seg (open says whether cur is open),
// ready for a write to go on into, and whether it is open: a map made if
// a write needs one (nil for a delete), an encoded value opened, and
// while a view is being read, owned.
func (t *Tree) into(cur any, open bool, seg string, del, cow bool) (any, bool, error) {
	if m, ok := asMap(cur); ok {
		next, ok := m[seg]
		if !ok || next == nil {
			if del {
				return nil, false, nil
			}
			var made any = map[string]any{}
			if open {
				made = openMap{}
			}
			if cow {
				t.mark(identity(made))
			}
			m[seg] = made
			return made, open, nil
		}
		w, err := t.writable(next, cow)
		if err != nil {
			return nil, false, err
		}
		if identity(w) != identity(next) {
			m[seg] = w
		}
		return w, isOpenContainer(w), nil
	}
	if a, ok := asArray(cur); ok {
		idx, err := strconv.Atoi(seg)
		if err != nil || idx < 0 || idx >= len(a) {
			return nil, false, errIndexRange
		}
		w, err := t.writable(a[idx], cow)
		if err != nil {
			return nil, false, err
		}
		a[idx] = w
		return w, isOpenContainer(w), nil
	}
	return nil, false, errNotContainer
}

// isOpenContainer says whether v is an open map or array.
func isOpenContainer(v any) bool {
	switch v.(type) {
	case openMap, openArray:
		return true
	}
	return false
}

// snapshot encodes the whole tree as JSON (a RESET).
func (t *Tree) snapshot() ([]byte, error) {
	n := sizeValue(t.root)
	return appendJSON(make([]byte, 0, n+n/4), t.root)
}

// splitLast splits a path into its parent's path and its last key.
func splitLast(path string) (string, string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
}
