package worker

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
)

func TestValuesDecodeAndChildren(t *testing.T) {
	v := Values{
		"board/tasks/1/title": json.RawMessage(`"write the guide"`),
		"board/tasks/1/done":  json.RawMessage(`true`),
		"board/tasks/7/title": json.RawMessage(`"ship"`),
		"board/tasks/7/tags":  json.RawMessage(`["a","b"]`),
		"board/name":          json.RawMessage(`"team"`),
	}
	type task struct {
		Title string   `json:"title"`
		Done  bool     `json:"done"`
		Tags  []string `json:"tags"`
	}
	var one task
	if err := v.Decode("board/tasks/1", &one); err != nil || one.Title != "write the guide" || !one.Done {
		t.Fatalf("task 1: %+v %v", one, err)
	}
	var all map[string]task
	if err := v.Decode("board/tasks", &all); err != nil || len(all) != 2 || !slices.Equal(all["7"].Tags, []string{"a", "b"}) {
		t.Fatalf("all tasks: %+v %v", all, err)
	}
	var name string
	if err := v.Decode("board/name", &name); err != nil || name != "team" {
		t.Fatalf("a value of its own: %q %v", name, err)
	}
	if got := v.Children("board/tasks"); !slices.Equal(got, []string{"1", "7"}) {
		t.Fatalf("children of board/tasks: %v", got)
	}
	if got := v.Children("board"); !slices.Equal(got, []string{"name", "tasks"}) {
		t.Fatalf("children of board: %v", got)
	}
	if got := v.Children("board/name"); len(got) != 0 {
		t.Fatalf("children of a value: %v", got)
	}
	// board/tasks/1 is not a prefix of board/tasks/10.
	v["board/tasks/10/title"] = json.RawMessage(`"ten"`)
	var t1 task
	if err := v.Decode("board/tasks/1", &t1); err != nil || t1.Title != "write the guide" {
		t.Fatalf("task 1 beside task 10: %+v %v", t1, err)
	}
	var none task
	if err := v.Decode("board/tasks/2", &none); !errors.Is(err, ErrNotFound) {
		t.Fatalf("nothing stored: %v", err)
	}
	var wrong int
	if err := v.Decode("board/tasks/1", &wrong); err == nil {
		t.Fatal("a record decoded into an int")
	}
}
