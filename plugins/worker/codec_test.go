package worker

import (
	"encoding/json"
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
	if !reflect.DeepEqual(tr.root, back.root) {
		t.Fatal("tree changed through the codec")
	}
}

// Damaged input is an error, never a panic or a runaway allocation.
func FuzzDecodeTree(f *testing.F) {
	tr := newTree(nil)
	_ = tr.Set("a", []any{1, "x", map[string]any{"y": true}})
	good, _ := encodeTree(tr)
	f.Add(good)
	f.Add([]byte("m\xff\xff\xff\xff\x0f"))
	f.Add([]byte("a\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_ = decodeTree(newTree(nil), b)
	})
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
