package worker

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// modelTree is the tree as it was before it kept anything encoded: boxed
// JSON-like values, written in place. The tree must read, write, refuse
// and emit deltas as it does.
type modelTree struct{ root map[string]any }

func (m *modelTree) get(path string) any {
	if path == "" {
		return m.root
	}
	var cur any = m.root
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

// set returns the delta's value, or an error for a refused write.
func (m *modelTree) set(path string, v any) ([]byte, error) {
	nv, err := modelNormalize(v)
	if err != nil {
		return nil, err
	}
	if path == "" {
		root, ok := nv.(map[string]any)
		if !ok {
			return nil, ErrBadPath
		}
		m.root = root
		return json.Marshal(nv)
	}
	if err := m.place(path, nv, false); err != nil {
		return nil, err
	}
	return json.Marshal(nv)
}

// del says whether the delete wrote (and emitted) anything.
func (m *modelTree) del(path string) bool {
	parent, last := splitLast(path)
	if pm, ok := m.get(parent).(map[string]any); m.get(path) == nil && (!ok || !hasKey(pm, last)) {
		return false
	}
	return path != "" && m.place(path, nil, true) == nil
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

func (m *modelTree) place(path string, v any, del bool) error {
	segs := strings.Split(path, "/")
	var cur any = m.root
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
				next = map[string]any{}
				c[seg] = next
			}
			cur = next
		case []any:
			idx, err := strconv.Atoi(seg)
			if err != nil || idx < 0 || idx >= len(c) || (last && del) {
				return ErrBadPath
			}
			if last {
				c[idx] = v
				return nil
			}
			cur = c[idx]
		default:
			return ErrBadPath
		}
	}
	return nil
}

// treeGen makes random paths and values, of the shapes and the corners
// (strings JSON escapes, numbers it writes with an exponent) a tree meets.
type treeGen struct{ r *rand.Rand }

var genStrings = []string{"", "a", "héllo", "<b>&amp;</b>", "line\nbreak\t\"q\"\\", "\u2028\u2029", "bad\xff\xfeutf8", "\x00\x01\x1f", strings.Repeat("long ", 40), "emoji 🎉"}

func (g treeGen) path() string {
	segs := make([]string, 1+g.r.IntN(4))
	for i := range segs {
		segs[i] = []string{"a", "b", "c", "0", "1", "2", "k"}[g.r.IntN(7)]
	}
	return strings.Join(segs, "/")
}

func (g treeGen) value(depth int) any {
	switch n := g.r.IntN(14); {
	case n == 0:
		return nil
	case n == 1:
		return g.r.IntN(2) == 0
	case n == 2:
		return []float64{0, math.Copysign(0, -1), 1e21, 1e20, 1e-7, 1e-6, 123.456, -5, 1 << 60, math.MaxFloat64, math.SmallestNonzeroFloat64}[g.r.IntN(11)]
	case n == 3:
		return g.r.IntN(1000)
	case n == 4:
		return genStrings[g.r.IntN(len(genStrings))]
	case n == 5:
		return json.Number("12.5")
	case n == 6:
		return []string{"x", "<y>"}
	case n == 7:
		return struct {
			A int    `json:"a"`
			B string `json:"b,omitempty"`
		}{7, "s"}
	case n < 11 && depth < 4:
		m := map[string]any{}
		for range g.r.IntN(6) {
			m[[]string{"a", "b", "c", "0", "zz", "<", "é", ""}[g.r.IntN(8)]] = g.value(depth + 1)
		}
		return m
	case depth < 4:
		s := make([]any, g.r.IntN(5))
		for i := range s {
			s[i] = g.value(depth + 1)
		}
		return s
	}
	return "leaf"
}

