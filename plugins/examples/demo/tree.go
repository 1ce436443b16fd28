package demo

import (
	"reflect"
	"strconv"

	"github.com/stickyd/stickyd/plugins/worker"
)

// setChanged writes v at path only when it differs from what is there, so a
// message produces deltas for what it changed and nothing else. v must be
// JSON-like already (float64, not int), as the tree stores it.
func setChanged(t *worker.Tree, path string, v any) error {
	if reflect.DeepEqual(t.Get(path), v) {
		return nil
	}
	return t.Set(path, v)
}

// setList writes the array at path with as few deltas as it can: one per
// element that changed when most are the same, else the whole array once.
func setList(t *worker.Tree, path string, list []any) error {
	old, ok := t.Get(path).([]any)
	if !ok || len(old) != len(list) {
		return t.Set(path, list)
	}
	var changed []int
	for i := range list {
		if !reflect.DeepEqual(old[i], list[i]) {
			changed = append(changed, i)
		}
	}
	if len(changed) > len(list)/2 {
		return t.Set(path, list)
	}
	for _, i := range changed {
		if err := t.Set(path+"/"+strconv.Itoa(i), list[i]); err != nil {
			return err
		}
	}
	return nil
}

// anyList returns words as the tree stores a list: []any.
func anyList(words []string) []any {
	out := make([]any, len(words))
	for i, w := range words {
		out[i] = w
	}
	return out
}
