// Package governance carries out what the decision engine decides
// (internal/governor, pure: no IO, no goroutine, no clock): it feeds the
// engine the probe readings of the workers, asks it what to do, and does
// it: moves by the one road (internal/move), starts, replacements, drains
// and retirements of workers, on this host's pool or, for another host's
// worker, by asking that host's agent (POST /v1/internal/govern/{op}).
//
// Governance is pool-wide and leader-only: the raft leader's agent feeds
// the engine every host's workers (its own from its pool, the others' from
// their part of the monitor, GET /v1/monitor/local) and carries out its
// decisions. Any other agent only feeds its own workers' readings to its
// engine, for the monitor's saturation and projection, and decides
// nothing. Whether this agent leads is Leadership's answer, read once a
// round: the executor never asks raft itself.
//
// The executor sees the agent only through the small interfaces and func
// fields of Config (the pool, the maps, the mover, the leadership, the
// other agents' admin APIs); it never holds the agent. It is not in
// internal/governor because the engine must stay pure, and because the
// admin API's packages (internal/api, internal/monitor) import the engine.
package governance

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

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Pool is this host's worker pool as governance reads and changes it
// (*host.Pool).
type Pool interface {
	Workers() []host.WorkerInfo
	// Usage is each person's running totals on worker.
	Usage(worker string) map[string]*protocol.UserUsage
	// GroupOf is worker's group, "" when it is not this host's.
	GroupOf(worker string) string
	HasGroup(group string) bool
	Add(ctx context.Context, group string) (string, error)
	Retire(ctx context.Context, worker, reason string) error
	Cordon(worker string, on bool) error
}

// Maps is the replica of the maps governance reads (*fsm.FSM).
type Maps interface {
	UsersByWorker(workers map[string]bool) map[string][]string
	UsersOf(worker string) []string
	Agents() []fsm.AgentEntry
	Catalog() fsm.Catalog
}

// Mover moves people by the one road (*move.Mover): done is called once
// for each request.
type Mover interface {
	MoveSet(ctx context.Context, reqs []move.Request, opt move.Options, done func(move.Result, error))
}

// Leadership says whether this server leads with its leader tasks started
// (*server.Leadership).
type Leadership interface {
	Leading() bool
}

// Part is another agent's part of the monitor as governance reads it (GET
// /v1/monitor/local?changes=TOKEN): its workers with their last probe
// readings and its people's running totals. Token names the answer's
// usage for the next ask; Changes says Usage holds only the people whose
// totals changed since the answer asked about, and Gone the people no
// longer there.
type Part = monitor.Part

// Config is what an Executor is built from. Every field is required but
// Policies, Seen, Rand and Logger.
type Config struct {
	// Agent is this agent's name in the maps.
	Agent string
	// Policies are the policies of the groups governed from the start, by
	// group (SetPolicy governs more).
	Policies   map[string]governor.Policy
	Pool       Pool
	Maps       Maps
	Mover      Mover
	Leadership Leadership
	// Register records this agent's workers in the maps (after a start
	// or a retirement), so that every server can route to them.
	Register func(ctx context.Context) error
	// Parts asks every other agent in the maps for its part of the
	// monitor (GET pathOf(agent) on its admin API), each call bounded by
	// timeout; an agent that did not answer is absent.
	Parts func(ctx context.Context, pathOf func(agent string) string, timeout time.Duration) map[string]Part
	// Post calls POST path on the admin API at admin with body and
	// decodes the answer into out; a refusal is an error carrying the
	// other agent's message.
	Post func(ctx context.Context, admin, path string, body []byte, out any) error
	// Seen is given every worker of this host at every round, for the
	// monitor's memory chart; nil: nobody.
	Seen func(host.WorkerInfo)
	// Rand draws the leavers; nil: seeded from the clock.
	Rand   *rand.Rand
	Logger hclog.Logger
}