// The tree, with its parts encoded, opened and packed, and written under
// views and through the codec, reads, refuses and emits as the model does,
// and knows its size exactly.
func TestTreeMatchesModel(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			g := treeGen{rand.New(rand.NewPCG(seed, 7))}
			var got []rec
			emit := func(op deltaOp, p string, v []byte) { got = append(got, rec{op, p, string(v)}) }
			tr := newTree(emit)
			model := &modelTree{root: map[string]any{}}
			var viewRoot map[string]any
			var viewJSON []byte
			var release func()
			for step := range 300 {
				switch op := g.r.IntN(20); {
				case op < 11:
					path, v := g.path(), g.value(0)
					if g.r.IntN(15) == 0 {
						path, v = "", map[string]any{"a": g.value(1), "b": []any{g.value(2)}}
					}
					want, werr := model.set(path, v)
					got = got[:0]
					err := tr.Set(path, v)
					if (err == nil) != (werr == nil) {
						t.Fatalf("step %d: Set(%q, %#v): %v, the model %v", step, path, v, err, werr)
					}
					if err == nil && (len(got) != 1 || got[0] != rec{opSet, path, string(want)}) {
						t.Fatalf("step %d: Set(%q) emitted %v, the model %s", step, path, got, want)
					}
					if err != nil && len(got) != 0 {
						t.Fatalf("step %d: a refused write emitted %v", step, got)
					}
				case op < 14:
					path := g.path()
					wrote := model.del(path)
					got = got[:0]
					tr.Delete(path)
					if wrote != (len(got) == 1) {
						t.Fatalf("step %d: Delete(%q) emitted %v, the model wrote: %v", step, path, got, wrote)
					}
				case op < 17:
					path := g.path()
					if v, want := tr.Get(path), model.get(path); !reflect.DeepEqual(v, want) {
						t.Fatalf("step %d: Get(%q) = %#v, the model %#v", step, path, v, want)
					}
					if s, _ := model.get(path).(string); tr.String(path) != s {
						t.Fatalf("step %d: String(%q) = %q, want %q", step, path, tr.String(path), s)
					}
					if f, _ := model.get(path).(float64); tr.Number(path) != f {
						t.Fatalf("step %d: Number(%q) = %v, want %v", step, path, tr.Number(path), f)
					}
				case op == 17 && release == nil:
					viewRoot, release = tr.view()
					viewJSON, _ = appendJSON(nil, viewRoot)
				case op == 17:
					if now, _ := appendJSON(nil, viewRoot); string(now) != string(viewJSON) {
						t.Fatalf("step %d: the view changed:\n%s\n%s", step, now, viewJSON)
					}
					release()
					release = nil
				case op == 18 && release == nil:
					b, err := encodeTree(tr)
					if err != nil {
						t.Fatal(err)
					}
					tr = newTree(emit)
					if err := decodeTree(tr, b); err != nil {
						t.Fatalf("step %d: decoding: %v", step, err)
					}
				case op == 19:
					tr.pack()
				}
				for k, v := range tr.root {
					if err := kindsHold(v, false); err != nil {
						t.Fatalf("step %d: %s: %v", step, k, err)
					}
				}
				b, err := encodeTree(tr)
				if err != nil {
					t.Fatal(err)
				}
				if tr.size != int64(len(b)) {
					t.Fatalf("step %d: size %d, encoded %d bytes", step, tr.size, len(b))
				}
				if !reflect.DeepEqual(tr.Get(""), model.root) {
					t.Fatalf("step %d: the tree reads\n%#v\nthe model\n%#v", step, tr.Get(""), model.root)
				}
				js, err := tr.snapshot()
				want, _ := json.Marshal(model.root)
				if err != nil || string(js) != string(want) {
					t.Fatalf("step %d: snapshot %s (%v), json.Marshal %s", step, js, err, want)
				}
			}
			if release != nil {
				release()
			}
		})
	}
}

// kindsHold checks what encoded.go says of a tree's values: a JSON-like
// map or array holds JSON-like values only.
func kindsHold(v any, inJSONLike bool) error {
	if inJSONLike && isOpen(v) {
		return fmt.Errorf("a %T in a JSON-like map or array", v)
	}
	if m, ok := asMap(v); ok {
		_, jsonLike := v.(map[string]any)
		for k, e := range m {
			if err := kindsHold(e, jsonLike); err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
		}
	}
	if a, ok := asArray(v); ok {
		_, jsonLike := v.([]any)
		for i, e := range a {
			if err := kindsHold(e, jsonLike); err != nil {
				return fmt.Errorf("%d: %w", i, err)
			}
		}
	}
	return nil
}

// A NaN or an infinity has no JSON: a page's write of one is refused and
// changes nothing. (A connection's values, which have no deltas, take it.)
func TestTreeRefusesWhatJSONCannotWrite(t *testing.T) {
	tr, got := recTree()
	_ = tr.Set("n", 1)
	for _, v := range []any{math.NaN(), math.Inf(1), []any{1, math.Inf(-1)}} {
		if err := tr.Set("n", v); err == nil {
			t.Fatalf("Set(%v) succeeded", v)
		}
	}
	if tr.Number("n") != 1 || len(*got) != 1 || tr.size != int64(sizeValue(tr.root)) {
		t.Fatalf("a refused write changed the tree: %v, %d deltas", tr.Get(""), len(*got))
	}
	values := newTree(nil)
	if err := values.Set("n", math.NaN()); err != nil {
		t.Fatalf("values: %v", err)
	}
}

