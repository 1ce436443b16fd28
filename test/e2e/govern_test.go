package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
)

// Governance on real workers: people whose pages weigh on one worker's
// memory are moved off it by the one road, the decision is explained in
// /v1/events, and their pages come through intact.
func TestMemorySaturationMovesPeople(t *testing.T) {
	// The race detector makes big freezes slow: a generous freeze bound.
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), withFreezeTimeout("30s"), func(c *agent.Config) {
		c.Probe = &agent.ProbeConfig{Interval: "250ms", Misses: 8}
		c.Groups[0].Governance = &agent.GovernanceConfig{Enabled: true, MemoryLimitMB: 48, CPULimit: 64}
	})
	workers := a.Pool().Ready()
	var tabs []*tab
	for i := 0; i < 6; i++ {
		b := newBrowser(t, a)
		user := "g" + strconv.Itoa(i)
		b.do("POST", "/login?user="+user)
		if u, _ := a.Supervisor().User(user); u.Worker != workers[0] {
			if _, err := a.Supervisor().Move(t.Context(), user, workers[0], "test"); err != nil {
				t.Fatal(err)
			}
		}
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "fill", "bytes": 6 << 20})
		tb.send(map[string]any{"op": "inc"})
		tabs = append(tabs, tb)
	}
	var events []struct {
		Kind, Worker, User, To, Reason string
	}
	waitFor(t, 30*time.Second, "a governance move off the heavy worker", func() bool {
		code, body := adminCall(t, a, "GET", "/v1/events", testToken, "")
		if code != 200 {
			return false
		}
		_ = json.Unmarshal([]byte(body), &events)
		for _, e := range events {
			if e.Kind == "completed" && e.Worker == workers[0] && e.To == workers[1] {
				return true
			}
		}
		return false
	})
	moved := false
	for _, e := range events {
		if e.Kind == "move" {
			if !strings.Contains(e.Reason, "memory") || !strings.Contains(e.Reason, "%") {
				t.Fatalf("decision without its reason and numbers: %+v", e)
			}
			moved = true
		}
	}
	if !moved {
		t.Fatalf("no move decision in %+v", events)
	}
	for _, tb := range tabs {
		tb.send(map[string]any{"op": "inc"})
		tb.drainUntil("count", 2)
	}
}
