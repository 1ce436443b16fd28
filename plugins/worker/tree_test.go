package worker

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

type rec struct {
	op    deltaOp
	path  string
	value string
}

func recTree() (*Tree, *[]rec) {
	var got []rec
	t := newTree(func(op deltaOp, p string, v []byte) { got = append(got, rec{op, p, string(v)}) })
	return t, &got
}

func TestTreeSetGetDelete(t *testing.T) {
	tr, got := recTree()
	steps := []struct {
		path string
		v    any
	}{
		{"grid/filter/text", "ab"},
		{"grid/offset", 50},
		{"grid/rows", []any{map[string]any{"id": 1}, map[string]any{"id": 2}}},
		{"grid/rows/1/id", int64(3)},
		{"flags", []string{"a", "b"}},
		{"struct", struct {
			A int `json:"a"`
		}{7}},
	}
	for _, s := range steps {
		if err := tr.Set(s.path, s.v); err != nil {
			t.Fatalf("Set(%q): %v", s.path, err)
		}
	}
	if tr.String("grid/filter/text") != "ab" || tr.Number("grid/offset") != 50 || tr.Number("grid/rows/1/id") != 3 {
		t.Fatalf("tree %v", tr.root)
	}
	if tr.Number("struct/a") != 7 {
		t.Fatalf("struct not converted to data: %v", tr.Get("struct"))
	}
	if len(*got) != len(steps) {
		t.Fatalf("%d deltas for %d writes", len(*got), len(steps))
	}
	if (*got)[3] != (rec{opSet, "grid/rows/1/id", "3"}) {
		t.Fatalf("delta %+v", (*got)[3])
	}
	tr.Delete("grid/filter")
	tr.Delete("grid/filter") // absent: no delta
	tr.Delete("nothing/here")
	if tr.Get("grid/filter") != nil || len(*got) != len(steps)+1 {
		t.Fatalf("delete: %v, %d deltas", tr.Get("grid/filter"), len(*got))
	}
	// The stored value is a copy: mutating the caller's map later changes nothing.
	m := map[string]any{"k": "v"}
	_ = tr.Set("copy", m)
	m["k"] = "changed"
	if tr.String("copy/k") != "v" {
		t.Fatal("tree aliases the caller's map")
	}
}

func TestTreeRefusesLiveObjectsAndBadPaths(t *testing.T) {
	tr, got := recTree()
	_ = tr.Set("n", 1)
	for _, bad := range []struct {
		path string
		v    any
	}{
		{"ch", make(chan int)},
		{"fn", func() {}},
		{"n/deeper", 1},   // n is a number
		{"arr", []any{1}}, // fine, sets up the next
		{"arr/5", 1},      // out of range
		{"", "not a map"}, // root must be a map
		{"m", map[string]any{"c": make(chan int)}},
	} {
		err := tr.Set(bad.path, bad.v)
		if bad.path == "arr" {
			continue
		}
		if err == nil {
			t.Fatalf("Set(%q, %T) succeeded", bad.path, bad.v)
		}
	}
	if err := tr.Set("x", make(chan int)); !strings.Contains(err.Error(), "Page.Local") {
		t.Fatalf("live-object error does not say where it belongs: %v", err)
	}
	if err := tr.Set("n/x", 1); !errors.Is(err, ErrBadPath) {
		t.Fatalf("bad path error: %v", err)
	}
	if len(*got) != 2 { // n and arr
		t.Fatalf("refused writes produced deltas: %v", *got)
	}
	b, err := tr.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil || back["n"] != 1.0 {
		t.Fatalf("snapshot %s: %v", b, err)
	}
}