// A page woken from a package keeps it encoded: a read or a write opens
// only what is on its way, and what nobody went into encodes again as the
// very bytes it came in.
func TestTreeOpensOnlyItsPath(t *testing.T) {
	src := newTree(nil)
	if err := src.Set("rows", gridRows(1000)); err != nil {
		t.Fatal(err)
	}
	_ = src.Set("meta/title", "grid")
	enc, err := encodeTree(src)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(nil)
	if err := decodeTree(tr, enc); err != nil {
		t.Fatal(err)
	}
	if _, ok := tr.root["rows"].(encoded); !ok {
		t.Fatalf("rows decoded as %T, want it kept encoded", tr.root["rows"])
	}
	whole := string(tr.root["rows"].(encoded))
	got := tr.String("rows/7/city")
	if got != "Lille" {
		t.Fatalf("rows/7/city = %q", got)
	}
	// What is read is a copy: an app that keeps it keeps nothing else.
	at, in := uintptr(unsafe.Pointer(unsafe.StringData(got))), uintptr(unsafe.Pointer(unsafe.StringData(whole)))
	if at >= in && at < in+uintptr(len(whole)) {
		t.Fatal("a string read shares the encoding it came in")
	}
	rows := tr.root["rows"].(openArray) // opened by the read, and row 7
	if _, ok := rows[7].(openMap); !ok {
		t.Fatalf("row 7 is %T after a read in it, want it opened", rows[7])
	}
	if err := tr.Set("rows/9/qty", 99); err != nil {
		t.Fatal(err)
	}
	for i, r := range rows {
		if _, ok := r.(encoded); i != 7 && i != 9 && !ok {
			t.Fatalf("row %d is %T, want it untouched", i, r)
		}
	}
	if again, _ := encodeTree(tr); len(again) != len(enc) || tr.Number("rows/9/qty") != 99 {
		t.Fatalf("encoded again: %d bytes, want %d", len(again), len(enc))
	}
	// Under a view, a read opens nothing (the view shares what it would
	// open in).
	_, release := tr.view()
	if got := tr.Number("rows/8/qty"); got != 8 {
		t.Fatalf("rows/8/qty under a view = %v", got)
	}
	if _, ok := rows[8].(encoded); !ok {
		t.Fatalf("a read under a view opened row 8 (%T)", rows[8])
	}
	if got, ok := tr.Get("rows/8").(map[string]any); !ok || got["qty"] != 8.0 {
		t.Fatalf("rows/8 under a view = %#v", tr.Get("rows/8"))
	}
	if _, ok := rows[8].(encoded); !ok {
		t.Fatalf("a Get under a view decoded row 8 in its place (%T)", rows[8])
	}
	release()
	// A Get of a whole array decodes it in its place, once: then it is the
	// tree's own, and what is written into it is JSON-like too.
	all, ok := tr.Get("rows").([]any)
	if !ok || len(all) != 1000 || all[9].(map[string]any)["qty"] != 99.0 {
		t.Fatalf("rows = %T", tr.Get("rows"))
	}
	if again := tr.Get("rows").([]any); &again[0] != &all[0] {
		t.Fatal("a second Get of rows decoded them again")
	}
	if err := tr.Set("rows/3", map[string]any{"id": 3}); err != nil {
		t.Fatal(err)
	}
	if _, ok := all[3].(map[string]any); !ok {
		t.Fatalf("a row written into decoded rows is %T, want a map[string]any", all[3])
	}
	if b, _ := encodeTree(tr); tr.size != int64(len(b)) {
		t.Fatalf("size %d, encoded %d", tr.size, len(b))
	}
}

// A tree packs itself once the encodings it may keep alive pass twice its
// size: a grid woken with 100 KB of rows, cut down to a few, no longer
// keeps them.
func TestTreePacksWhatItNoLongerUses(t *testing.T) {
	src := newTree(nil)
	_ = src.Set("rows", gridRows(2000))
	_ = src.Set("filter/text", "x")
	enc, _ := encodeTree(src)
	tr := newTree(nil)
	if err := decodeTree(tr, enc); err != nil {
		t.Fatal(err)
	}
	if err := tr.Set("filter/text", "y"); err != nil || tr.held != int64(len(enc)) {
		t.Fatalf("held %d after a small write (%v), want %d", tr.held, err, len(enc))
	}
	if err := tr.Set("rows", gridRows(3)); err != nil {
		t.Fatal(err)
	}
	b, _ := encodeTree(tr)
	if tr.held != int64(len(b)) || tr.size != int64(len(b)) {
		t.Fatalf("after the rows were cut: held %d, size %d, encoded %d: the tree did not pack", tr.held, tr.size, len(b))
	}
	if s, ok := tr.root["filter"].(encoded); !ok || !strings.Contains(string(s), "y") {
		t.Fatalf("filter after the pack: %#v", tr.root["filter"])
	}
	if got := tr.String("filter/text"); got != "y" || len(tr.Get("rows").([]any)) != 3 {
		t.Fatalf("the packed tree reads %v", tr.Get(""))
	}
}

