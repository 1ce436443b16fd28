package consul

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// DefaultPublishInterval is how often a Publisher writes what changed when
// PublisherConfig.Interval is zero.
const DefaultPublishInterval = 250 * time.Millisecond

// Maps is what a Publisher reads of the replicated maps (*fsm.FSM).
type Maps interface {
	// TakeChanges returns the index the maps are at and the people who
	// changed since the previous call; all asks for everyone instead.
	TakeChanges() (index uint64, users map[string]*placement.UserInfo, all bool)
	// Users lists everyone the maps place.
	Users() []placement.UserInfo
	// AgentOf is the agent that registered worker.
	AgentOf(worker string) (fsm.AgentEntry, bool)
	// TornDown says the deployment is being taken apart.
	TornDown() (time.Time, bool)
}

var _ Maps = (*fsm.FSM)(nil)

// PublisherConfig is what a Publisher reads the placement registry from.
type PublisherConfig struct {
	// Maps are the replicated maps.
	Maps Maps
	// Client is the consul block's client, nil while there is none: it
	// is asked at each tick, so a client made late is used once made.
	Client func() *Client
	// GroupOf is the group of a worker anywhere in the cluster, "" when
	// unknown.
	GroupOf func(worker string) string
	// LocalGroupOf is the group of one of this agent's own workers, ""
	// for any other: a worker no agent registered but this agent runs is
	// placed on Name.
	LocalGroupOf func(worker string) string
	// Name is this agent's name.
	Name string
	// GroupsView is the groups as GET /v1/groups shows them; each becomes
	// its registry entry.
	GroupsView func() api.GroupsView
	// Interval is the time between two writes (zero: DefaultPublishInterval).
	Interval time.Duration
	Logger   hclog.Logger
}

// Publisher publishes the placement registry to Consul KV while this
// server leads: who is where, the groups, and the raft index it is as of.
// It only copies the maps out; it never writes to them.
type Publisher struct {
	cfg PublisherConfig
}

// NewPublisher prepares a Publisher; Run publishes.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPublishInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Publisher{cfg: cfg}
}

// Run publishes until stop closes: a leader task, stop closes when the
// term ends. Each tick writes the people who changed since the last
// (Mirror's Sync); a new term (a new Run), or a failed write, publishes
// everything once. Nothing is written once the deployment is torn down:
// the tear-down empties the prefix.
func (p *Publisher) Run(stop <-chan struct{}) {
	var (
		m        *Mirror
		failures int
	)
	reg := mapsRegistry{p}
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if _, torn := p.cfg.Maps.TornDown(); torn {
			continue // the tear-down empties the prefix; nothing is written again
		}
		c := p.cfg.Client()
		if c == nil {
			continue
		}
		if m == nil {
			m = NewMirror(c)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := m.Sync(ctx, reg)
		cancel()
		if err != nil {
			if failures%20 == 0 {
				p.cfg.Logger.Warn("publishing the placement registry to Consul", "error", err)
			}
			failures++
			continue
		}
		failures = 0
	}
}

// mapsRegistry is the placement registry as the mirror reads it from the
// maps.
type mapsRegistry struct{ p *Publisher }

var _ Registry = mapsRegistry{}

func (r mapsRegistry) Changes() (uint64, map[string]*User, bool) {
	index, changed, all := r.p.cfg.Maps.TakeChanges()
	if all {
		return index, nil, true
	}
	out := make(map[string]*User, len(changed))
	for name, u := range changed {
		if u == nil {
			out[name] = nil
			continue
		}
		e := r.p.placedUser(*u)
		out[name] = &e
	}
	return index, out, false
}

func (r mapsRegistry) Placement(index uint64) Placement { return r.p.placementSnapshot(index) }

func (r mapsRegistry) Groups() map[string]json.RawMessage { return r.p.groupsJSON() }

// placedUser is where u is, in the registry's words.
func (p *Publisher) placedUser(u placement.UserInfo) User {
	e := User{Worker: u.Worker, Epoch: u.Epoch, State: u.State, Group: p.cfg.GroupOf(u.Worker)}
	if ag, ok := p.cfg.Maps.AgentOf(u.Worker); ok {
		e.Host = ag.Name
	} else if p.cfg.LocalGroupOf(u.Worker) != "" {
		e.Host = p.cfg.Name
	}
	return e
}

// placementSnapshot is the placement registry as of the replica's index.
func (p *Publisher) placementSnapshot(index uint64) Placement {
	out := Placement{Index: index, Users: map[string]User{}, Groups: p.groupsJSON()}
	for _, u := range p.cfg.Maps.Users() {
		out.Users[u.User] = p.placedUser(u)
	}
	return out
}

// groupsJSON is each group's registry entry.
func (p *Publisher) groupsJSON() map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	v := p.cfg.GroupsView()
	for _, g := range v.Groups {
		b, err := json.Marshal(map[string]any{"name": g.Name, "runtime": g.Runtime, "bundle": g.Bundle, "workers": g.Workers,
			"source": g.Source, "default": g.Default, "previous": g.Previous, "users": g.Users, "worker_ids": g.WorkerIDs})
		if err == nil {
			out[g.Name] = b
		}
	}
	return out
}
