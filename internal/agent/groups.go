package agent

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/protocol"
)

// templateDirEnv names a group's template directory in its workers'
// environment; the SDK reads it (worker.TemplateDirEnv).
const templateDirEnv = "STICKYD_TEMPLATE_DIR"

// recipe is what runs a group's workers, wherever the group was defined.
type recipe struct {
	Group string
	// Runtime is RuntimePython3 for a WSGI app; otherwise what is set
	// (builtin, bundle or command) says how the workers run.
	Runtime string
	Builtin string
	Command string
	Args    []string
	Env     map[string]string
	Bundle  string
	// PlainChannel turns the worker channel's AutoMTLS off
	// (plugin.plain_channel).
	PlainChannel bool
}

// launcher builds the launcher of a recipe: a builtin application in
// process, a go-plugin binary (from a bundle, or a command), or a WSGI
// application in the Python worker.
func (a *Agent) launcher(r recipe) (host.Launcher, error) {
	switch {
	case r.Runtime == RuntimePython3:
		return a.pythonLauncher(r)
	case r.Builtin != "":
		b, ok := a.builtins[r.Builtin]
		if !ok {
			return nil, fmt.Errorf("no builtin application named %q", r.Builtin)
		}
		return &host.InprocLauncher{Serve: b}, nil
	case r.Bundle != "":
		return a.bundleLauncher(r)
	case r.Command != "":
		return &host.PluginLauncher{Command: r.Command, Args: r.Args, Env: a.workerEnv(r), PlainChannel: r.PlainChannel, Logger: a.log.Named("plugin")}, nil
	}
	return nil, fmt.Errorf("no runtime: set a bundle, a command or a builtin")
}

// workerEnv is what a plugin worker of the recipe gets in its environment:
// the recipe's variables, and the group's template directory (where an
// application with an engine build step keeps its frozen image, so that the
// group builds it once; docs/templates.md) unless the recipe sets one.
func (a *Agent) workerEnv(r recipe) []string {
	env := make([]string, 0, len(r.Env)+1)
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	if _, ok := r.Env[templateDirEnv]; !ok {
		root := filepath.Join(os.TempDir(), "stickyd-templates", a.cfg.Name)
		if a.cfg.DataDir != "" {
			root = filepath.Join(a.cfg.DataDir, "templates")
		}
		env = append(env, templateDirEnv+"="+filepath.Join(root, r.Group))
	}
	sort.Strings(env)
	return env
}

// groupSpec is a group as this agent's host runs it.
func (a *Agent) groupSpec(name string, workers, memoryMaxMB int, limits *fsm.GroupLimits, l host.Launcher) host.GroupSpec {
	spec := host.GroupSpec{Name: name, Workers: workers, MemoryMax: uint64(memoryMaxMB) << 20, Launcher: l,
		CheckpointInterval: a.checkpointInterval(name)}
	if limits != nil {
		spec.Limits = &protocol.WorkerLimits{MaxPageBytes: limits.MaxPageBytes, MaxPersonBytes: limits.MaxPersonBytes,
			MaxPagesPerConn: limits.MaxPagesPerConn, MaxPagesPerPerson: limits.MaxPagesPerPerson}
	}
	if a.cfg.clustered() {
		spec.Prefix = a.cfg.Name + "."
	}
	return spec
}

func (a *Agent) cfgHasGroup(group string) bool {
	for _, g := range a.cfg.Groups {
		if g.Name == group {
			return true
		}
	}
	return false
}

