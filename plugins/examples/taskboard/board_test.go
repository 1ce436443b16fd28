package taskboard

import (
	"errors"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/workertest"
)

// Two people on two workers: a task one adds reaches the other's page; each
// tab's filter and draft are its own. No agent, no subprocess.
func TestBoard(t *testing.T) {
	h := workertest.New(t, New(), workertest.Workers(2))
	ana, bob := h.Person("ana").Open("board"), h.Person("bob").Open("board")
	if _, err := ana.Send(map[string]any{"op": "draft", "text": "write the guide"}); err != nil {
		t.Fatal(err)
	}
	id, err := ana.Send(map[string]any{"op": "add", "text": "write the guide"})
	if err != nil {
		t.Fatal(err)
	}
	if ana.Get("draft") != "" || bob.Get("draft") != nil {
		t.Fatalf("drafts: ana %q, bob %v", ana.Get("draft"), bob.Get("draft"))
	}
	var task Task
	if err := h.Store.Decode("board/tasks/"+unquote(id), &task); err != nil || task != (Task{Title: "write the guide", By: "ana"}) {
		t.Fatalf("the stored task: %+v %v", task, err)
	}
	// Bob's page, on the other worker, hears of it and toggles it.
	deadline := time.Now().Add(5 * time.Second)
	for bob.Get("tasks/"+unquote(id)+"/title") != "write the guide" {
		if time.Now().After(deadline) {
			t.Fatalf("bob's page never saw the task: %v", bob.Tree())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := bob.Send(map[string]any{"op": "toggle", "id": unquote(id)}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Decode("board/tasks/"+unquote(id), &task); err != nil || !task.Done {
		t.Fatalf("after bob's toggle: %+v %v", task, err)
	}
	if _, err := bob.Send(map[string]any{"op": "filter", "text": "guide"}); err != nil || bob.Get("filter") != "guide" || ana.Get("filter") != nil {
		t.Fatalf("filters: bob %v, ana %v (%v)", bob.Get("filter"), ana.Get("filter"), err)
	}
	var re *workertest.Error
	if _, err := ana.Send(map[string]any{"op": "add", "text": ""}); !errors.As(err, &re) || re.Code != "empty" {
		t.Fatalf("an empty task: %v", err)
	}
}

func unquote(raw []byte) string { return string(raw[1 : len(raw)-1]) }
