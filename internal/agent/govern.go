package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
)

// governance is pool-wide and leader-only: the raft leader's agent feeds
// the probe readings of every host's workers (its own from its pool, the
// others' from their part of the monitor, GET /v1/monitor/local) to the
// decision engine and carries out its decisions: moves by the one road
// (MoveSet: between workers of any hosts), and, for workers of its own
// host, starts and replacements by adding workers to its pool, drains by
// cordoning, retirements by stopping an empty worker. Any other agent only
// feeds its own workers' readings to its engine, for the monitor's
// saturation and projection, and decides nothing.
type governance struct {
	a   *Agent
	mu  sync.Mutex // guards eng, prev, totals, inFlight and governed
	eng *governor.Engine
	// prev is each worker's previous reading, for its CPU rate; totals
	// each user's running totals at that reading, for their recent use.
	prev     map[string]probed
	totals   map[string]map[string]governor.Totals
	inFlight int
	work     sync.WaitGroup // decisions under way
	// governed names the groups governance acts on.
	governed map[string]bool
}

// wait waits for the decisions under way.
func (g *governance) wait() { g.work.Wait() }

// newGovernance builds the engine with the configured groups' policies.
// Groups that do not enable governance are not governed (a group of the
// catalog may enable it later: setPolicy).
func newGovernance(a *Agent) (*governance, error) {
	policies := map[string]governor.Policy{}
	governed := map[string]bool{}
	for _, g := range a.cfg.Groups {
		if g.Governance == nil || !g.Governance.Enabled {
			continue
		}
		p, err := g.policy()
		if err != nil {
			return nil, fmt.Errorf("group %q: governance: %w", g.Name, err)
		}
		policies[g.Name] = p
		governed[g.Name] = true
	}
	eng, err := governor.New(policies, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed)))
	if err != nil {
		return nil, err
	}
	return &governance{a: a, eng: eng, governed: governed, prev: map[string]probed{}, totals: map[string]map[string]governor.Totals{}}, nil
}

// setPolicy governs a group created at run time.
func (g *governance) setPolicy(gc *GroupConfig) error {
	p, err := gc.policy()
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.eng.SetPolicy(gc.Name, p); err != nil {
		return err
	}
	g.governed[gc.Name] = true
	return nil
}

// run observes every interval until stop, and decides while this agent
// leads with its leader tasks started (server.Leadership): a new leader
// governs from its first round, a former one stops deciding at its next;
// its decisions under way end on the road (a move's barrier is the
// leader's, so a move begun by a former leader fails and is rolled back).
func (g *governance) run(interval time.Duration, stop <-chan struct{}) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var remote remoteUsage // the run loop's own
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			leads := g.a.leadership.Leading()
			var parts map[string]LocalMonitor
			if leads {
				// Outside the lock: events and the monitor's outlook
				// are read meanwhile.
				ctx, cancel := context.WithTimeout(context.Background(), interval)
				parts = remote.ask(ctx, g.a, interval)
				cancel()
			} else {
				remote = remoteUsage{}
			}
			g.round(time.Now(), leads, parts)
		}
	}
}

// remoteUsage is the other agents' parts of the monitor as the leader last
// read them: each agent is asked only for the people whose totals changed
// since its last answer (?changes=TOKEN), and the part is kept whole here.
type remoteUsage map[string]*LocalMonitor

// ask reads every other agent's part, merging the changes into what it
// kept; an agent that does not answer is left out of the round (its
// workers are not governed until it answers again), and asked for
// everything next time.
func (r *remoteUsage) ask(ctx context.Context, a *Agent, timeout time.Duration) map[string]LocalMonitor {
	if *r == nil {
		*r = remoteUsage{}
	}
	kept := *r
	answers := askEach[LocalMonitor](ctx, a, func(agent string) string {
		path := "/v1/monitor/local?changes="
		if p := kept[agent]; p != nil {
			path += url.QueryEscape(p.Token)
		}
		return path
	}, timeout)
	out := make(map[string]LocalMonitor, len(answers))
	for name, part := range answers {
		if p := kept[name]; part.Changes && p != nil {
			maps.Copy(p.Usage, part.Usage)
			for _, u := range part.Gone {
				delete(p.Usage, u)
			}
			part.Usage = p.Usage
		} else if part.Usage == nil {
			part.Usage = map[string]monitor.Person{}
		}
		kept[name] = &part
		out[name] = part
	}
	for name := range kept {
		if _, ok := answers[name]; !ok {
			delete(kept, name)
		}
	}
	return out
}

// probed is one worker's last probe answer as governance reads it, from
// this host's pool or another agent's part of the monitor.
type probed struct {
	id, group, agent string
	at               time.Time
	heap             uint64
	cpuSeconds       float64
	goroutines       int
	mailbox          int
	pages            int
	local            bool
	// usage is each person's running totals on the worker.
	usage map[string]governor.Totals
}

