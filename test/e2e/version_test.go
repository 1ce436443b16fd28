package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// packBundles packs the releases of an example worker with the real
// stickyd command line (see benchkit.PackBundles).
func packBundles(t *testing.T, name, pkg string, releases ...[]string) (archive string, digests []string) {
	t.Helper()
	return benchkit.PackBundles(t, benchkit.BuildStickyd(t), name, pkg, releases...)
}

// The version rule, with two bundles of the demo app: a person promoted
// from release 1 to release 2 keeps their doc page (an additive change) and
// gets a clean grid page with a notice (its state changed shape); the
// session and login survive. The rollback is the same road back. The agent
// opens the archive read-only and runs the bundles from its cache.
func TestStateCrossesVersions(t *testing.T) {
	archive, ds := packBundles(t, "demo", "demo/cmd/demo-worker", []string{"-release", "1"}, []string{"-release", "2"})
	r1, r2 := ds[0], ds[1]
	cfg := &agent.Config{
		Name:     "e2e",
		LogLevel: "warn",
		DataDir:  t.TempDir(),
		Server:   &agent.ServerConfig{RaftAddr: "127.0.0.1:0"},
		Front:    &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s"},
		Admin:    &agent.AdminConfig{Address: "127.0.0.1:0", Token: testToken},
		Bundles:  &agent.BundlesConfig{Archive: archive},
		Groups:   []*agent.GroupConfig{{Name: "v1", Workers: 1, Bundle: r1}},
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
	if code, out := stickyd(t, a, "group", "create", "-bundle", "sha256:"+strings.Repeat("1", 64), "v9"); code != 1 || !strings.Contains(out, "not found") {
		t.Fatalf("a group from a bundle not in the archive: %d %s", code, out)
	}
	if code, out := stickyd(t, a, "group", "create", "-bundle", r2, "v2"); code != 0 {
		t.Fatalf("group create: %d %s", code, out)
	}
	waitGroupReady(t, a, "v2", 1)

	b := newBrowser(t, a)
	if code, body := b.do("POST", "/login"); code != 400 {
		t.Fatalf("login without a user: %d %s", code, body)
	}
	if code, _ := b.doForm("/login", "user=dora"); code != 303 {
		t.Fatalf("login: %d", code)
	}
	if w := b.whoami(); w.User != "dora" || w.Worker != "v1-1" {
		t.Fatalf("whoami %+v, want dora on the default group's v1-1", w)
	}
	grid := b.openTabKind("g", "grid")
	doc := b.openTabKind("d", "doc")
	grid.pull(0)
	doc.pull(0)
	grid.send(map[string]any{"op": "filter", "text": "Rome"})
	doc.send(map[string]any{"op": "edit", "title": "Q3 notes", "body": "call the Rome office"})
	grid.drainUntil("filter/text", "Rome")
	doc.drainUntil("title", "Q3 notes")

	// Release: promote the new build.
	if code, out := stickyd(t, a, "group", "promote", "v2"); code != 0 || !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("promote: %d %s", code, out)
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

	// Rollback is the same road the other way: docs cross back untouched.
	if code, out := stickyd(t, a, "group", "rollback"); code != 0 || !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("rollback: %d %s", code, out)
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
