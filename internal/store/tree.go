package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// emptyObject is the canonical form of {}: an entry holding it may be
// written under (the object gains a member).
var emptyObject = json.RawMessage("{}")

// tree holds the entries. Each entry is a node with a value; a node with a
// value has no children, and every node without a value has children (empty
// nodes are pruned). Stored values are canonical and never modified in place,
// so copies of the tree may share them.
type tree struct {
	root node
	n    int // number of entries
}

type node struct {
	val  json.RawMessage
	kids map[string]*node
}

// canonical checks a value and returns it compact, with HTML characters
// escaped as encoding/json writes them, in a fresh buffer: once stored, a
// value marshals to the same bytes however it is encoded.
func canonical(v json.RawMessage) (json.RawMessage, error) {
	if len(v) > MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrValueTooLarge, len(v), MaxValueBytes)
	}
	if !json.Valid(v) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrBadValue)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadValue, err)
	}
	var out bytes.Buffer
	json.HTMLEscape(&out, buf.Bytes())
	if out.Len() > MaxValueBytes {
		return nil, fmt.Errorf("%w: %d bytes once escaped, limit %d", ErrValueTooLarge, out.Len(), MaxValueBytes)
	}
	return json.RawMessage(out.Bytes()), nil
}

// find returns the node at p, or nil.
func (t *tree) find(p string) *node {
	n := &t.root
	for seg := range strings.SplitSeq(p, "/") {
		n = n.kids[seg]
		if n == nil {
			return nil
		}
	}
	return n
}

// get adds to out a copy of every entry at or under p.
func (t *tree) get(p string, out map[string]json.RawMessage) {
	if n := t.find(p); n != nil {
		n.collect(p, out)
	}
}

func (n *node) collect(path string, out map[string]json.RawMessage) {
	if n.val != nil {
		out[path] = slices.Clone(n.val)
		return
	}
	for k, c := range n.kids {
		c.collect(path+"/"+k, out)
	}
}

// each calls fn for every entry, sharing the stored value.
func (t *tree) each(fn func(path string, v json.RawMessage)) {
	for k, c := range t.root.kids {
		c.each(k, fn)
	}
}

func (n *node) each(path string, fn func(string, json.RawMessage)) {
	if n.val != nil {
		fn(path, n.val)
		return
	}
	for k, c := range n.kids {
		c.each(path+"/"+k, fn)
	}
}

func (n *node) count() int {
	if n.val != nil {
		return 1
	}
	c := 0
	for _, k := range n.kids {
		c += k.count()
	}
	return c
}

// blocker returns the nearest strict ancestor of p that holds an entry other
// than {}: writing at p would have to go inside that value.
func (t *tree) blocker(p string) (string, bool) {
	n, start := &t.root, 0
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		n, start = n.kids[p[start:i]], i+1
		if n == nil {
			return "", false
		}
		if n.val != nil && !bytes.Equal(n.val, emptyObject) {
			return p[:i], true
		}
	}
	return "", false
}

// del removes the entries at and under p and prunes the nodes left empty.
func (t *tree) del(p string) {
	segs := strings.Split(p, "/")
	path := make([]*node, 0, len(segs)+1)
	n := &t.root
	path = append(path, n)
	for _, seg := range segs {
		n = n.kids[seg]
		if n == nil {
			return
		}
		path = append(path, n)
	}
	t.n -= n.count()
	for i := len(segs) - 1; i >= 0; i-- {
		parent := path[i]
		delete(parent.kids, segs[i])
		if len(parent.kids) > 0 || parent == &t.root {
			break
		}
	}
}

