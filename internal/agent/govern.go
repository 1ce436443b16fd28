package agent

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/protocol"
)

// governance feeds the probe readings of this agent's workers to the
// decision engine and carries out its decisions: moves by the one road,
// starts and replacements by adding workers to the pool, drains by
// cordoning, retirements by stopping an empty worker.
type governance struct {
	a   *Agent
	mu  sync.Mutex // guards eng, prev, totals and inFlight
	eng *governor.Engine
	// prev is each worker's previous reading, for its CPU rate; totals
	// each user's running totals at that reading, for their recent use.
	prev     map[string]host.WorkerInfo
	totals   map[string]map[string]*protocol.UserUsage
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
	return &governance{a: a, eng: eng, governed: governed, prev: map[string]host.WorkerInfo{}, totals: map[string]map[string]*protocol.UserUsage{}}, nil
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

// run observes and decides every interval until stop.
func (g *governance) run(interval time.Duration, stop <-chan struct{}) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			g.round(time.Now())
		}
	}
}

func (g *governance) round(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	live := map[string]bool{}
	for _, w := range g.a.pool.Workers() {
		live[w.ID] = true
		g.a.history.record(w) // every worker's memory, for the monitor's chart
		if w.State != host.StateReady || w.LastProbe.IsZero() {
			continue
		}
		if !g.governed[w.Group] {
			continue
		}
		if p, ok := g.prev[w.ID]; ok && !w.LastProbe.After(p.LastProbe) {
			continue // no new reading since the last round
		}
		g.eng.Observe(g.reading(w))
	}
	for id := range g.prev {
		if !live[id] {
			delete(g.prev, id)
			delete(g.totals, id)
		}
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
// a person with no earlier reading counts everything they wrote).
func (g *governance) reading(w host.WorkerInfo) governor.Reading {
	// Memory is the live heap: RSS keeps pages a worker has freed, so it
	// would not fall when people leave.
	r := governor.Reading{Worker: w.ID, Group: w.Group, At: w.LastProbe, Heap: w.HeapBytes,
		Goroutines: int(w.Goroutines), MailboxDepth: int(w.Mailbox), Pages: int(w.Pages), PerUser: map[string]governor.Usage{}}
	var elapsed float64
	p, seen := g.prev[w.ID]
	if seen {
		elapsed = w.LastProbe.Sub(p.LastProbe).Seconds()
		if w.CPUSeconds >= p.CPUSeconds && elapsed > 0 {
			r.CPU = (w.CPUSeconds - p.CPUSeconds) / elapsed
		}
	}
	g.prev[w.ID] = w
	now := g.a.pool.Usage(w.ID)
	before := g.totals[w.ID]
	g.totals[w.ID] = now
	for _, u := range g.a.fsm.UsersOf(w.ID) {
		var use governor.Usage
		if t := now[u]; t != nil {
			// A person without an earlier reading counts their whole
			// state as growth (governor.UsageSince).
			var b *governor.Totals
			if x := before[u]; x != nil {
				b = &governor.Totals{BusySeconds: x.BusySeconds, StateBytes: x.StateBytes}
			}
			use = governor.UsageSince(b, governor.Totals{BusySeconds: t.BusySeconds, StateBytes: t.StateBytes, Queued: int(t.Queued)},
				time.Duration(elapsed*float64(time.Second)))
		}
		r.PerUser[u] = use
	}
	r.Users = len(r.PerUser)
	return r
}

// carryOut does what a decision asks; it reports whether it worked. d.To is
// set for a start or a replacement.
func (g *governance) carryOut(d *governor.Decision) bool {
	a := g.a
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	switch d.Kind {
	case governor.KindStart:
		d.To, err = g.add(ctx, d.Group)
	case governor.KindReplace:
		// No newcomer lands on the worker being replaced.
		if err = a.pool.Cordon(d.Worker, true); err == nil {
			if d.To, err = g.add(ctx, d.Group); err != nil {
				_ = a.pool.Cordon(d.Worker, false)
			}
		}
	case governor.KindDrain:
		err = a.pool.Cordon(d.Worker, true)
	case governor.KindRetire:
		err = g.retire(ctx, d.Worker, d.Reason)
	default:
		err = fmt.Errorf("unknown decision %q", d.Kind)
	}
	if err != nil {
		a.log.Warn("governance decision failed", "decision", d.Kind, "worker", d.Worker, "user", d.User, "error", err)
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
