package e2e

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// withPycounterGroup adds the group "py" to the agent: one Python worker
// running pycounter, beside the Go counter's group "web" (the default:
// newcomers land there).
func withPycounterGroup(root string) option {
	return func(c *agent.Config) {
		c.PythonSDK = filepath.Join(root, "plugins", "python")
		c.Groups = append(c.Groups, &agent.GroupConfig{Name: "py", Workers: 1, Plugin: &agent.PluginConfig{
			Runtime: agent.RuntimePython3, Command: "pycounter.app:application",
			Env: map[string]string{"PYTHONPATH": filepath.Join(root, "plugins", "examples")}}})
	}
}

// A person whose page subscribes to a table and holds a cached value moves
// from a Go worker to a Python worker and back, in one agent. The package
// carries the subscriptions and the cache marks both ways: where the page
// wakes it subscribes again (the host routes the table's next change
// there), and the arrival says once per table that it may have changed on
// the way, which deletes the cached value marked with it (with a delta:
// the value and its mark arrived), as the Go SDK's rule is (docs/data.md);
// computed again, the value then stays until its table changes. The page
// never restarts and its deltas stay in sequence.
func TestPythonLiveDataAcrossMoves(t *testing.T) {
	root := pythonRepo(t)
	a := startAgentWith(t, "subprocess", 1, withDataDir(t), withPycounterGroup(root))
	workers := map[string]string{}
	waitFor(t, 30*time.Second, "both groups' workers", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.State == host.StateReady {
				workers[w.Group] = w.ID
			}
		}
		return workers["web"] != "" && workers["py"] != ""
	})

	login := func(user string) (*browser, *tab) {
		b := newBrowser(t, a)
		if code, body := b.do("POST", "/login?user="+user); code != 200 {
			t.Fatalf("login %s: %d %s", user, code, body)
		}
		if w := b.whoami().Worker; w != workers["web"] {
			t.Fatalf("%s landed on %s, not on the default group's %s", user, w, workers["web"])
		}
		tb := b.openTab("p")
		tb.pull(0)
		return b, tb
	}
	_, pub := login("pub")
	mia, tb := login("mia")
	tb.send(map[string]any{"op": "sub", "table": "orders"})
	if ans := tb.send(map[string]any{"op": "cache", "key": "total", "table": "stock", "v": 42}); string(ans.Data) != "42" {
		t.Fatalf("the cached total: %s", ans.Data)
	}
	tb.drainUntil("cache/total", 42)
	published := 0
	publish := func() {
		published++
		pub.send(map[string]any{"op": "pub", "table": "orders", "v": map[string]any{"id": published}})
	}
	heard := 0
	hear := func(what string) {
		t.Helper()
		heard++
		tb.drainUntil("heard/orders", heard)
		if got := changeID(tb); got != float64(published) {
			t.Fatalf("%s: the page heard change %v, want %d; tree %v", what, got, published, tb.tree)
		}
	}
	publish()
	hear("on the Go worker")
	if tb.tree["cache/total"] != 42.0 {
		t.Fatalf("a change of orders took the total marked with stock: %v", tb.tree)
	}

	stocks := 0
	for _, to := range []string{"py", "web"} {
		code, body := adminCall(t, a, "POST", "/v1/users/mia/move", testToken, fmt.Sprintf(`{"group": %q}`, to))
		if code != 200 {
			t.Fatalf("move to %s: %d %s", to, code, body)
		}
		if w := mia.whoami(); w.Worker != workers[to] {
			t.Fatalf("after the move to %s mia is on %s", to, w.Worker)
		}
		// The arrival: once per table, no data; the cached total, marked
		// with stock, is deleted.
		heard++
		stocks++
		tb.drainUntil("heard/orders", heard)
		tb.drainUntil("heard/stock", stocks)
		if d, ok := tb.tree["heard_data/orders"]; !ok || d != nil {
			t.Fatalf("the arrival at %s said %v (present %v), want no data", to, d, ok)
		}
		if v, ok := tb.tree["cache/total"]; ok {
			t.Fatalf("the cached total %v survived the arrival at %s: its mark did not travel", v, to)
		}
		// The host knows where the page subscribes now: the next change
		// reaches it there.
		waitFor(t, 10*time.Second, "the subscription index after the move to "+to, func() bool {
			return slices.Equal(a.FSM().Subscribers("orders"), []string{workers[to]}) &&
				slices.Equal(a.FSM().Subscribers("stock"), []string{workers[to]})
		})
		publish()
		hear("after the move to " + to)
		// Computed again once, it is kept until stock changes.
		v := 42 + stocks
		for try, want := range []int{v, v} {
			ans := tb.send(map[string]any{"op": "cache", "key": "total", "table": "stock", "v": v + try})
			if ans.Worker != workers[to] || string(ans.Data) != fmt.Sprint(want) {
				t.Fatalf("cache call %d on %s: %s from %s, want %d", try, to, ans.Data, ans.Worker, want)
			}
		}
		publish()
		hear("with the total cached on " + to)
		if tb.tree["cache/total"] != float64(v) {
			t.Fatalf("a change of orders took the total marked with stock on %s: %v", to, tb.tree)
		}
	}
	if got := metric(t, a, `stickyd_tables_sends_total{worker="`+workers["py"]+`"}`); got != 2 {
		t.Errorf("changes sent to the Python worker: %v, want 2", got)
	}
	if len(tb.notices) != 0 {
		t.Fatalf("the page restarted on the way: %v", tb.notices)
	}
	for i := 1; i < len(tb.seqs); i++ {
		if tb.seqs[i] != tb.seqs[i-1]+1 {
			t.Fatalf("delta gap or duplicate across runtimes: %v", tb.seqs)
		}
	}
}
