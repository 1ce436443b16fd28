package monitor

import (
	"context"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The monitor's reading: each agent describes its own workers (from its
// hosts' last probe readings: nothing waits on a worker) and the usage of
// the people on them; the agent asked composes every agent's part with the
// maps. An agent that does not answer shows its last known part, its
// workers unreachable.

// Pool is this agent's host (*host.Pool): its workers and their people's
// running totals.
type Pool interface {
	// Workers are the live workers, Retired the slots retired lately.
	Workers() []host.WorkerInfo
	Retired() []host.WorkerInfo
	// Usage is each person's running totals on worker.
	Usage(worker string) map[string]*protocol.UserUsage
}

// Maps is the replica of the maps the monitor reads (*fsm.FSM).
type Maps interface {
	// Agents are the agents registered in the maps, with their admin
	// addresses and workers.
	Agents() []fsm.AgentEntry
	Catalog() fsm.Catalog
	Tally() fsm.UserTally
	Maintenance() []fsm.MaintenanceEntry
	// Index and Counts feed the raft and supervisor gauges.
	Index() uint64
	Counts() (conns, users int)
}

// Raft is this agent's raft member (*raftnode.Node), for the leader's name
// in the reading and the leader gauge.
type Raft interface {
	Leader() (addr, id string)
	IsLeader() bool
}

// Config is what a Cluster is built from. Every field is required but
// Runtimes, Outlook, Events, Windows, Tenants and Held.
type Config struct {
	// Agent is this agent's name in the maps.
	Agent string
	// ProbeInterval is how often the hosts probe their workers: a ready
	// worker whose last probe answer is older than three intervals shows
	// as unreachable. Zero: never.
	ProbeInterval time.Duration
	// Runtimes names what runs each configured group's workers, by group,
	// for the groups the catalog does not describe.
	Runtimes map[string]string
	Pool     Pool
	Maps     Maps
	Raft     Raft
	// DefaultGroup is the group newcomers are placed in.
	DefaultGroup func() string
	// UsersPage lists the page of the maps' people q selects, with what
	// their calls to the gateway cost.
	UsersPage func(q fsm.UserQuery) fsm.UserPage
	// GroupOf is the group of a worker, any agent's.
	GroupOf func(worker string) string
	// Outlook is governance's view of a worker (its saturation and
	// projection) and Events its recent decisions; nil: none.
	Outlook func(worker string) (governor.Outlook, bool)
	Events  func() []governor.Event
	// Windows lists the open maintenance windows with the requests held
	// on each (maintenance.Windows); nil: none.
	Windows func(entries []fsm.MaintenanceEntry, workers []Worker) []Window
	// Call calls method path on the admin API at addr with body and
	// decodes the answer into out: how this agent asks the others for
	// their parts. It must honour ctx's deadline.
	Call func(ctx context.Context, method, addr, path string, body []byte, out any) error
	// Tenants lists the AI gateway's tenants with their costs; nil:
	// none.
	Tenants func() []TenantCost
	// Held is the store of moved people's packages held in memory, for
	// its gauges; nil without a data directory.
	Held *park.Tiered
	// Registry receives the workers' and the raft member's metrics.
	Registry prometheus.Registerer
}

// Cluster composes the monitor's reading of the whole pool from this
// agent's part and every other agent's (GET /v1/monitor, /v1/monitor/local,
// /v1/workers, the monitor page, governance's reading of every host). It
// starts no goroutine of its own: every ask of the others is bounded and
// waited for within the call that makes it.
type Cluster struct {
	cfg       Config
	history   history
	usageSent usageSent
	mu        sync.Mutex // guards lastParts
	// lastParts is each other agent's last part that answered, shown
	// (its workers unreachable) while it does not.
	lastParts map[string]Part
}

// New returns a Cluster and registers the workers' metrics, the raft
// member's and the channels' on cfg.Registry.
func New(cfg Config) (*Cluster, error) {
	c := &Cluster{cfg: cfg}
	if err := c.registerMetrics(); err != nil {
		return nil, err
	}
	return c, nil
}

// View composes the whole pool's reading with the first page of people.
func (c *Cluster) View(ctx context.Context) (View, error) {
	return c.Page(ctx, fsm.UserQuery{Limit: DefaultLimit})
}

// Page composes the whole pool's reading with the page of people q
// selects: every agent is asked for its workers and for the usage of that
// page's people only, so a reading costs a page, not the population. It
// is a ViewFunc.
func (c *Cluster) Page(ctx context.Context, q fsm.UserQuery) (View, error) {
	_, leader := c.cfg.Raft.Leader()
	v := View{At: time.Now(), Agent: c.cfg.Agent, Leader: leader, Default: c.cfg.DefaultGroup(), Events: c.events()}
	page := c.cfg.UsersPage(q)
	v.Tally = c.cfg.Maps.Tally()
	v.Next = EncodeCursor(page.Next)
	names := make(map[string]bool, len(page.Users))
	ask := url.Values{"user": {""}}
	for _, u := range page.Users {
		names[u.User] = true
		ask.Add("user", u.User)
	}
	parts := []Part{c.Local(LocalQuery{Users: names})}
	answers := askOthers[Part](ctx, c, "/v1/monitor/local?"+ask.Encode(), time.Second)
	for _, ag := range c.cfg.Maps.Agents() {
		if ag.Name == c.cfg.Agent {
			continue
		}
		part, ok := answers[ag.Name]
		c.mu.Lock()
		if ok {
			if c.lastParts == nil {
				c.lastParts = map[string]Part{}
			}
			c.lastParts[ag.Name] = part
		} else {
			v.Unreachable = append(v.Unreachable, ag.Name)
			last := c.lastParts[ag.Name]
			// A copy: the cached part stays as it was read.
			part = Part{Agent: ag.Name, Workers: append([]Worker(nil), last.Workers...), Usage: last.Usage}
			if len(part.Workers) == 0 {
				for id, g := range ag.Workers {
					part.Workers = append(part.Workers, Worker{ID: id, Agent: ag.Name, Group: g})
				}
			}
			for i := range part.Workers {
				if part.Workers[i].State != host.StateRetired {
					part.Workers[i].State = StateUnreachable
				}
			}
		}
		c.mu.Unlock()
		parts = append(parts, part)
	}
	usage := map[string]Person{}
	for _, p := range parts {
		v.Workers = append(v.Workers, p.Workers...)
		for u, x := range p.Usage {
			usage[u] = x
		}
	}
	sort.SliceStable(v.Workers, func(i, j int) bool {
		ri, rj := v.Workers[i].State == host.StateRetired, v.Workers[j].State == host.StateRetired
		if ri != rj {
			return rj
		}
		if v.Workers[i].Agent != v.Workers[j].Agent {
			return v.Workers[i].Agent < v.Workers[j].Agent
		}
		return v.Workers[i].ID < v.Workers[j].ID
	})
	v.People = PeopleOf(page.Users, c.cfg.GroupOf, usage)
	if c.cfg.Windows != nil {
		v.Maintenance = c.cfg.Windows(c.cfg.Maps.Maintenance(), v.Workers)
	}
	if c.cfg.Tenants != nil {
		v.Tenants = c.cfg.Tenants()
	}
	return v, nil
}

// events are governance's recent decisions, none without governance.
func (c *Cluster) events() []governor.Event {
	if c.cfg.Events == nil {
		return nil
	}
	return c.cfg.Events()
}

// Workers is GET /v1/workers: this agent's workers (retired slots
// included, as []host.WorkerInfo) and, unless local, those of every other
// agent in the maps, as each answers GET /v1/workers?local=true within
// 2 s; an agent that does not answer has its registered workers listed as
// unreachable. So `stickyd worker list` through a server that runs no
// worker lists the hosts' workers.
func (c *Cluster) Workers(ctx context.Context, local bool) any {
	out := append(c.cfg.Pool.Workers(), c.cfg.Pool.Retired()...)
	if local {
		return out
	}
	agents := c.cfg.Maps.Agents()
	sort.Slice(agents, func(i, j int) bool { return agents[i].Name < agents[j].Name })
	answers := askOthers[[]host.WorkerInfo](ctx, c, "/v1/workers?local=true", 2*time.Second)
	for _, ag := range agents {
		if ag.Name == c.cfg.Agent || len(ag.Workers) == 0 {
			continue
		}
		if ws, ok := answers[ag.Name]; ok {
			out = append(out, ws...)
			continue
		}
		ids := make([]string, 0, len(ag.Workers))
		for id := range ag.Workers {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			out = append(out, host.WorkerInfo{ID: id, Group: ag.Workers[id], State: StateUnreachable})
		}
	}
	return out
}

// Parts asks every other agent in the maps for its part of the monitor
// (GET pathOf(agent) on its admin API), each call bounded by timeout, as
// governance reads them; an agent that did not answer is absent.
func (c *Cluster) Parts(ctx context.Context, pathOf func(agent string) string, timeout time.Duration) map[string]Part {
	return askEach[Part](ctx, c, pathOf, timeout)
}

// askOthers calls GET path on every other agent in the maps at once, each
// call bounded by timeout, and returns the answers decoded as T by agent
// name; an agent that did not answer in time is absent.
func askOthers[T any](ctx context.Context, c *Cluster, path string, timeout time.Duration) map[string]T {
	return askEach[T](ctx, c, func(string) string { return path }, timeout)
}

// askEach is askOthers with a path of each agent's own (pathOf its name).
func askEach[T any](ctx context.Context, c *Cluster, pathOf func(agent string) string, timeout time.Duration) map[string]T {
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		out = map[string]T{}
	)
	for _, ag := range c.cfg.Maps.Agents() {
		if ag.Name == c.cfg.Agent || ag.AdminAddr == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			var v T
			if err := c.cfg.Call(cctx, "GET", ag.AdminAddr, pathOf(ag.Name), nil, &v); err != nil {
				return
			}
			mu.Lock()
			out[ag.Name] = v
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}
