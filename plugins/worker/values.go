package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotFound is returned when nothing is stored at or under a path.
var ErrNotFound = errors.New("nothing stored there")

// Values is what the global store holds at or under some paths, by full
// path: each entry's JSON. The store keeps objects exploded (setting
// "tasks/7" to {"title": "x"} stores "tasks/7/title"), so a record is read
// back by Decode, and a collection's members named by Children.
type Values map[string]json.RawMessage

// Decode puts the value at path, with everything stored under it put back
// together, into dst (a pointer, as for json.Unmarshal: a struct, a map, a
// slice...). Nothing at or under path leaves dst as it was and returns
// ErrNotFound.
func (v Values) Decode(path string, dst any) error {
	doc, ok, err := v.assemble(path)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("decoding %q: %w", path, ErrNotFound)
	}
	if err := json.Unmarshal(doc, dst); err != nil {
		return fmt.Errorf("decoding %q: %w", path, err)
	}
	return nil
}

// Children names the members stored under path ("tasks" → "1", "7", …),
// sorted; none for a path that holds a value of its own or nothing.
func (v Values) Children(path string) []string {
	prefix := path + "/"
	if path == "" {
		prefix = ""
	}
	seen := map[string]bool{}
	for p := range v {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok || rest == "" {
			continue
		}
		name, _, _ := strings.Cut(rest, "/")
		seen[name] = true
	}
	out := make([]string, 0, len(seen))
	for name := range seen {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// assemble is the JSON of the value at path: its own entry, or the object
// the entries under it make (ok false when there is none).
func (v Values) assemble(path string) (json.RawMessage, bool, error) {
	if raw, ok := v[path]; ok {
		return raw, true, nil
	}
	prefix := path + "/"
	if path == "" {
		prefix = ""
	}
	root := map[string]any{}
	found := false
	for p, raw := range v {
		rest, ok := strings.CutPrefix(p, prefix)
		if !ok || rest == "" {
			continue
		}
		found = true
		segs := strings.Split(rest, "/")
		cur := root
		for _, s := range segs[:len(segs)-1] {
			next, ok := cur[s].(map[string]any)
			if !ok {
				if _, taken := cur[s]; taken {
					return nil, false, fmt.Errorf("decoding %q: %q holds a value and has members", path, p)
				}
				next = map[string]any{}
				cur[s] = next
			}
			cur = next
		}
		last := segs[len(segs)-1]
		if _, taken := cur[last].(map[string]any); taken {
			return nil, false, fmt.Errorf("decoding %q: %q holds a value and has members", path, p)
		}
		cur[last] = raw
	}
	if !found {
		return nil, false, nil
	}
	doc, err := json.Marshal(root)
	if err != nil {
		return nil, false, fmt.Errorf("decoding %q: %w", path, err)
	}
	return doc, true, nil
}
