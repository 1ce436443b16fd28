// Package groups owns the groups of workers this agent runs: building the
// launcher of a group's recipe (a builtin, a go-plugin binary, a bundle of
// the archive, a Python WSGI app), keeping the pool in step with the
// replicated catalog's groups, the /v1/groups view and the check of a new
// group's bundle.
//
// It never parses the configuration (the agent passes plain values), never
// writes the maps (the catalog changes through the supervisor; the agent's
// workers are registered through Config.Register), and imports nothing of
// the agent.
package groups

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governance"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
)

// Group is a group of this agent's configuration file: the pool runs it from
// the start, and the catalog's group of the same name is not started here.
type Group struct {
	Recipe
	Workers     int
	MemoryMaxMB int
	// Limits are the group's page bounds; nil for none.
	Limits *fsm.GroupLimits
}

// Directory is what the view reads of the supervisor.
type Directory interface {
	// DefaultGroup is the group a newcomer goes to.
	DefaultGroup() string
	// GroupUsers is how many people the group's workers hold.
	GroupUsers(group string) int
}

// Governor takes the governance policy of a catalog group that enables it
// (*governance.Executor).
type Governor interface {
	SetPolicy(group string, p governor.Policy) error
}

// Config is what a Keeper is built from.
type Config struct {
	// Agent is this agent's name: its own registration in the maps is
	// not read, its pool is.
	Agent string
	// Configured are the groups of the configuration file, in its order.
	Configured []Group
	// Launchers builds the catalog groups' launchers and specs.
	Launchers *Launchers
	// Pool runs the groups' workers on this agent.
	Pool *host.Pool
	// Maps are the replicated maps: the catalog, the agents' workers.
	Maps *fsm.FSM
	// Directory answers the view's default group and people per group.
	Directory Directory
	// Ready lists the ready workers, this agent's and the others'.
	Ready func() []string
	// Runs reports whether this agent runs a catalog group (host.groups,
	// host.enabled); nil runs every one.
	Runs func(group string) bool
	// Register records this agent's workers in the maps, after a group
	// started or stopped here.
	Register func(ctx context.Context) error
	// Governor governs the catalog groups that enable governance; nil
	// governs none.
	Governor Governor
	Logger   hclog.Logger
}

// Keeper keeps this agent's pool in step with the catalog's groups and
// describes every group (GET /v1/groups).
type Keeper struct {
	cfg Config
	// mu guards catalog, and orders the syncs.
	mu sync.Mutex
	// catalog are the groups this agent runs for the catalog (not from its
	// configuration file).
	catalog map[string]bool
}

// New returns the keeper of cfg; Sync and Run start the catalog's groups.
func New(cfg Config) *Keeper {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Keeper{cfg: cfg, catalog: map[string]bool{}}
}

// configured reports whether the configuration file defines the group.
func (k *Keeper) configured(group string) bool {
	for _, g := range k.cfg.Configured {
		if g.Group == group {
			return true
		}
	}
	return false
}

// Run keeps this agent's pool in step with the catalog until stop closes:
// a group created in the catalog starts here, a retired one stops. It syncs
// once as it begins (the catalog may have changed since the agent's Sync),
// then on every change of the catalog. A sync under way when stop closes
// is cancelled, and Run returns once it ended.
func (k *Keeper) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		// Watched before the sync reads the catalog: a change during
		// the sync is not missed.
		changed := k.cfg.Maps.WatchCatalog()
		select {
		case <-stop:
			return
		default:
		}
		sctx, scancel := context.WithTimeout(ctx, 2*time.Minute)
		k.Sync(sctx)
		scancel()
		select {
		case <-stop:
			return
		case <-changed:
		case <-time.After(15 * time.Second): // retry what failed
		}
	}
}

// Sync starts the catalog's groups this agent does not run yet and stops
// those the catalog no longer has. Failures are logged and retried by Run.
func (k *Keeper) Sync(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cat := k.cfg.Maps.Catalog()
	changed := false
	for _, name := range cat.GroupNames() {
		g := cat.Groups[name]
		if k.configured(name) || k.cfg.Pool.HasGroup(name) || (k.cfg.Runs != nil && !k.cfg.Runs(name)) {
			continue
		}
		if err := k.startGroup(ctx, g); err != nil {
			k.cfg.Logger.Error("starting a group of the catalog", "group", name, "error", err)
			continue
		}
		k.catalog[name] = true
		changed = true
	}
	for name := range k.catalog {
		if _, ok := cat.Groups[name]; ok {
			continue
		}
		if err := k.cfg.Pool.RemoveGroup(ctx, name, "group "+name+" retired"); err != nil {
			k.cfg.Logger.Error("stopping a retired group", "group", name, "error", err)
			continue
		}
		delete(k.catalog, name)
		k.cfg.Logger.Info("group retired", "group", name)
		changed = true
	}
	if changed && k.cfg.Register != nil {
		if err := k.cfg.Register(ctx); err != nil {
			k.cfg.Logger.Error("recording this agent's workers", "error", err)
		}
	}
}

// startGroup starts a catalog group's workers here, governed if its
// governance says so.
func (k *Keeper) startGroup(ctx context.Context, g *fsm.GroupEntry) error {
	l, err := k.cfg.Launchers.Launcher(Recipe{Group: g.Name, Runtime: g.Runtime, Interpreter: g.Interpreter, Builtin: g.Builtin, Command: g.Command, Args: g.Args, Env: g.Env, Bundle: g.Bundle})
	if err != nil {
		return err
	}
	var gov *governance.GroupConfig
	if len(g.Governance) > 0 {
		gov = &governance.GroupConfig{}
		if err := json.Unmarshal(g.Governance, gov); err != nil {
			return fmt.Errorf("decoding its governance: %w", err)
		}
	}
	k.cfg.Logger.Info("starting a group of the catalog", "group", g.Name, "workers", g.Workers, "runtime", g.Runtime)
	if err := k.cfg.Pool.AddGroup(ctx, k.cfg.Launchers.Spec(g.Name, g.Workers, g.MemoryMaxMB, g.Limits, l)); err != nil {
		return err
	}
	if gov != nil && gov.Enabled && k.cfg.Governor != nil {
		p, err := gov.Policy(g.Workers)
		if err == nil {
			err = k.cfg.Governor.SetPolicy(g.Name, p)
		}
		if err != nil {
			k.cfg.Logger.Error("governing a group of the catalog", "group", g.Name, "error", err)
		}
	}
	return nil
}
