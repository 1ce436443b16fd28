package worker

import (
	"encoding/json"
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
// A Tree is used only from its user's mailbox: it is not safe for concurrent
// use, and values returned by Get must be treated as read-only (write them
// back with Set).
type Tree struct {
	root map[string]any
	emit func(op deltaOp, path string, value []byte)
	// touch, if set, is told of every write (a connection's values, which
	// have no deltas, note their changes for the next checkpoint).
	touch func()
	// readers counts the views of the tree being read outside its mailbox
	// (a precopy being encoded). While there is one, a write copies each
	// map and array on its path before changing it, once per view: own
	// holds those copied (or made) since the last view was taken.
	readers atomic.Int32
	own     map[unsafe.Pointer]struct{}
	// size is the tree's size as the tree codec writes it, kept as it is
	// written (exact for Set and Delete, close after a journal replay);
	// room, if set, is asked before a write that grows it by delta, and
	// its error refuses the write (Options.MaxPageBytes).
	size int64
	room func(delta int64) error
}

// ErrStateTooLarge is returned by a write that would take a page's state,
// or a person's, past its bound (Options.MaxPageBytes, MaxPersonBytes).
var ErrStateTooLarge = errors.New("state too large")

// growth is what writing nv at path adds to the tree's size.
func (t *Tree) growth(path string, nv any, del bool) int64 {
	if path == "" {
		return int64(sizeValue(nv)) - t.size
	}
	old := t.Get(path)
	parent, last := splitLast(path)
	entry := int64(uvarintLen(len(last)) + len(last))
	var d int64
	if !del && parent != "" && t.Get(parent) == nil {
		// place makes the missing maps on the way: an entry and an empty
		// map each.
		var cur any = t.root
		for _, seg := range strings.Split(parent, "/") {
			m, ok := cur.(map[string]any)
			if ok && m[seg] != nil {
				cur = m[seg]
				continue
			}
			cur = nil
			d += int64(uvarintLen(len(seg))+len(seg)) + 2
		}
	}
	if old != nil || t.has(path) {
		d -= int64(sizeValue(old))
	} else if !del {
		d += entry
	}
	if del {
		if old != nil || t.has(path) {
			d -= entry
		}
		return d
	}
	return d + int64(sizeValue(nv))
}

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

// Get returns the value at path, or nil when there is none.
func (t *Tree) Get(path string) any {
	if path == "" {
		return t.root
	}
	var cur any = t.root
	for _, seg := range strings.Split(path, "/") {
		switch c := cur.(type) {
		case map[string]any:
			cur = c[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(c) {
				return nil
			}
			cur = c[i]
		default:
			return nil
		}
	}
	return cur
}

// String returns the string at path, or "".
func (t *Tree) String(path string) string {
	s, _ := t.Get(path).(string)
	return s
}

// Number returns the number at path, or 0.
func (t *Tree) Number(path string) float64 {
	f, _ := t.Get(path).(float64)
	return f
}

// Set stores a copy of v at path, creating the maps on the way. v must be
// JSON-like or marshal to JSON; anything else (a channel, a func) is refused.
// Setting the root replaces the whole tree and requires a map.
func (t *Tree) Set(path string, v any) error {
	nv, err := normalize(v)
	if err != nil {
		return fmt.Errorf("setting %q: %w", path, err)
	}
	delta := t.growth(path, nv, false)
	if delta > 0 && t.room != nil {
		if err := t.room(delta); err != nil {
			return fmt.Errorf("setting %q: %w", path, err)
		}
	}
	if path == "" {
		m, ok := nv.(map[string]any)
		if !ok {
			return fmt.Errorf("setting the root: %w: the root must be a map", ErrBadPath)
		}
		t.root = m
	} else if err := t.place(path, nv, false); err != nil {
		return err
	}
	t.size += delta
	if t.touch != nil {
		t.touch()
	}
	if t.emit != nil {
		b, err := json.Marshal(nv)
		if err != nil {
			return fmt.Errorf("encoding %q: %w", path, err)
		}
		t.emit(opSet, path, b)
	}
	return nil
}

// Delete removes the value at path; deleting what is not there is a no-op
// that produces no delta.
func (t *Tree) Delete(path string) {
	if path == "" {
		return
	}
	if t.Get(path) == nil && !t.has(path) {
		return
	}
	delta := t.growth(path, nil, true)
	if err := t.place(path, nil, true); err != nil {
		return
	}
	t.size += delta
	if t.touch != nil {
		t.touch()
	}
	if t.emit != nil {
		t.emit(opDelete, path, nil)
	}
}

func (t *Tree) has(path string) bool {
	parent, last := splitLast(path)
	m, ok := t.Get(parent).(map[string]any)
	if !ok {
		return false
	}
	_, ok = m[last]
	return ok
}

func splitLast(path string) (string, string) {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i], path[i+1:]
	}
	return "", path
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

// owned returns x (a value of the tree) ready to be changed in place: while
// a view is being read, a map or an array the view may hold is copied
// first (its values stay shared until they are written in turn).
func (t *Tree) owned(x any) any {
	var key unsafe.Pointer
	switch c := x.(type) {
	case map[string]any:
		key = reflect.ValueOf(c).UnsafePointer()
	case []any:
		key = unsafe.Pointer(unsafe.SliceData(c))
	default:
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
		x, key = m, reflect.ValueOf(m).UnsafePointer()
	case []any:
		s := slices.Clone(c)
		x, key = s, unsafe.Pointer(unsafe.SliceData(s))
	}
	t.mark(key)
	return x
}

func (t *Tree) mark(key unsafe.Pointer) {
	if t.own == nil {
		t.own = map[unsafe.Pointer]struct{}{}
	}
	t.own[key] = struct{}{}
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
					t.mark(reflect.ValueOf(m).UnsafePointer())
				}
				next = m
				c[seg] = next
			} else if cow {
				next = t.owned(next)
				c[seg] = next
			}
			cur = next
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
			if cow {
				c[idx] = t.owned(c[idx])
			}
			cur = c[idx]
		default:
			return fmt.Errorf("%w: %q: %q is not a map or an array", ErrBadPath, path, strings.Join(segs[:i], "/"))
		}
	}
	return nil
}

// snapshot encodes the whole tree.
func (t *Tree) snapshot() ([]byte, error) { return json.Marshal(t.root) }

// normalize deep-copies v into JSON-like values.
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool, string, float64:
		return x, nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case uint64:
		return float64(x), nil
	case uint32:
		return float64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return x.Float64()
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, nil
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			s[i] = n
		}
		return s, nil
	case []string:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = e
		}
		return s, nil
	case json.RawMessage:
		var out any
		if err := json.Unmarshal(x, &out); err != nil {
			return nil, err
		}
		return out, nil
	}
	switch reflect.ValueOf(v).Kind() {
	case reflect.Func, reflect.Chan, reflect.UnsafePointer:
		return nil, fmt.Errorf("a %T is a live object, not data: keep it in Page.Local", v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("a %T is not serialisable data: %w", v, err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, err
	}
	return out, nil
}