// appendJSON writes what json.Marshal writes, encoded or not, whatever
// order a map was encoded in.
func TestTreeJSONIsEncodingJSON(t *testing.T) {
	g := treeGen{rand.New(rand.NewPCG(1, 2))}
	for range 2000 {
		v := g.value(0)
		b, err := appendAny(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		plain, _ := modelNormalize(v)
		want, _ := json.Marshal(plain)
		if got, err := appendJSON(nil, plain); err != nil || string(got) != string(want) {
			t.Fatalf("appendJSON(%#v) = %s (%v), want %s", plain, got, err, want)
		}
		// An encoding in Go's map order, as older workers wrote it.
		old, _ := appendValue(nil, plain)
		for _, enc := range [][]byte{b, old} {
			got, err := appendJSON(nil, decodedValue(enc))
			if err != nil || string(got) != string(want) {
				t.Fatalf("appendJSON of %q = %s (%v), want %s", enc, got, err, want)
			}
		}
	}
}

// decodedValue is enc as a tree holds it: a scalar, or encoded.
func decodedValue(enc []byte) any {
	v, _, _ := itemAt(string(enc), 0, maxDepth)
	return v
}

// A damaged package's map may hold a key twice: the last one is the
// one read, written and encoded again, encoded or opened.
func TestTreeReadsTheLastOfEqualKeys(t *testing.T) {
	b := []byte("m\x01\x01xm\x02\x01ks\x01A\x01ks\x01B")
	tr := newTree(nil)
	if err := decodeTree(tr, b); err != nil {
		t.Fatal(err)
	}
	_, release := tr.view()
	if got := tr.String("x/k"); got != "B" {
		t.Fatalf("x/k read where it lies = %q", got)
	}
	release()
	if got := tr.String("x/k"); got != "B" {
		t.Fatalf("x/k opened = %q", got)
	}
	if js, _ := tr.snapshot(); string(js) != `{"x":{"k":"B"}}` {
		t.Fatalf("snapshot %s", js)
	}
}

// modelNormalize is how the model makes v JSON-like (the tree did so before it encoded what it was given).
func modelNormalize(v any) (any, error) {
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
			n, err := modelNormalize(e)
			if err != nil {
				return nil, err
			}
			m[k] = n
		}
		return m, nil
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			n, err := modelNormalize(e)
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

// Len counts an array or a map without decoding it: a woken grid's rows
// stay encoded, and Len agrees with Get's length before and after they
// are opened.
func TestTreeLenReadsNoValue(t *testing.T) {
	src := &Tree{root: map[string]any{}}
	if err := src.Set("rows", gridRows(1000)); err != nil {
		t.Fatal(err)
	}
	if err := src.Set("m", map[string]any{"a": 1.0, "b": "x"}); err != nil {
		t.Fatal(err)
	}
	enc, err := encodeTree(src)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Tree{}
	if err := decodeTree(tr, enc); err != nil {
		t.Fatal(err)
	}
	if n := tr.Len("rows"); n != 1000 {
		t.Fatalf("Len(rows) = %d, want 1000", n)
	}
	if _, still := tr.root["rows"].(encoded); !still {
		t.Fatalf("Len opened the rows: %T", tr.root["rows"])
	}
	if n := tr.Len("rows/7"); n != 7 {
		t.Fatalf("Len(rows/7) = %d, want a row's 7 fields", n)
	}
	if n, m, none := tr.Len("m"), tr.Len("m/a"), tr.Len("nothing"); n != 2 || m != 0 || none != 0 {
		t.Fatalf("Len(m) %d, Len(m/a) %d, Len(nothing) %d", n, m, none)
	}
	if err := tr.Set("rows/3/qty", 5.0); err != nil {
		t.Fatal(err)
	}
	if rows, _ := tr.Get("rows").([]any); tr.Len("rows") != len(rows) || len(rows) != 1000 {
		t.Fatalf("after a write: Len %d, Get's length %d", tr.Len("rows"), len(rows))
	}
}
