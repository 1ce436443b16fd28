package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
)

// The version rule, with two builds of the demo app: a person moved from
// release 1 to release 2 keeps their doc page (an additive change) and gets
// a clean grid page with a notice (its state changed shape); the session and
// login survive. Moving back is the same road.
func TestStateCrossesVersions(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &agent.Config{
		Name:     "e2e",
		LogLevel: "warn",
		DataDir:  t.TempDir(),
		Server:   &agent.ServerConfig{RaftAddr: "127.0.0.1:0"},
		Front:    &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s"},
		Admin:    &agent.AdminConfig{Address: "127.0.0.1:0", Token: testToken},
		Groups: []*agent.GroupConfig{
			{Name: "v1", Workers: 1, Plugin: &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "demo1"}}},
			{Name: "v2", Workers: 1, Plugin: &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "demo2"}}},
		},
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Warn, Output: testWriter{t}})
	a, err := agent.New(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	b := newBrowser(t, a)
	if code, body := b.do("POST", "/login"); code != 400 {
		t.Fatalf("login without a user: %d %s", code, body)
	}
	if code, _ := b.doForm("/login", "user=dora"); code != 303 {
		t.Fatalf("login: %d", code)
	}
	w := b.whoami()
	if w.User != "dora" {
		t.Fatalf("whoami %+v", w)
	}
	if w.Worker != "v1-1" {
		if _, err := a.Supervisor().Move(t.Context(), "dora", "v1-1", "test"); err != nil {
			t.Fatal(err)
		}
	}
	grid := b.openTabKind("g", "grid")
	doc := b.openTabKind("d", "doc")
	grid.pull(0)
	doc.pull(0)
	grid.send(map[string]any{"op": "filter", "text": "Rome"})
	doc.send(map[string]any{"op": "edit", "title": "Q3 notes", "body": "call the Rome office"})
	grid.drainUntil("filter/text", "Rome")
	doc.drainUntil("title", "Q3 notes")

	// Release: move dora to the new build.
	if _, err := a.Supervisor().MoveToGroup(t.Context(), "dora", "v2", "release"); err != nil {
		t.Fatal(err)
	}
	grid.pull(2 * time.Second)
	if len(grid.notices) != 1 || !strings.Contains(grid.notices[0], "application changed") {
		t.Fatalf("grid page after the release: notices %v", grid.notices)
	}
	if ft, ok := lookup(grid.tree, "filter/text"); !ok || ft != "" {
		t.Fatalf("grid page did not restart clean: filter/text = %v (%v)", ft, ok)
	}
	doc.send(map[string]any{"op": "edit", "body": "call the Rome office today"})
	doc.drainUntil("body", "call the Rome office today")
	if doc.tree["title"] != "Q3 notes" || len(doc.notices) != 0 {
		t.Fatalf("doc page lost its state across an additive change: %v notices %v", doc.tree, doc.notices)
	}
	if w := b.whoami(); w.User != "dora" || w.Worker != "v2-1" {
		t.Fatalf("after the release dora is %+v (session or login lost?)", w)
	}

	// Rollback is a move the other way: docs cross back untouched.
	if _, err := a.Supervisor().MoveToGroup(t.Context(), "dora", "v1", "rollback"); err != nil {
		t.Fatal(err)
	}
	doc.send(map[string]any{"op": "edit", "title": "Q3 notes (rolled back)"})
	doc.drainUntil("title", "Q3 notes (rolled back)")
	if doc.tree["body"] != "call the Rome office today" || len(doc.notices) != 0 {
		t.Fatalf("doc after the rollback: %v notices %v", doc.tree, doc.notices)
	}
	if w := b.whoami(); w.User != "dora" || w.Worker != "v1-1" {
		t.Fatalf("after the rollback dora is %+v", w)
	}
}

// lookup finds path in a tab's tree, whether a delta set it flat or a RESET
// brought it nested.
func lookup(tree map[string]any, path string) (any, bool) {
	if v, ok := tree[path]; ok {
		return v, true
	}
	head, rest, found := strings.Cut(path, "/")
	if !found {
		return nil, false
	}
	m, ok := tree[head].(map[string]any)
	if !ok {
		return nil, false
	}
	return lookup(m, rest)
}