// Executor runs governance for one agent: Run observes every interval and,
// while this agent leads, decides and carries the decisions out.
type Executor struct {
	cfg Config
	log hclog.Logger
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

// New builds the engine with the policies of cfg. Groups without a policy
// are not governed (a group of the catalog may enable it later: SetPolicy,
// or its governance block, read by the leader every round).
func New(cfg Config) (*Executor, error) {
	rng := cfg.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed))
	}
	eng, err := governor.New(cfg.Policies, rng)
	if err != nil {
		return nil, err
	}
	governed := map[string]bool{}
	for g := range cfg.Policies {
		governed[g] = true
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.Seen == nil {
		cfg.Seen = func(host.WorkerInfo) {}
	}
	return &Executor{cfg: cfg, log: log, eng: eng, governed: governed, prev: map[string]probed{}, totals: map[string]map[string]governor.Totals{}}, nil
}

// Wait waits for the decisions under way.
func (e *Executor) Wait() { e.work.Wait() }

// SetPolicy governs a group created at run time.
func (e *Executor) SetPolicy(group string, p governor.Policy) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.eng.SetPolicy(group, p); err != nil {
		return err
	}
	e.governed[group] = true
	return nil
}

// Run observes every interval until stop, and decides while this agent
// leads with its leader tasks started (Leadership): a new leader governs
// from its first round, a former one stops deciding at its next; its
// decisions under way end on the road (a move's barrier is the leader's,
// so a move begun by a former leader fails and is rolled back). Wait
// waits for them after Run returns.
func (e *Executor) Run(interval time.Duration, stop <-chan struct{}) {
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
			leads := e.cfg.Leadership.Leading()
			var parts map[string]Part
			if leads {
				// Outside the lock: events and the monitor's outlook
				// are read meanwhile.
				ctx, cancel := context.WithTimeout(context.Background(), interval)
				parts = remote.ask(ctx, e.cfg.Parts, interval)
				cancel()
			} else {
				remote = remoteUsage{}
			}
			e.round(time.Now(), leads, parts)
		}
	}
}

// remoteUsage is the other agents' parts of the monitor as the leader last
// read them: each agent is asked only for the people whose totals changed
// since its last answer (?changes=TOKEN), and the part is kept whole here.
type remoteUsage map[string]*Part

