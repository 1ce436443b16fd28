// Package taskboard is a shared task board, the app of docs/first-app.md:
// everyone sees the tasks live (kept in the global store, announced on the
// table "tasks"), and each tab keeps its own filter and draft in its page
// tree, which moves with its person.
package taskboard

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strconv"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
)

//go:embed web
var web embed.FS

// Task is one task, as the store holds it at board/tasks/ID.
type Task struct {
	Title string `json:"title"`
	Done  bool   `json:"done"`
	By    string `json:"by"`
}

// App is the task board.
type App struct{ files http.Handler }

// New returns the task board.
func New() *App {
	sub, _ := fs.Sub(web, "web")
	return &App{files: http.FileServerFS(sub)}
}

// ServeHTTP serves the page, and a login without a password (an example).
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/login" {
		if err := worker.SessionFrom(r.Context()).Login(r.FormValue("user")); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	a.files.ServeHTTP(w, r)
}

// OpenPage fills a new tab: who is there, and the board's tasks.
func (a *App) OpenPage(ctx context.Context, p *worker.Page) error {
	if err := p.Subscribe("tasks"); err != nil {
		return err
	}
	if err := p.Tree().Set("me", p.Session().User()); err != nil {
		return err
	}
	return load(ctx, p)
}

// OnTableChange reads the tasks again: someone changed them.
func (a *App) OnTableChange(ctx context.Context, p *worker.Page, _ worker.TableChange) error {
	return load(ctx, p)
}

func load(ctx context.Context, p *worker.Page) error {
	tasks := map[string]Task{}
	if err := worker.GetInto(ctx, "board/tasks", &tasks); err != nil && !errors.Is(err, worker.ErrNotFound) {
		return err
	}
	return p.Tree().Set("tasks", tasks)
}

// Message runs a tab's op: add and toggle change the board for everyone;
// filter and draft are the tab's own.
func (a *App) Message(ctx context.Context, p *worker.Page, msg json.RawMessage) (any, error) {
	var m struct{ Op, ID, Text string }
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	switch m.Op {
	case "filter", "draft":
		return nil, p.Tree().Set(m.Op, m.Text)
	case "add":
		if m.Text == "" {
			return nil, &worker.Refusal{Code: "empty", Message: "a task needs a title"}
		}
		id := strconv.FormatInt(time.Now().UnixNano(), 36)
		if err := change(ctx, id, func(t *Task) { *t = Task{Title: m.Text, By: p.Session().User()} }); err != nil {
			return nil, err
		}
		return id, p.Tree().Set("draft", "")
	case "toggle":
		return nil, change(ctx, m.ID, func(t *Task) { t.Done = !t.Done })
	}
	return nil, fmt.Errorf("unknown op %q", m.Op)
}

// change edits one task under a grant, then tells every page.
func change(ctx context.Context, id string, edit func(*Task)) error {
	path := "board/tasks/" + id
	err := worker.Update(ctx, []string{path}, func(cur worker.Values) (map[string]any, []string, error) {
		var t Task
		if err := cur.Decode(path, &t); err != nil && !errors.Is(err, worker.ErrNotFound) {
			return nil, nil, err
		}
		edit(&t)
		return map[string]any{path: t}, nil, nil
	})
	if err != nil {
		return err
	}
	return worker.Publish(ctx, "tasks", id)
}
