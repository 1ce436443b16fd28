package groups

import (
	"sort"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
)

// entry is a configured group as the catalog would hold it. Without a
// runtime, a builtin runs as RuntimeBuiltin and a plugin command or a
// bundle as RuntimeGoPlugin.
func (g Group) entry() fsm.GroupEntry {
	e := fsm.GroupEntry{Name: g.Group, Workers: g.Workers, Builtin: g.Builtin, Runtime: g.Runtime, MemoryMaxMB: g.MemoryMaxMB,
		Bundle: g.Bundle, Limits: g.Limits, Command: g.Command, Args: g.Args}
	if e.Runtime == "" {
		e.Runtime = RuntimeGoPlugin
		if g.Builtin != "" {
			e.Runtime = RuntimeBuiltin
		}
	}
	return e
}

// View composes GET /v1/groups: the configured and catalog groups with
// their workers and people, the default, the rules.
func (k *Keeper) View() api.GroupsView {
	cat := k.cfg.Maps.Catalog()
	v := api.GroupsView{Default: k.cfg.Directory.DefaultGroup(), Rules: cat.Rules}
	workers := map[string][]string{}
	for _, w := range k.cfg.Pool.Workers() {
		workers[w.Group] = append(workers[w.Group], w.ID)
	}
	for _, ag := range k.cfg.Maps.Agents() {
		if ag.Name == k.cfg.Agent {
			continue
		}
		for w, g := range ag.Workers {
			workers[g] = append(workers[g], w)
		}
	}
	ready := map[string]bool{}
	if k.cfg.Ready != nil {
		for _, w := range k.cfg.Ready() {
			ready[w] = true
		}
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
			Users: k.cfg.Directory.GroupUsers(e.Name), Default: e.Name == v.Default, Previous: e.Name == cat.Previous})
	}
	for _, g := range k.cfg.Configured {
		add(g.entry(), "config")
	}
	for _, name := range cat.GroupNames() {
		if !k.configured(name) {
			add(*cat.Groups[name], "catalog")
		}
	}
	return v
}
