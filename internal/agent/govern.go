package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/governance"
	"github.com/stickyd/stickyd/internal/governor"
)

// newGovernance wires governance (internal/governance) to this agent: the
// configured groups that enable it are governed from the start, the
// others when the catalog enables them.
func (a *Agent) newGovernance() (*governance.Executor, error) {
	policies := map[string]governor.Policy{}
	for _, g := range a.cfg.Groups {
		if g.Governance == nil || !g.Governance.Enabled {
			continue
		}
		p, err := g.Governance.Policy(g.Workers)
		if err != nil {
			return nil, fmt.Errorf("group %q: governance: %w", g.Name, err)
		}
		policies[g.Name] = p
	}
	return governance.New(governance.Config{
		Agent:      a.cfg.Name,
		Policies:   policies,
		Pool:       a.pool,
		Maps:       a.fsm,
		Mover:      a.mover,
		Leadership: a.leadership,
		Register:   a.register,
		Parts:      a.monitorParts,
		Post: func(ctx context.Context, admin, path string, body []byte, out any) error {
			return a.call(ctx, "POST", admin, path, body, out)
		},
		Seen:   a.history.record,
		Logger: a.log, // its lines as they always were: "governance", decision, reason
	})
}

// monitorParts asks every other agent for its part of the monitor, as
// governance reads it.
func (a *Agent) monitorParts(ctx context.Context, pathOf func(agent string) string, timeout time.Duration) map[string]governance.Part {
	answers := askEach[LocalMonitor](ctx, a, pathOf, timeout)
	out := make(map[string]governance.Part, len(answers))
	for name, p := range answers {
		out[name] = governance.Part{Workers: p.Workers, Usage: p.Usage, Token: p.Token, Changes: p.Changes, Gone: p.Gone}
	}
	return out
}