// catalogLoop keeps this agent's pool in step with the catalog: a group
// created in the catalog starts here, a retired one stops.
func (a *Agent) catalogLoop(stop <-chan struct{}) {
	for {
		changed := a.fsm.WatchCatalog()
		select {
		case <-stop:
			return
		case <-changed:
		case <-time.After(15 * time.Second): // retry what failed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		a.syncGroups(ctx)
		cancel()
	}
}

// syncGroups starts the catalog's groups this agent does not run yet and
// stops those the catalog no longer has. Failures are logged and retried.
func (a *Agent) syncGroups(ctx context.Context) {
	a.groupsMu.Lock()
	defer a.groupsMu.Unlock()
	if a.catalogGroups == nil {
		a.catalogGroups = map[string]bool{}
	}
	cat := a.fsm.Catalog()
	changed := false
	for _, name := range cat.GroupNames() {
		g := cat.Groups[name]
		if a.cfgHasGroup(name) || a.pool.HasGroup(name) || !a.cfg.runsCatalogGroup(name) {
			continue
		}
		if err := a.startGroup(ctx, g); err != nil {
			a.log.Error("starting a group of the catalog", "group", name, "error", err)
			continue
		}
		a.catalogGroups[name] = true
		changed = true
	}
	for name := range a.catalogGroups {
		if _, ok := cat.Groups[name]; ok {
			continue
		}
		if err := a.pool.RemoveGroup(ctx, name, "group "+name+" retired"); err != nil {
			a.log.Error("stopping a retired group", "group", name, "error", err)
			continue
		}
		delete(a.catalogGroups, name)
		a.log.Info("group retired", "group", name)
		changed = true
	}
	if changed {
		if err := a.register(ctx); err != nil {
			a.log.Error("recording this agent's workers", "error", err)
		}
	}
}

func (a *Agent) startGroup(ctx context.Context, g *fsm.GroupEntry) error {
	l, err := a.launcher(recipe{Group: g.Name, Runtime: g.Runtime, Builtin: g.Builtin, Command: g.Command, Args: g.Args, Env: g.Env, Bundle: g.Bundle})
	if err != nil {
		return err
	}
	var gov *GovernanceConfig
	if len(g.Governance) > 0 {
		gov = &GovernanceConfig{}
		if err := json.Unmarshal(g.Governance, gov); err != nil {
			return fmt.Errorf("decoding its governance: %w", err)
		}
	}
	a.log.Info("starting a group of the catalog", "group", g.Name, "workers", g.Workers, "runtime", g.Runtime)
	if err := a.pool.AddGroup(ctx, a.groupSpec(g.Name, g.Workers, g.MemoryMaxMB, g.Limits, l)); err != nil {
		return err
	}
	if gov != nil && gov.Enabled && a.govern != nil {
		p, err := gov.Policy(g.Workers)
		if err == nil {
			err = a.govern.SetPolicy(g.Name, p)
		}
		if err != nil {
			a.log.Error("governing a group of the catalog", "group", g.Name, "error", err)
		}
	}
	return nil
}

// bundleLauncher opens a group's bundle from the archive (through the local
// cache: verified, unpacked read-only) and runs its entry point with the
// manifest's arguments. Nothing is installed or built: a bundle that is not
// in the archive, or fails verification, is refused with the reason.
func (a *Agent) bundleLauncher(r recipe) (host.Launcher, error) {
	if a.bundles == nil {
		return nil, fmt.Errorf("bundle %s: this agent has no bundles block naming an archive", r.Bundle)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o, err := a.bundles.Open(ctx, r.Bundle)
	if err != nil {
		return nil, err
	}
	if rt := o.Manifest.Runtime; rt != "" && rt != "go-plugin" {
		return nil, fmt.Errorf("bundle %s needs runtime %q; this agent runs go-plugin bundles", r.Bundle, rt)
	}
	env := append(a.workerEnv(r), "STICKYD_BUNDLE="+o.Digest)
	a.log.Info("running a bundle", "bundle", o.Digest, "name", o.Manifest.Name, "version", o.Manifest.Version, "entry", o.EntryPath())
	return &host.PluginLauncher{Command: o.EntryPath(), Args: append(append([]string(nil), o.Manifest.Args...), r.Args...), Env: env,
		PlainChannel: r.PlainChannel, Logger: a.log.Named("plugin")}, nil
}

// openBundles prepares the bundle cache of the configuration's archive.
func openBundles(cfg *Config) (*bundle.Cache, error) {
	b := cfg.Bundles
	if b == nil {
		return nil, nil
	}
	tok := b.Token
	if tok == "" {
		tok = os.Getenv("STICKYD_BUNDLE_TOKEN")
	}
	ar, err := bundle.OpenArchive(b.Archive, bundle.ArchiveOptions{ReadOnly: true, Token: tok})
	if err != nil {
		return nil, fmt.Errorf("bundles: %w", err)
	}
	dir := b.CacheDir
	switch {
	case dir != "":
	case cfg.DataDir != "":
		dir = filepath.Join(cfg.DataDir, "bundles")
	default:
		dir = filepath.Join(os.TempDir(), "stickyd-bundles")
	}
	return &bundle.Cache{Dir: dir, Archive: ar}, nil
}

// groupsView composes GET /v1/groups: the configured and catalog groups
// with their workers and people, the default, the rules.
func (a *Agent) groupsView() api.GroupsView {
	cat := a.fsm.Catalog()
	v := api.GroupsView{Default: a.sup.DefaultGroup(), Rules: cat.Rules}
	workers := map[string][]string{}
	for _, w := range a.pool.Workers() {
		workers[w.Group] = append(workers[w.Group], w.ID)
	}
	for _, ag := range a.fsm.Agents() {
		if ag.Name == a.cfg.Name {
			continue
		}
		for w, g := range ag.Workers {
			workers[g] = append(workers[g], w)
		}
	}
	ready := map[string]bool{}
	for _, w := range a.router.Ready() {
		ready[w] = true
	}
	add := func(e fsm.GroupEntry, source string) {
		ids := workers[e.Name]
		sort.Strings(ids)
		n := 0
		for _, id := range ids {
			if ready[id] {
				n++
			}
		}
		v.Groups = append(v.Groups, api.GroupInfo{GroupEntry: e, Source: source, WorkerIDs: ids, Ready: n,
			Users: a.sup.GroupUsers(e.Name), Default: e.Name == v.Default, Previous: e.Name == cat.Previous})
	}
	for _, g := range a.cfg.Groups {
		e := fsm.GroupEntry{Name: g.Name, Workers: g.Workers, Builtin: g.Builtin, Runtime: RuntimeBuiltin, MemoryMaxMB: g.MemoryMaxMB, Bundle: g.Bundle, Limits: g.limits()}
		switch {
		case g.Plugin != nil:
			e.Runtime, e.Command, e.Args = cmp.Or(g.Plugin.Runtime, RuntimeGoPlugin), g.Plugin.Command, g.Plugin.Args
		case g.Bundle != "":
			e.Runtime = RuntimeGoPlugin
		}
		add(e, "config")
	}
	for _, name := range cat.GroupNames() {
		if !a.cfgHasGroup(name) {
			add(*cat.Groups[name], "catalog")
		}
	}
	return v
}

// checkBundle makes sure a bundle a new group names is in the archive and
// verifies (it is unpacked into the cache on the way).
func (a *Agent) checkBundle(ctx context.Context, digest string) error {
	if a.bundles == nil {
		return fmt.Errorf("this agent has no bundles block naming an archive")
	}
	o, err := a.bundles.Open(ctx, digest)
	if err != nil {
		return err
	}
	if rt := o.Manifest.Runtime; rt != "" && rt != "go-plugin" {
		return fmt.Errorf("bundle %s needs runtime %q; agents run go-plugin bundles", digest, rt)
	}
	return nil
}