// localProbes reads this host's ready workers that answered a probe.
func (g *governance) localProbes() []probed {
	var out []probed
	for _, w := range g.a.pool.Workers() {
		g.a.history.record(w) // every worker's memory, for the monitor's chart
		if w.State != host.StateReady || w.LastProbe.IsZero() {
			continue
		}
		pr := probed{id: w.ID, group: w.Group, agent: g.a.cfg.Name, at: w.LastProbe, heap: w.HeapBytes, cpuSeconds: w.CPUSeconds,
			goroutines: int(w.Goroutines), mailbox: int(w.Mailbox), pages: int(w.Pages), local: true, usage: map[string]governor.Totals{}}
		for u, t := range g.a.pool.Usage(w.ID) {
			pr.usage[u] = governor.Totals{BusySeconds: t.BusySeconds, StateBytes: t.StateBytes, Queued: int(t.Queued)}
		}
		out = append(out, pr)
	}
	return out
}

// remoteProbes reads the ready workers of the other agents' parts of the
// monitor (their hosts' last probe answers and their people's totals; the
// monitor does not carry a person's queued frames).
func remoteProbes(parts map[string]LocalMonitor) []probed {
	var out []probed
	for _, name := range sortedNames(parts) {
		part := parts[name]
		// The people by worker, in one pass over them.
		usage := map[string]map[string]governor.Totals{}
		for u, p := range part.Usage {
			if usage[p.Worker] == nil {
				usage[p.Worker] = map[string]governor.Totals{}
			}
			usage[p.Worker][u] = governor.Totals{BusySeconds: p.BusySeconds, StateBytes: p.StateBytes}
		}
		for _, w := range part.Workers {
			if w.State != host.StateReady || w.LastProbe.IsZero() {
				continue
			}
			pr := probed{id: w.ID, group: w.Group, agent: name, at: w.LastProbe, heap: w.HeapBytes, cpuSeconds: w.CPUSeconds,
				goroutines: int(w.Goroutines), mailbox: int(w.Mailbox), pages: int(w.Pages), usage: usage[w.ID]}
			if pr.usage == nil {
				pr.usage = map[string]governor.Totals{}
			}
			out = append(out, pr)
		}
	}
	return out
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// governCatalogLocked governs the catalog's groups that enable governance,
// whichever hosts run them: the leader decides for every host.
func (g *governance) governCatalogLocked() {
	for name, ge := range g.a.fsm.Catalog().Groups {
		if g.governed[name] || len(ge.Governance) == 0 {
			continue
		}
		var gov GovernanceConfig
		if err := json.Unmarshal(ge.Governance, &gov); err != nil || !gov.Enabled {
			continue
		}
		p, err := (&GroupConfig{Name: name, Workers: ge.Workers, Governance: &gov}).policy()
		if err != nil {
			continue
		}
		if g.eng.SetPolicy(name, p) == nil {
			g.governed[name] = true
		}
	}
}

// round observes this host's workers and, when leads, every other host's
// (parts) too, then decides and carries the decisions out.
func (g *governance) round(now time.Time, leads bool, parts map[string]LocalMonitor) {
	probes := g.localProbes()
	if leads {
		probes = append(probes, remoteProbes(parts)...)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if leads {
		g.governCatalogLocked()
	}
	live := map[string]bool{}
	fresh := make([]probed, 0, len(probes))
	ids := make(map[string]bool, len(probes))
	for _, w := range probes {
		live[w.id] = true
		if !g.governed[w.group] {
			continue
		}
		if p, ok := g.prev[w.id]; ok && !w.at.After(p.at) {
			continue // no new reading since the last round
		}
		fresh = append(fresh, w)
		ids[w.id] = true
	}
	// The people of every worker read, in one pass over the maps.
	people := g.a.fsm.UsersByWorker(ids)
	for _, w := range fresh {
		g.eng.Observe(g.reading(w, people[w.id]))
	}
	for id := range g.prev {
		if !live[id] {
			// Gone, or on another host while this agent no longer leads.
			delete(g.prev, id)
			delete(g.totals, id)
			g.eng.Forget(id)
		}
	}
	if !leads {
		return
	}
	// The round's moves take the road together, one set per cause; the
	// other decisions are carried out one by one.
	moves := map[string][]governor.Decision{}
	moving := map[string]bool{}
	for _, d := range g.eng.Decide(now, g.inFlight) {
		g.a.log.Info("governance", "decision", d.Kind, "reason", d.Reason)
		g.inFlight++
		if d.Kind == governor.KindMove && moving[d.User] {
			// One move per person a round.
			g.inFlight--
			g.eng.Done(d, false, now)
			continue
		}
		g.work.Add(1)
		if d.Kind == governor.KindMove {
			moving[d.User] = true
			moves[d.Cause] = append(moves[d.Cause], d)
			continue
		}
		go func(d governor.Decision) {
			defer g.work.Done()
			ok := g.carryOut(&d)
			g.done(d, ok)
		}(d)
	}
	for cause, ds := range moves {
		go g.moveSet(cause, ds)
	}
}

// done tells the engine how a decision ended.
func (g *governance) done(d governor.Decision, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inFlight--
	g.eng.Done(d, ok, time.Now())
}

// moveSet carries out a round's moves of one cause as one set on the road.
func (g *governance) moveSet(cause string, ds []governor.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	byUser := make(map[string]governor.Decision, len(ds))
	reqs := make([]move.Request, 0, len(ds))
	for _, d := range ds {
		byUser[d.User] = d
		reqs = append(reqs, move.Request{User: d.User, To: d.To})
	}
	told := map[string]bool{}
	g.a.mover.MoveSet(ctx, reqs, move.Options{Reason: cause}, func(r move.Result, err error) {
		d, ok := byUser[r.User]
		if !ok || told[r.User] {
			return
		}
		told[r.User] = true
		if err != nil {
			g.a.log.Warn("governance decision failed", "decision", d.Kind, "user", d.User, "error", err)
		}
		g.done(d, err == nil)
		g.work.Done()
	})
	for u, d := range byUser { // never told (cannot happen): not left in flight
		if !told[u] {
			g.done(d, false)
			g.work.Done()
		}
	}
}

// reading turns a worker's last probe into the engine's reading: CPU as a
// rate since the previous one, and per user what they used in between
// (handler time as CPU, bytes written into their trees as memory growth;
// a person with no earlier reading counts everything they wrote). The
// people are those the maps place on the worker (users).
func (g *governance) reading(w probed, users []string) governor.Reading {
	// Memory is the live heap: RSS keeps pages a worker has freed, so it
	// would not fall when people leave.
	r := governor.Reading{Worker: w.id, Group: w.group, At: w.at, Heap: w.heap,
		Goroutines: w.goroutines, MailboxDepth: w.mailbox, Pages: w.pages, PerUser: map[string]governor.Usage{}}
	var elapsed time.Duration
	if p, seen := g.prev[w.id]; seen {
		elapsed = w.at.Sub(p.at)
		if w.cpuSeconds >= p.cpuSeconds && elapsed > 0 {
			r.CPU = (w.cpuSeconds - p.cpuSeconds) / elapsed.Seconds()
		}
	}
	g.prev[w.id] = w
	before := g.totals[w.id]
	g.totals[w.id] = w.usage
	for _, u := range users {
		var use governor.Usage
		if t, ok := w.usage[u]; ok {
			// A person without an earlier reading counts their whole
			// state as growth (governor.UsageSince).
			var b *governor.Totals
			if x, ok := before[u]; ok {
				b = &x
			}
			use = governor.UsageSince(b, t, elapsed)
		}
		r.PerUser[u] = use
	}
	r.Users = len(r.PerUser)
	return r
}

// local reports whether worker runs on this agent's host.
func (g *governance) local(worker string) bool {
	return g.a.pool.GroupOf(worker) != ""
}

// carryOut does what a decision asks; it reports whether it worked. d.To is
// set for a start or a replacement. A decision about another host's worker
// is carried out by that host's agent (govern_remote.go).
func (g *governance) carryOut(d *governor.Decision) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch d.Kind {
	case governor.KindStart:
		d.To, err = g.start(ctx, d.Group, "")
	case governor.KindReplace:
		// No newcomer lands on the worker being replaced.
		if err = g.cordon(ctx, d.Worker, true); err == nil {
			if d.To, err = g.start(ctx, d.Group, d.Worker); err != nil {
				_ = g.cordon(ctx, d.Worker, false)
			}
		}
	case governor.KindDrain:
		err = g.cordon(ctx, d.Worker, true)
	case governor.KindRetire:
		err = g.retireAnywhere(ctx, d.Worker, d.Reason)
	default:
		err = fmt.Errorf("unknown decision %q", d.Kind)
	}
	if err != nil {
		g.a.log.Warn("governance decision failed", "decision", d.Kind, "worker", d.Worker, "group", d.Group, "user", d.User, "error", err)
		return false
	}
	return true
}

// add starts a worker in the group and records it in the maps, so that
// every server can route to it.
func (g *governance) add(ctx context.Context, group string) (string, error) {
	id, err := g.a.pool.Add(ctx, group)
	if err != nil {
		return "", err
	}
	if err := g.a.register(ctx); err != nil {
		return id, fmt.Errorf("recording worker %s in the maps: %w", id, err)
	}
	return id, nil
}

// retire stops a drained worker. It is refused while the maps still place
// anyone on it or its probe reports a person, a connection or a page.
func (g *governance) retire(ctx context.Context, worker, reason string) error {
	if users := g.a.fsm.UsersOf(worker); len(users) > 0 {
		return fmt.Errorf("retiring %s: %w: the maps still place %d users there", worker, host.ErrNotEmpty, len(users))
	}
	if err := g.a.pool.Retire(ctx, worker, reason); err != nil {
		return err
	}
	return g.a.register(ctx)
}

// events returns the engine's recent events.
func (g *governance) events() []governor.Event {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.eng.Events()
}

// outlook is governance's view of a worker, for the monitor.
func (g *governance) outlook(worker string) (governor.Outlook, bool) {
	if g == nil {
		return governor.Outlook{}, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.eng.Outlook(worker)
}
