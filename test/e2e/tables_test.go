package e2e

import (
	"bufio"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
)

// metric reads one sample of the agent's metrics ("name{labels}"), 0 when
// it is absent.
func metric(t *testing.T, a *agent.Agent, sample string) float64 {
	t.Helper()
	code, body := adminCall(t, a, "GET", "/v1/metrics", testToken, "")
	if code != 200 {
		t.Fatalf("metrics: %d", code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == sample {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	return 0
}

// Table changes go to the subscribed pages and only to them: the workers
// without subscribers get no send (the metrics say so), the originator's
// own page hears first, cached values marked with the table are invalidated
// by a delta, and subscriptions travel with a person who moves. Once with
// Go workers, once with Python workers.
func TestTablesReachSubscribersOnly(t *testing.T) {
	eachRuntime(t, testTablesReachSubscribersOnly)
}

func testTablesReachSubscribersOnly(t *testing.T, app option) {
	a := startAgentWith(t, "subprocess", 3, withDataDir(t), app)
	w := a.Pool().Ready()
	tabs := map[string]*tab{}
	place := func(user, worker string) {
		b := newBrowser(t, a)
		b.do("POST", "/login?user="+user)
		if u, _ := a.Supervisor().User(user); u.Worker != worker {
			if _, err := a.Supervisor().Move(t.Context(), user, worker, "test"); err != nil {
				t.Fatal(err)
			}
		}
		tabs[user] = b.openTab("p")
		tabs[user].pull(0)
	}
	place("origin", w[0])
	place("local", w[0])
	place("remote", w[1])
	place("other", w[2])
	tabs["local"].send(map[string]any{"op": "sub", "table": "orders"})
	tabs["remote"].send(map[string]any{"op": "sub", "table": "orders"})
	tabs["other"].send(map[string]any{"op": "sub", "table": "stock"})
	tabs["remote"].send(map[string]any{"op": "cache", "key": "total", "table": "orders", "v": 42})
	tabs["remote"].drainUntil("cache/total", 42)
	waitFor(t, 10*time.Second, "the subscription index", func() bool {
		s := a.FSM().Subscribers("orders")
		return len(s) == 2 && s[0] == w[0] && s[1] == w[1] && len(a.FSM().Subscribers("stock")) == 1
	})

	tabs["origin"].send(map[string]any{"op": "pub", "table": "orders", "v": map[string]any{"id": 7}})
	tabs["local"].drainUntil("heard/orders", 1)
	tabs["remote"].drainUntil("heard/orders", 1)
	if _, ok := tabs["remote"].tree["cache/total"]; ok {
		t.Fatalf("the cached total survived a change of its table: %v", tabs["remote"].tree)
	}
	if got := changeID(tabs["remote"]); got != 7.0 {
		t.Fatalf("the change's data: %v (tree %v)", got, tabs["remote"].tree)
	}
	// The originator's own pages are told before the host is (the worker
	// queues the change in their mailboxes, then sends the notice), but
	// which handler runs first is the scheduler's: a loaded machine ran the
	// remote one 0.4 ms earlier. Reported, not asserted.
	localAt, remoteAt := tabs["local"].tree["heard_at/orders"].(float64), tabs["remote"].tree["heard_at/orders"].(float64)
	t.Logf("the originator's own page heard %.2f ms before the remote one", (remoteAt-localAt)/1e6)
	time.Sleep(100 * time.Millisecond)
	tabs["other"].pull(0)
	if _, ok := tabs["other"].tree["heard/orders"]; ok {
		t.Fatal("a page subscribed to stock heard of orders")
	}
	for _, c := range []struct {
		worker string
		want   float64
	}{{w[0], 0}, {w[1], 1}, {w[2], 0}} {
		if got := metric(t, a, `stickyd_tables_sends_total{worker="`+c.worker+`"}`); got != c.want {
			t.Errorf("sends to %s: %v, want %v", c.worker, got, c.want)
		}
	}
	// A table nobody watches costs no send.
	tabs["origin"].send(map[string]any{"op": "pub", "table": "nobody", "v": 1})
	waitFor(t, 5*time.Second, "the unwatched change counted", func() bool {
		return metric(t, a, "stickyd_tables_unwatched_total") == 1
	})

	// The remote person moves to w[2]: the subscription goes with the page.
	if _, err := a.Supervisor().Move(t.Context(), "remote", w[2], "test"); err != nil {
		t.Fatal(err)
	}
	// A moved person wakes at their first request; their pages subscribe
	// again there.
	tabs["remote"].pull(0)
	waitFor(t, 10*time.Second, "the index after the move", func() bool {
		s := a.FSM().Subscribers("orders")
		return len(s) == 2 && s[0] == w[0] && s[1] == w[2]
	})
	// The arrival says the table may have changed on the way (2), then the
	// next change arrives (3).
	tabs["remote"].drainUntil("heard/orders", 2)
	tabs["origin"].send(map[string]any{"op": "pub", "table": "orders", "v": map[string]any{"id": 8}})
	tabs["remote"].drainUntil("heard/orders", 3)
	if got := changeID(tabs["remote"]); got != 8.0 {
		t.Fatalf("the change after the move: %v", got)
	}
	if got := metric(t, a, `stickyd_tables_sends_total{worker="`+w[1]+`"}`); got != 1 {
		t.Errorf("sends to %s after its subscriber left: %v, want still 1", w[1], got)
	}
}

// changeID is the id the last change of orders said, as the page shows it.
func changeID(tb *tab) any {
	m, _ := tb.tree["heard_data/orders"].(map[string]any)
	return m["id"]
}
