package agent

import (
	"context"
	"fmt"

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
		Parts:      a.monitor.Parts,
		Post: func(ctx context.Context, admin, path string, body []byte, out any) error {
			return a.remote.Call(ctx, "POST", admin, path, body, out)
		},
		Seen:   a.monitor.Seen,
		Logger: a.log, // its lines as they always were: "governance", decision, reason
	})
}