// set replaces the subtree at p with v, exploding objects. v must be
// canonical and blocker(p) must be false: an ancestor entry holding {} is
// removed.
func (t *tree) set(p string, v json.RawMessage) {
	n := &t.root
	for seg := range strings.SplitSeq(p, "/") {
		if n.val != nil { // {} becomes an object with members
			n.val = nil
			t.n--
		}
		c := n.kids[seg]
		if c == nil {
			c = &node{}
			if n.kids == nil {
				n.kids = map[string]*node{}
			}
			n.kids[seg] = c
		}
		n = c
	}
	t.n -= n.count()
	n.val, n.kids = nil, nil
	t.n += explode(n, p, strings.Count(p, "/")+1, v)
}

// put stores v at p as one entry, without exploding it. The caller has
// checked that no entry lies above or below p.
func (t *tree) put(p string, v json.RawMessage) {
	n := &t.root
	for seg := range strings.SplitSeq(p, "/") {
		c := n.kids[seg]
		if c == nil {
			c = &node{}
			if n.kids == nil {
				n.kids = map[string]*node{}
			}
			n.kids[seg] = c
		}
		n = c
	}
	n.val = v
	t.n++
}

// explode stores canonical v in the empty node n at path (of segs segments)
// and returns the number of entries it made. A non-empty object whose keys
// all make valid paths becomes one child per member; anything else is one
// entry.
func explode(n *node, path string, segs int, v json.RawMessage) int {
	if len(v) > 2 && v[0] == '{' && segs < MaxSegments {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) == nil && explodable(path, obj) {
			n.kids = make(map[string]*node, len(obj))
			made := 0
			for k, sub := range obj { // children are independent: order does not show
				c := &node{}
				n.kids[k] = c
				made += explode(c, path+"/"+k, segs+1, sub)
			}
			return made
		}
	}
	n.val = v
	return 1
}

func explodable(path string, obj map[string]json.RawMessage) bool {
	if len(obj) == 0 {
		return false
	}
	for k := range obj {
		if !isSegment(k) || len(path)+1+len(k) > MaxPathBytes {
			return false
		}
	}
	return true
}

func (t *tree) clone() tree {
	return tree{root: t.root.clone(), n: t.n}
}

func (n *node) clone() node {
	c := node{val: n.val}
	if n.kids != nil {
		c.kids = make(map[string]*node, len(n.kids))
		for k, kid := range n.kids {
			kc := kid.clone()
			c.kids[k] = &kc
		}
	}
	return c
}

// Assemble rebuilds the JSON document at root from entries as Get returns
// them: the inverse of the explosion of objects into entries. Entries not at
// or under root are ignored; it returns nil when none is. It fails if an
// entry lies under another one, which a Get never returns.
func Assemble(root string, entries map[string]json.RawMessage) (json.RawMessage, error) {
	if err := checkPath(root); err != nil {
		return nil, fmt.Errorf("assembling %s: %w", quote(root), err)
	}
	keys := make([]string, 0, len(entries))
	for p := range entries {
		if under(p, root) {
			keys = append(keys, p)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	slices.Sort(keys)
	if v, ok := entries[root]; ok {
		if len(keys) > 1 {
			return nil, fmt.Errorf("assembling %s: %w: %s lies under an entry", quote(root), ErrBadValue, quote(keys[1]))
		}
		return slices.Clone(v), nil
	}
	top := map[string]any{}
	for _, p := range keys {
		segs := strings.Split(p[len(root)+1:], "/")
		m := top
		for i, seg := range segs {
			next, ok := m[seg]
			if i == len(segs)-1 {
				if ok {
					return nil, fmt.Errorf("assembling %s: %w: %s has entries under it", quote(root), ErrBadValue, quote(p))
				}
				m[seg] = entries[p]
				break
			}
			if !ok {
				sub := map[string]any{}
				m[seg], m = sub, sub
				continue
			}
			sub, isObj := next.(map[string]any)
			if !isObj {
				return nil, fmt.Errorf("assembling %s: %w: %s lies under an entry", quote(root), ErrBadValue, quote(p))
			}
			m = sub
		}
	}
	out, err := json.Marshal(top)
	if err != nil {
		return nil, fmt.Errorf("assembling %s: %w", quote(root), err)
	}
	return out, nil
}
