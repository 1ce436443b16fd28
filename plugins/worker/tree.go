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

// Tree is a page's data: JSON-like values only (nil, bool, float64, string,
// []any, map[string]any), so it is serialisable by construction and can move
// with its person. Every write produces a delta that the page pulls.
//
// Paths name a value by its keys separated by "/": "grid/filter/text". A
// numeric segment indexes an array. The empty path is the root, a map.
//
// A tree keeps the maps and arrays nobody has gone into in their encoding
// (encoded.go): what it decoded from a package, and what Set was given. A page
// woken from a package costs about its encoded size; a write opens the
// maps and arrays on its path, one level each, and adds what it writes; Get
// decodes what it returns, so reading a large map or array costs its size.
//
// A Tree is used only from its user's mailbox: it is not safe for concurrent
// use. The maps and arrays Get returns are copies: a change to one is
// written back with Set.
type Tree struct {
	// root is an opened map; each value under it is a scalar, an opened
	// map[string]any or []any, or an encoded map or array.
	root map[string]any
	emit func(op deltaOp, path string, value []byte)
	// touch, if set, is told of every write (a connection's values, which
	// have no deltas, note their changes for the next checkpoint).
	touch func()
	// readers counts the views of the tree being read outside its mailbox
	// (a precopy being encoded). While there is one, a write copies each
	// map and array on its path before changing it, once per view: own
	// holds those copied (or made) since the last view was taken. Raws
	// never change, and are shared as they are.
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
// array is a copy, decoded from what the tree keeps encoded: reading a
// large one costs its size, and changing it changes nothing in the tree.
func (t *Tree) Get(path string) any {
	v, _ := t.find(path)
	return materialize(v)
}

// String returns the string at path, or "".
func (t *Tree) String(path string) string {
	v, _ := t.find(path)
	s, _ := v.(string)
	return s
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
		t.root, t.held = root.(map[string]any), 0
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

// find returns the value the tree stores at path (a scalar, an opened map
// or array, or an encoded one) and whether it stores one there: a key holding nil
// counts, an index out of range does not.
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
// there. into says the walk goes on into it: an encoded value is then opened in its
// place, unless a view is being read (it may share the parent), and then
// read where it lies.
func (t *Tree) step(cur any, seg string, into bool) (any, bool) {
	switch c := cur.(type) {
	case map[string]any:
		v, ok := c[seg]
		if r, isEnc := v.(encoded); isEnc && into && t.readers.Load() == 0 {
			if o, err := r.open(); err == nil {
				c[seg], v = o, o
			}
		}
		return v, ok
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(c) {
			return nil, false
		}
		v := c[i]
		if r, isEnc := v.(encoded); isEnc && into && t.readers.Load() == 0 {
			if o, err := r.open(); err == nil {
				c[i], v = o, o
			}
		}
		return v, true
	case encoded:
		return c.child(seg)
	}
	return nil, false
}

// shape says whether cur is a map or an array, and how many it holds; ok
// is false for a scalar.
func shape(cur any) (isMap bool, n int, ok bool) {
	switch c := cur.(type) {
	case map[string]any:
		return true, len(c), true
	case []any:
		return false, len(c), true
	case encoded:
		return c.isMap(), c.count(), true
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
// with (a grid's rows that became a page of them) would otherwise keep
// all of it, for the few strings and encoded values left of it. A tree so holds at
// most twice its size in encodings, plus packSlack, beside the maps and
// arrays its writes and reads opened.
func (t *Tree) settle() {
	if t.held > 2*t.size+packSlack {
		t.pack()
	}
}

// pack encodes the tree again, whole, and opens its root: everything
// under it is encoded again, in one new encoding of the tree's size. It costs
// an encoding of the tree (a copy, for what is still encoded) once per about
// its size in bytes written.
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
	t.root, t.size, t.held = root.(map[string]any), int64(len(s)), int64(len(s))
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

// identity is what owned knows an opened map or array by.
func identity(x any) unsafe.Pointer {
	switch c := x.(type) {
	case map[string]any:
		return reflect.ValueOf(c).UnsafePointer()
	case []any:
		return unsafe.Pointer(unsafe.SliceData(c))
	}
	return nil
}

// owned returns x (a value of the tree) ready to be changed in place: while
// a view is being read, a map or an array the view may hold is copied
// first (its values stay shared until they are written in turn).
func (t *Tree) owned(x any) any {
	key := identity(x)
	if key == nil {
		return x
	}
	if _, ok := t.own[key]; ok {
		return x
	}
	switch c := x.(type) {
	case map[string]any:
		m := maps.Clone(c)
		if m == nil {
			m = map[string]any{}
		}
		x = m
	case []any:
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

// place writes v (or deletes) at path.
func (t *Tree) place(path string, v any, del bool) error {
	segs := strings.Split(path, "/")
	cow := t.readers.Load() > 0
	if cow {
		t.root = t.owned(t.root).(map[string]any)
	} else {
		t.own = nil // no view left: what it held goes with it
	}
	var cur any = t.root
	for i, seg := range segs {
		last := i == len(segs)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				if del {
					delete(c, seg)
				} else {
					c[seg] = v
				}
				return nil
			}
			next, ok := c[seg]
			if !ok || next == nil {
				if del {
					return nil
				}
				m := map[string]any{}
				if cow {
					t.mark(identity(m))
				}
				c[seg] = m
				cur = m
				continue
			}
			w, err := t.writable(next, cow)
			if err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
			}
			if identity(w) != identity(next) {
				c[seg] = w
			}
			cur = w
		case []any:
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || idx >= len(c) {
				return fmt.Errorf("%w: %q: index %q out of range", ErrBadPath, path, seg)
			}
			if last {
				if del {
					return fmt.Errorf("%w: %q: cannot delete an array element, set the array", ErrBadPath, path)
				}
				c[idx] = v
				return nil
			}
			w, err := t.writable(c[idx], cow)
			if err != nil {
				return fmt.Errorf("%w: %q: %v", ErrBadPath, path, err)
			}
			c[idx] = w
			cur = w
		default:
			return fmt.Errorf("%w: %q: %q is not a map or an array", ErrBadPath, path, strings.Join(segs[:i], "/"))
		}
	}
	return nil
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
