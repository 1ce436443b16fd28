package agent

import (
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/maintenance"
	"github.com/stickyd/stickyd/internal/monitor"
)

// newMonitor wires the monitor's reading (internal/monitor) to this agent:
// its host, the maps, the gateway's costs in the people's page, and the
// other agents through the admin API. Governance is read when the reading
// is composed: it is built after the monitor, which it reads.
func (a *Agent) newMonitor() (*monitor.Cluster, error) {
	cfg := monitor.Config{
		Agent:         a.cfg.Name,
		ProbeInterval: duration(a.cfg.Probe.Interval),
		Runtimes:      a.cfg.runtimes(),
		Pool:          a.pool,
		Maps:          a.fsm,
		Raft:          a.raft,
		DefaultGroup:  a.sup.DefaultGroup,
		UsersPage:     func(q fsm.UserQuery) fsm.UserPage { return people{sup: a.sup, maps: a.fsm, gw: a.gw}.UsersPage(q) },
		GroupOf:       a.router.GroupOf,
		Outlook:       func(worker string) (governor.Outlook, bool) { return a.govern.Outlook(worker) },
		Events:        func() []governor.Event { return a.govern.Events() },
		Windows:       maintenance.Windows,
		Tenants:       func() []monitor.TenantCost { return a.gw.TenantCosts() },
		Call:          a.remote.Call,
		Held:          a.held,
		Registry:      a.registry,
	}
	return monitor.New(cfg)
}

// runtimes names what runs each configured group's workers, for the
// monitor.
func (c *Config) runtimes() map[string]string {
	out := make(map[string]string, len(c.Groups))
	for _, g := range c.Groups {
		switch {
		case g.Builtin != "":
			out[g.Name] = RuntimeBuiltin
		case g.Plugin != nil && g.Plugin.Runtime != "":
			out[g.Name] = g.Plugin.Runtime
		default:
			out[g.Name] = RuntimeGoPlugin
		}
	}
	return out
}
