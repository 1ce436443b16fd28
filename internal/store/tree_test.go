package store

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"testing"
)

// TestTreeModel: objects explode into entries so nested reads work, a set
// replaces the subtree, writing under a scalar is refused unless the same
// commit deletes it, {} may gain members, deletes prune, reads go by whole
// segments, and values are stored canonical.
func TestTreeModel(t *testing.T) {
	type step struct {
		set     map[string]string
		del     []string
		wantErr error
		read    []string
		want    map[string]string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"object explodes and nested reads work", []step{
			{set: map[string]string{"customers/42": `{"name":"Ada","tags":["x", "y"],"addr":{"city":"Rome"}}`},
				read: []string{"customers/42/name"}, want: map[string]string{"customers/42/name": `"Ada"`}},
			{read: []string{"customers/42"}, want: map[string]string{
				"customers/42/name": `"Ada"`, "customers/42/tags": `["x","y"]`, "customers/42/addr/city": `"Rome"`}},
			{read: []string{"customers"}, want: map[string]string{
				"customers/42/name": `"Ada"`, "customers/42/tags": `["x","y"]`, "customers/42/addr/city": `"Rome"`}},
			{read: []string{"customers/4", "customers/42/nam"}, want: map[string]string{}},
		}},
		{"set replaces the subtree", []step{
			{set: map[string]string{"c": `{"a":1,"b":{"x":2}}`}},
			{set: map[string]string{"c": `{"a":3}`}, read: []string{"c"}, want: map[string]string{"c/a": `3`}},
			{set: map[string]string{"c": `7`}, read: []string{"c"}, want: map[string]string{"c": `7`}},
		}},
		{"set a member of an object", []step{
			{set: map[string]string{"c": `{"a":1}`}},
			{set: map[string]string{"c/b": `2`}, read: []string{"c"}, want: map[string]string{"c/a": `1`, "c/b": `2`}},
		}},
		{"write under a scalar is refused", []step{
			{set: map[string]string{"c/name": `"Ada"`}},
			{set: map[string]string{"c/name/first": `"A"`}, wantErr: ErrNotObject,
				read: []string{"c"}, want: map[string]string{"c/name": `"Ada"`}},
		}},
		{"write under a scalar the commit deletes", []step{
			{set: map[string]string{"c/name": `"Ada"`}},
			{set: map[string]string{"c/name/first": `"A"`}, del: []string{"c/name"},
				read: []string{"c"}, want: map[string]string{"c/name/first": `"A"`}},
		}},
		{"empty object gains a member", []step{
			{set: map[string]string{"e": `{ }`}, read: []string{"e"}, want: map[string]string{"e": `{}`}},
			{set: map[string]string{"e/x": `1`}, read: []string{"e"}, want: map[string]string{"e/x": `1`}},
		}},
		{"object with a key that is not a segment stays whole", []step{
			{set: map[string]string{"o": `{"a b":1,"c":2}`}, read: []string{"o"}, want: map[string]string{"o": `{"a b":1,"c":2}`}},
			{read: []string{"o/c"}, want: map[string]string{}},
			{set: map[string]string{"o/c": `3`}, wantErr: ErrNotObject},
		}},
		{"delete prunes", []step{
			{set: map[string]string{"a/b/c": `1`, "a/d": `2`}},
			{del: []string{"a/b/c"}, read: []string{"a"}, want: map[string]string{"a/d": `2`}},
			{del: []string{"a"}, read: []string{"a"}, want: map[string]string{}},
			{del: []string{"nothing/here"}},
		}},
		{"reads go by whole segments", []step{
			{set: map[string]string{"a/b": `1`, "a/bc": `2`, "a/b-c": `3`}},
			{read: []string{"a/b"}, want: map[string]string{"a/b": `1`}},
		}},
		{"values are canonical", []step{
			{set: map[string]string{"h": " \"<b>&\" ", "n": `null`, "arr": "[1, {\"a\" : 2}]"},
				read: []string{"h", "n", "arr"},
				want: map[string]string{"h": `"\u003cb\u003e\u0026"`, "n": `null`, "arr": `[1,{"a":2}]`}},
		}},
		{"deletes apply before sets", []step{
			{set: map[string]string{"a/x": `1`}},
			{set: map[string]string{"a": `{"y":2}`}, del: []string{"a"}, read: []string{"a"}, want: map[string]string{"a/y": `2`}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			for i, st := range tc.steps {
				if st.set != nil || st.del != nil {
					err := write(t, s, st.set, st.del...)
					if !errors.Is(err, st.wantErr) || (err == nil) != (st.wantErr == nil) {
						t.Fatalf("step %d: write error %v, want %v", i, err, st.wantErr)
					}
				}
				if st.read != nil {
					if got := get(t, s, st.read...); !maps.Equal(got, st.want) {
						t.Fatalf("step %d: Get(%v) = %v, want %v", i, st.read, got, st.want)
					}
				}
				checkInvariants(t, s)
			}
		})
	}
}

func TestAssemble(t *testing.T) {
	doc := `{"name":"Ada","age":36,"tags":["x"],"addr":{"city":"Rome","zip":{"code":"00100"}},"odd":{"a b":1},"none":{}}`
	s := New()
	if err := write(t, s, map[string]string{"customers/42": doc, "customers/43": `{"name":"Bo"}`}); err != nil {
		t.Fatal(err)
	}
	entries, err := s.Get([]string{"customers"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := Assemble("customers/42", entries)
	if err != nil {
		t.Fatal(err)
	}
	var want, have any
	if err := json.Unmarshal([]byte(doc), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(got, &have); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, have) {
		t.Fatalf("Assemble = %s, want %s", got, doc)
	}

	if got, err := Assemble("customers/42/age", entries); err != nil || string(got) != "36" {
		t.Fatalf("Assemble of a scalar = %s, %v", got, err)
	}
	if got, err := Assemble("nobody", entries); err != nil || got != nil {
		t.Fatalf("Assemble of nothing = %s, %v", got, err)
	}
	bad := map[string]json.RawMessage{"a/b": json.RawMessage(`1`), "a/b/c": json.RawMessage(`2`)}
	if _, err := Assemble("a", bad); !errors.Is(err, ErrBadValue) {
		t.Fatalf("Assemble of overlapping entries: %v", err)
	}
	if _, err := Assemble("a//", bad); !errors.Is(err, ErrBadPath) {
		t.Fatalf("Assemble of a bad root: %v", err)
	}
}
