package agent

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
)

// governance feeds the probe readings of this agent's workers to the
// decision engine and carries out its moves by the one road. Only moves
// between running workers are carried out for now; starting, replacing and
// retiring workers are recorded as blocked (the pool's slots are fixed).
type governance struct {
	a   *Agent
	mu  sync.Mutex // guards eng, prev and inFlight
	eng *governor.Engine
	// prev is each worker's previous reading, for its CPU rate.
	prev     map[string]host.WorkerInfo
	inFlight int
	moves    sync.WaitGroup // moves under way
}

// wait waits for the moves under way.
func (g *governance) wait() { g.moves.Wait() }

// newGovernance returns nil when no group enables governance.
func newGovernance(a *Agent) (*governance, error) {
	policies := map[string]governor.Policy{}
	for _, g := range a.cfg.Groups {
		if g.Governance == nil || !g.Governance.Enabled {
			continue
		}
		p := governor.DefaultPolicy()
		gc := g.Governance
		if gc.MemoryLimitMB > 0 {
			t := p.Thresholds[governor.Memory]
			t.Limit = float64(gc.MemoryLimitMB) * (1 << 20)
			p.Thresholds[governor.Memory] = t
		}
		if gc.CPULimit > 0 {
			t := p.Thresholds[governor.CPU]
			t.Limit = gc.CPULimit
			p.Thresholds[governor.CPU] = t
		}
		if gc.MaxConcurrentMoves > 0 {
			p.MaxConcurrentMoves = gc.MaxConcurrentMoves
		}
		if d := duration(gc.UserCoolDown); d > 0 {
			p.UserCoolDown = d
		}
		if d := duration(gc.WorkerCoolDown); d > 0 {
			p.WorkerCoolDown = d
		}
		// The pool cannot add or retire workers yet: no starts, no
		// replacement, no compaction.
		p.MaxWorkers = g.Workers
		p.ReplaceHorizon = 0
		p.CompactBelow = 0
		policies[g.Name] = p
	}
	if len(policies) == 0 {
		return nil, nil
	}
	eng, err := governor.New(policies, rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 0x5eed)))
	if err != nil {
		return nil, err
	}
	return &governance{a: a, eng: eng, prev: map[string]host.WorkerInfo{}}, nil
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
	for _, w := range g.a.pool.Workers() {
		if w.State != host.StateReady || w.LastProbe.IsZero() {
			continue
		}
		if _, governed := g.a.cfg.group(w.Group); !governed {
			continue
		}
		// Memory is the live heap: RSS keeps pages a worker has freed, so it
		// would not fall when people leave.
		r := governor.Reading{Worker: w.ID, Group: w.Group, At: w.LastProbe, Heap: w.HeapBytes,
			Goroutines: int(w.Goroutines), MailboxDepth: int(w.Mailbox), Pages: int(w.Pages), PerUser: map[string]governor.Usage{}}
		if p, ok := g.prev[w.ID]; ok && w.LastProbe.After(p.LastProbe) && w.CPUSeconds >= p.CPUSeconds {
			r.CPU = (w.CPUSeconds - p.CPUSeconds) / w.LastProbe.Sub(p.LastProbe).Seconds()
		}
		g.prev[w.ID] = w
		for _, u := range g.a.fsm.UsersOf(w.ID) {
			r.PerUser[u] = governor.Usage{}
		}
		r.Users = len(r.PerUser)
		g.eng.Observe(r)
	}
	for _, d := range g.eng.Decide(now, g.inFlight) {
		if d.Kind != governor.KindMove {
			g.a.log.Info("governance decision not carried out: the pool's workers are fixed", "kind", d.Kind, "reason", d.Reason)
			g.eng.Done(d, false, now)
			continue
		}
		g.a.log.Info("governance", "decision", d.Reason)
		g.inFlight++
		g.moves.Add(1)
		go func(d governor.Decision) {
			defer g.moves.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err := g.a.sup.Move(ctx, d.User, d.To, d.Cause)
			cancel()
			g.mu.Lock()
			defer g.mu.Unlock()
			g.inFlight--
			g.eng.Done(d, err == nil, time.Now())
		}(d)
	}
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