// ask reads every other agent's part, merging the changes into what it
// kept; an agent that does not answer is left out of the round (its
// workers are not governed until it answers again), and asked for
// everything next time.
func (r *remoteUsage) ask(ctx context.Context, parts func(context.Context, func(string) string, time.Duration) map[string]Part, timeout time.Duration) map[string]Part {
	if *r == nil {
		*r = remoteUsage{}
	}
	if parts == nil {
		return nil
	}
	kept := *r
	answers := parts(ctx, func(agent string) string {
		path := "/v1/monitor/local?changes="
		if p := kept[agent]; p != nil {
			path += url.QueryEscape(p.Token)
		}
		return path
	}, timeout)
	out := make(map[string]Part, len(answers))
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
func (e *Executor) localProbes() []probed {
	var out []probed
	for _, w := range e.cfg.Pool.Workers() {
		e.cfg.Seen(w) // every worker's memory, for the monitor's chart
		if w.State != host.StateReady || w.LastProbe.IsZero() {
			continue
		}
		pr := probed{id: w.ID, group: w.Group, agent: e.cfg.Agent, at: w.LastProbe, heap: w.HeapBytes, cpuSeconds: w.CPUSeconds,
			goroutines: int(w.Goroutines), mailbox: int(w.Mailbox), pages: int(w.Pages), local: true, usage: map[string]governor.Totals{}}
		for u, t := range e.cfg.Pool.Usage(w.ID) {
			pr.usage[u] = governor.Totals{BusySeconds: t.BusySeconds, StateBytes: t.StateBytes, Queued: int(t.Queued)}
		}
		out = append(out, pr)
	}
	return out
}

// remoteProbes reads the ready workers of the other agents' parts of the
// monitor (their hosts' last probe answers and their people's totals; the
// monitor does not carry a person's queued frames).
func remoteProbes(parts map[string]Part) []probed {
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
func (e *Executor) governCatalogLocked() {
	for name, ge := range e.cfg.Maps.Catalog().Groups {
		if e.governed[name] || len(ge.Governance) == 0 {
			continue
		}
		var gov GroupConfig
		if err := json.Unmarshal(ge.Governance, &gov); err != nil || !gov.Enabled {
			continue
		}
		p, err := gov.Policy(ge.Workers)
		if err != nil {
			continue
		}
		if e.eng.SetPolicy(name, p) == nil {
			e.governed[name] = true
		}
	}
}

// round observes this host's workers and, when leads, every other host's
// (parts) too, then decides and carries the decisions out.
func (e *Executor) round(now time.Time, leads bool, parts map[string]Part) {
	probes := e.localProbes()
	if leads {
		probes = append(probes, remoteProbes(parts)...)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if leads {
		e.governCatalogLocked()
	}
	live := map[string]bool{}
	fresh := make([]probed, 0, len(probes))
	ids := make(map[string]bool, len(probes))
	for _, w := range probes {
		live[w.id] = true
		if !e.governed[w.group] {
			continue
		}
		if p, ok := e.prev[w.id]; ok && !w.at.After(p.at) {
			continue // no new reading since the last round
		}
		fresh = append(fresh, w)
		ids[w.id] = true
	}
	// The people of every worker read, in one pass over the maps.
	people := e.cfg.Maps.UsersByWorker(ids)
	for _, w := range fresh {
		e.eng.Observe(e.reading(w, people[w.id]))
	}
	for id := range e.prev {
		if !live[id] {
			// Gone, or on another host while this agent no longer leads.
			delete(e.prev, id)
			delete(e.totals, id)
			e.eng.Forget(id)
		}
	}
	if !leads {
		return
	}
	// The round's moves take the road together, one set per cause; the
	// other decisions are carried out one by one.
	moves := map[string][]governor.Decision{}
	moving := map[string]bool{}
	for _, d := range e.eng.Decide(now, e.inFlight) {
		e.log.Info("governance", "decision", d.Kind, "reason", d.Reason)
		e.inFlight++
		if d.Kind == governor.KindMove && moving[d.User] {
			// One move per person a round.
			e.inFlight--
			e.eng.Done(d, false, now)
			continue
		}
		e.work.Add(1)
		if d.Kind == governor.KindMove {
			moving[d.User] = true
			moves[d.Cause] = append(moves[d.Cause], d)
			continue
		}
		go func(d governor.Decision) {
			defer e.work.Done()
			ok := e.carryOut(&d)
			e.done(d, ok)
		}(d)
	}
	for cause, ds := range moves {
		go e.moveSet(cause, ds)
	}
}

// done tells the engine how a decision ended.
func (e *Executor) done(d governor.Decision, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inFlight--
	e.eng.Done(d, ok, time.Now())
}

// moveSet carries out a round's moves of one cause as one set on the road.
func (e *Executor) moveSet(cause string, ds []governor.Decision) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	byUser := make(map[string]governor.Decision, len(ds))
	reqs := make([]move.Request, 0, len(ds))
	for _, d := range ds {
		byUser[d.User] = d
		reqs = append(reqs, move.Request{User: d.User, To: d.To})
	}
	told := map[string]bool{}
	e.cfg.Mover.MoveSet(ctx, reqs, move.Options{Reason: cause}, func(r move.Result, err error) {
		d, ok := byUser[r.User]
		if !ok || told[r.User] {
			return
		}
		told[r.User] = true
		if err != nil {
			e.log.Warn("governance decision failed", "decision", d.Kind, "user", d.User, "error", err)
		}
		e.done(d, err == nil)
		e.work.Done()
	})
	for u, d := range byUser { // never told (cannot happen): not left in flight
		if !told[u] {
			e.done(d, false)
			e.work.Done()
		}
	}
}

// reading turns a worker's last probe into the engine's reading: CPU as a
// rate since the previous one, and per user what they used in between
// (handler time as CPU, bytes written into their trees as memory growth;
// a person with no earlier reading counts everything they wrote). The
// people are those the maps place on the worker (users).
func (e *Executor) reading(w probed, users []string) governor.Reading {
	// Memory is the live heap: RSS keeps pages a worker has freed, so it
	// would not fall when people leave.
	r := governor.Reading{Worker: w.id, Group: w.group, At: w.at, Heap: w.heap,
		Goroutines: w.goroutines, MailboxDepth: w.mailbox, Pages: w.pages, PerUser: map[string]governor.Usage{}}
	var elapsed time.Duration
	if p, seen := e.prev[w.id]; seen {
		elapsed = w.at.Sub(p.at)
		if w.cpuSeconds >= p.cpuSeconds && elapsed > 0 {
			r.CPU = (w.cpuSeconds - p.cpuSeconds) / elapsed.Seconds()
		}
	}
	e.prev[w.id] = w
	before := e.totals[w.id]
	e.totals[w.id] = w.usage
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
func (e *Executor) local(worker string) bool {
	return e.cfg.Pool.GroupOf(worker) != ""
}

// carryOut does what a decision asks; it reports whether it worked. d.To is
// set for a start or a replacement. A decision about another host's worker
// is carried out by that host's agent (remote.go).
func (e *Executor) carryOut(d *governor.Decision) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch d.Kind {
	case governor.KindStart:
		d.To, err = e.start(ctx, d.Group, "")
	case governor.KindReplace:
		// No newcomer lands on the worker being replaced.
		if err = e.cordon(ctx, d.Worker, true); err == nil {
			if d.To, err = e.start(ctx, d.Group, d.Worker); err != nil {
				_ = e.cordon(ctx, d.Worker, false)
			}
		}
	case governor.KindDrain:
		err = e.cordon(ctx, d.Worker, true)
	case governor.KindRetire:
		err = e.retireAnywhere(ctx, d.Worker, d.Reason)
	default:
		err = fmt.Errorf("unknown decision %q", d.Kind)
	}
	if err != nil {
		e.log.Warn("governance decision failed", "decision", d.Kind, "worker", d.Worker, "group", d.Group, "user", d.User, "error", err)
		return false
	}
	return true
}

// add starts a worker in the group and records it in the maps, so that
// every server can route to it.
func (e *Executor) add(ctx context.Context, group string) (string, error) {
	id, err := e.cfg.Pool.Add(ctx, group)
	if err != nil {
		return "", err
	}
	if err := e.cfg.Register(ctx); err != nil {
		return id, fmt.Errorf("recording worker %s in the maps: %w", id, err)
	}
	return id, nil
}

// retire stops a drained worker. It is refused while the maps still place
// anyone on it or its probe reports a person, a connection or a page.
func (e *Executor) retire(ctx context.Context, worker, reason string) error {
	if users := e.cfg.Maps.UsersOf(worker); len(users) > 0 {
		return fmt.Errorf("retiring %s: %w: the maps still place %d users there", worker, host.ErrNotEmpty, len(users))
	}
	if err := e.cfg.Pool.Retire(ctx, worker, reason); err != nil {
		return err
	}
	return e.cfg.Register(ctx)
}

// Events returns the engine's recent events (none before it is built).
func (e *Executor) Events() []governor.Event {
	if e == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eng.Events()
}

// Outlook is governance's view of a worker, for the monitor.
func (e *Executor) Outlook(worker string) (governor.Outlook, bool) {
	if e == nil {
		return governor.Outlook{}, false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.eng.Outlook(worker)
}
