package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
)

// A worker app calls the AI gateway through its channel: a logged-in
// person asks, whole and streamed; the answers are the provider's, the
// streamed text reaches the page's tree piece by piece, and both calls are
// charged to the person, at the exact cost of the provider's usage. Once
// with Go workers (on both channels), once with Python workers.
func TestGatewayFromWorkers(t *testing.T) {
	t.Run("go", func(t *testing.T) {
		for _, mode := range modes {
			t.Run(mode, func(t *testing.T) { testGatewayFromWorkers(t, mode, withApp("counter")) })
		}
	})
	t.Run("python", func(t *testing.T) { testGatewayFromWorkers(t, "subprocess", withPycounter(pythonRepo(t))) })
}

func testGatewayFromWorkers(t *testing.T, mode string, app option) {
	p := newProvider(t, 0)
	a := startAgentWith(t, mode, 2, func(c *agent.Config) { c.Gateway = gatewayBlock(p, 4) }, app)
	b := newBrowser(t, a)
	if code, body := b.do("POST", "/login?user=maria"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("p")

	var ask struct {
		Answer     string `json:"answer"`
		CostMicros int64  `json:"cost_micros"`
	}
	ans := tb.send(map[string]any{"op": "ask", "text": "hello"})
	if err := json.Unmarshal(ans.Data, &ask); err != nil {
		t.Fatalf("ask: %v: %s", err, ans.Data)
	}
	// 12 input + 30 cached + 7 output tokens at $1 / $0.5 / $4 per
	// million: 12 + 15 + 28 = 55 micro-dollars.
	if ask.Answer != "echo: hello" || ask.CostMicros != 55 {
		t.Fatalf("ask answered %+v", ask)
	}

	after := tb.last
	ans = tb.send(map[string]any{"op": "ask_stream", "text": "world"})
	if err := json.Unmarshal(ans.Data, &ask); err != nil || ask.Answer != "echo: world" {
		t.Fatalf("ask_stream answered %s (%v)", ans.Data, err)
	}
	// The page receives one delta per piece the provider streamed.
	var pieces []string
	for len(pieces) < 3 {
		pa := tb.op(map[string]any{"op": "pull", "after": after, "wait": 2000})
		if pa.Op != "reply" || len(pa.Deltas) == 0 {
			t.Fatalf("pull after %d: %+v (pieces so far %q)", after, pa, pieces)
		}
		for _, d := range pa.Deltas {
			after = d.Seq
			if d.Path == "answer" && d.Op == "set" {
				var s string
				_ = json.Unmarshal(d.Value, &s)
				pieces = append(pieces, s)
			}
		}
	}
	if want := []string{"ec", "echo: ", "echo: world"}; !slices.Equal(pieces, want) {
		t.Fatalf("the page's answer grew as %q, want %q", pieces, want)
	}
	tb.drainUntil("answer", "echo: world")

	var c gateway.Counters
	waitFor(t, 5*time.Second, "maria's two calls in the counters", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/gateway/usage", testToken, "")
		_ = json.Unmarshal([]byte(body), &c)
		return c.Sessions["maria"].Calls == 2
	})
	m := c.Sessions["maria"]
	if m.Micros != 2*55 || m.Usage.Input != 24 || m.Usage.CachedInput != 60 || m.Usage.Output != 14 || c.Total.Calls != 2 {
		t.Fatalf("counters %+v", c)
	}
	if p.count("hello") != 1 || p.count("world") != 1 {
		t.Fatalf("provider saw hello %d, world %d times", p.count("hello"), p.count("world"))
	}

	// The person's cost, in user show and in the monitor's people.
	if out, code := runCLI(t, a.AdminAddr(), "user", "show", "maria"); code != 0 || !strings.Contains(out, "AI gateway cost = $0.000110 in 2 calls") {
		t.Fatalf("user show maria (exit %d):\n%s", code, out)
	}
	var view struct {
		People []struct {
			User          string `json:"user"`
			GatewayMicros int64  `json:"gateway_micros"`
			GatewayCalls  int64  `json:"gateway_calls"`
		} `json:"people"`
	}
	_, body := adminCall(t, a, "GET", "/v1/monitor", testToken, "")
	if err := json.Unmarshal([]byte(body), &view); err != nil {
		t.Fatalf("monitor: %v: %s", err, body)
	}
	found := false
	for _, pp := range view.People {
		if pp.User == "maria" {
			found = pp.GatewayMicros == 110 && pp.GatewayCalls == 2
		}
	}
	if !found {
		t.Fatalf("the monitor's people lack maria's gateway cost: %+v", view.People)
	}
}

// An agent without a gateway block refuses its workers' calls plainly.
// Once with Go workers, once with Python workers.
func TestGatewayFromWorkersWithoutGateway(t *testing.T) {
	eachRuntime(t, func(t *testing.T, app option) { testGatewayFromWorkersWithoutGateway(t, app) })
}

func testGatewayFromWorkersWithoutGateway(t *testing.T, app option) {
	a := startAgentWith(t, "inprocess", 1, app)
	b := newBrowser(t, a)
	b.do("POST", "/login?user=maria")
	tb := b.openTab("p")
	ans := tb.op(map[string]any{"op": "msg", "data": map[string]any{"op": "ask", "text": "hello"}})
	if !strings.Contains(ans.Error, "this agent has no gateway block") {
		t.Fatalf("ask without a gateway: %+v", ans)
	}
}
