package agent

import (
	"fmt"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/groups"
	"github.com/stickyd/stickyd/internal/host"
)

// Runtimes a group's recipe may name (fsm.GroupEntry.Runtime); package
// groups owns them.
const (
	RuntimeGoPlugin = groups.RuntimeGoPlugin
	RuntimeBuiltin  = groups.RuntimeBuiltin
	RuntimePython3  = groups.RuntimePython3
)

// newLaunchers opens the bundle archive and prepares what builds the
// groups' launchers, from the configuration and the builtins.
func (a *Agent) newLaunchers(builtins map[string]Builtin) (*groups.Launchers, error) {
	var src *groups.BundleSource
	if b := a.cfg.Bundles; b != nil {
		src = &groups.BundleSource{Archive: b.Archive, Token: b.Token, CacheDir: b.CacheDir}
	}
	bundles, err := groups.OpenBundles(src, a.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if a.cfg.clustered() {
		prefix = a.cfg.Name + "."
	}
	return groups.NewLaunchers(groups.LaunchersConfig{Agent: a.cfg.Name, DataDir: a.cfg.DataDir, PythonSDK: a.cfg.PythonSDK,
		WorkerPrefix: prefix, Builtins: builtins, Bundles: bundles, CheckpointInterval: a.checkpointInterval, Logger: a.log}), nil
}

// configuredGroups are the configuration's groups as package groups takes
// them.
func configuredGroups(c *Config) []groups.Group {
	out := make([]groups.Group, 0, len(c.Groups))
	for _, g := range c.Groups {
		r := groups.Recipe{Group: g.Name, Builtin: g.Builtin, Bundle: g.Bundle, Env: g.Env}
		if p := g.Plugin; p != nil {
			r.Runtime, r.Command, r.Args, r.Env, r.PlainChannel = p.Runtime, p.Command, p.Args, p.Env, p.PlainChannel
			r.Interpreter = p.Interpreter
			if p.Template != nil {
				r.TemplateBuild = p.Template.Build
			}
		}
		out = append(out, groups.Group{Recipe: r, Workers: g.Workers, MemoryMaxMB: g.MemoryMaxMB, Limits: g.limits()})
	}
	return out
}

// configuredSpecs are the configuration's groups as the pool runs them
// from the start.
func (a *Agent) configuredSpecs() ([]host.GroupSpec, error) {
	var specs []host.GroupSpec
	for _, g := range configuredGroups(a.cfg) {
		l, err := a.launchers.Launcher(g.Recipe)
		if err != nil {
			return nil, fmt.Errorf("group %q: %w", g.Group, err)
		}
		specs = append(specs, a.launchers.Spec(g.Group, g.Workers, g.MemoryMaxMB, g.Limits, l))
	}
	return specs, nil
}

// groupsView is GET /v1/groups. It reads a.groups when called: the
// handlers wired before the keeper exists see it once it does.
func (a *Agent) groupsView() api.GroupsView { return a.groups.View() }
