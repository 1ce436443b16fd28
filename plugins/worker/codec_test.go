package worker

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestTreeCodecRoundTrip(t *testing.T) {
	tr := newTree(nil)
	_ = tr.Set("s", "héllo")
	_ = tr.Set("big", strings.Repeat("x", 1<<20))
	_ = tr.Set("n", 3.25)
	_ = tr.Set("neg", -1e300)
	_ = tr.Set("b", true)
	_ = tr.Set("f", false)
	_ = tr.Set("nil", nil)
	_ = tr.Set("a", []any{1, "two", []any{}, map[string]any{"k": nil}})
	_ = tr.Set("m/deep/er", "x")
	_ = tr.Set("empty", map[string]any{})
	b, err := encodeTree(tr)
	if err != nil {
		t.Fatal(err)
	}
	back := newTree(nil)
	if err := decodeTree(back, b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tr.Get(""), back.Get("")) {
		t.Fatal("tree changed through the codec")
	}
}

// Damaged input is an error, never a panic or a runaway allocation; what
// decodes reads, encodes and is written as what it decoded to, whether its
// parts were opened or read where they lie.
func FuzzDecodeTree(f *testing.F) {
	tr := newTree(nil)
	_ = tr.Set("a", []any{1, "x", map[string]any{"y": true}})
	good, _ := encodeTree(tr)
	f.Add(good)
	f.Add([]byte("m\xff\xff\xff\xff\x0f"))
	f.Add([]byte("a\x05"))
	f.Add([]byte("m\x01\x01xm\x02\x01ks\x01A\x01ks\x01B"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr := newTree(nil)
		if decodeTree(tr, b) != nil {
			return
		}
		whole := tr.Get("")
		_, _ = tr.snapshot()
		_, release := tr.view()
		for k := range tr.root {
			_ = tr.Get(k + "/0")
		}
		release()
		for k := range tr.root {
			_ = tr.Get(k + "/0/" + k)
		}
		if !sameValue(tr.Get(""), whole) {
			t.Fatalf("reads changed the tree: %v, then %v", whole, tr.Get(""))
		}
		for k := range tr.root {
			_ = tr.Set(k+"/1", "written")
			tr.Delete(k + "/" + k)
		}
		again, err := encodeTree(tr)
		if err != nil {
			t.Fatalf("a decoded tree does not encode: %v", err)
		}
		back := newTree(nil)
		if err := decodeTree(back, again); err != nil {
			t.Fatalf("a re-encoded tree does not decode: %v", err)
		}
		if !sameValue(back.Get(""), tr.Get("")) {
			t.Fatalf("the tree changed through the codec: %v, then %v", tr.Get(""), back.Get(""))
		}
	})
}

// sameValue is reflect.DeepEqual with a NaN equal to itself.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && math.Float64bits(x) == math.Float64bits(y)
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func TestTreeCodecRejectsDamage(t *testing.T) {
	tr := newTree(nil)
	_ = tr.Set("k", "value")
	good, _ := encodeTree(tr)
	for name, b := range map[string][]byte{
		"truncated":  good[:len(good)-2],
		"trailing":   append(append([]byte{}, good...), 'n'),
		"not a map":  {'s', 1, 'x'},
		"bad tag":    {'q'},
		"huge count": {'a', 0xff, 0xff, 0xff, 0xff, 0x0f},
		"deep":       []byte(strings.Repeat("a\x01", maxDepth+2) + "n"),
	} {
		if err := decodeTree(newTree(nil), b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
	var v any
	_ = json.Unmarshal([]byte(`{}`), &v)
}
