package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/placement"
)

func withIdlePark(d string) option {
	return func(c *agent.Config) { c.Lifecycle = &agent.LifecycleConfig{IdlePark: d} }
}

// A person idle past lifecycle.idle_park is parked by the one road to their
// own worker, which lets them go (their pages leave its memory); their next
// frame wakes them there with their page whole (the count goes on, no
// notice). Someone typing the whole time stays live.
func TestIdlePersonIsParked(t *testing.T) {
	waits(t)
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 1, withDataDir(t), withIdlePark("1s"))
			_, idleTab, home := countingPerson(t, a, "ida")
			idleTab.send(map[string]any{"op": "inc"})
			_, busyTab, _ := countingPerson(t, a, "bea")
			busy := 1
			deadline := time.Now().Add(20 * time.Second)
			for {
				// Bea types while Ida sits.
				busyTab.send(map[string]any{"op": "inc"})
				busy++
				u, _ := a.Supervisor().User("ida")
				if u.State == placement.StateParked {
					if u.Worker != home || u.Package == "" {
						t.Fatalf("ida parked as %+v, want on %s with a package", u, home)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ida was never parked: %+v", u)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if b, _ := a.Supervisor().User("bea"); b.State != placement.StateLive {
				t.Fatalf("bea, typing, is %s", b.State)
			}
			// Ida's page left the worker's memory; only Bea's is there.
			waitFor(t, 10*time.Second, "the worker to hold only bea's page", func() bool {
				r, err := a.Pool().Probe(t.Context(), home)
				return err == nil && r.Pages == 1
			})
			ans := sendRetrying(t, idleTab, map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":3`) {
				t.Fatalf("ida's first message after parking: %s, want count 3", ans.Data)
			}
			if u, _ := a.Supervisor().User("ida"); u.State != placement.StateLive && u.State != placement.StateParked {
				t.Fatalf("ida after her message: %+v", u)
			}
			ans = busyTab.send(map[string]any{"op": "inc"})
			if !strings.Contains(string(ans.Data), `"count":`) {
				t.Fatalf("bea: %s", ans.Data)
			}
		})
	}
}

// A group's own idle_park holds over lifecycle's: with idle parking off
// for the agent and on ("1s") for the group, an idle person of the group
// is parked.
func TestIdleParkPerGroup(t *testing.T) {
	a := startAgentWith(t, "inprocess", 1, withDataDir(t), func(c *agent.Config) {
		c.Lifecycle = &agent.LifecycleConfig{IdlePark: "off"}
		c.Groups[0].IdlePark = "1s"
	})
	_, tb, home := countingPerson(t, a, "gil")
	waitFor(t, 20*time.Second, "gil, idle, to be parked by her group's idle_park", func() bool {
		u, _ := a.Supervisor().User("gil")
		return u.State == placement.StateParked && u.Worker == home
	})
	ans := sendRetrying(t, tb, map[string]any{"op": "inc"})
	if !strings.Contains(string(ans.Data), `"count":2`) {
		t.Fatalf("gil after parking: %s, want count 2", ans.Data)
	}
}
