package lifecycle

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// Idle parking (lifecycle.idle_park): a person of this agent's workers who
// sent no frame for that long is parked by the one road, to their own
// worker, which lets them go and frees their memory; their next frame wakes
// them there from their package, as after a restart. A person is idle when
// their worker's probes show their frame count unchanged, with nothing in
// their mailbox, over probes idle_park apart (the time is the probes', so a
// person typing between two probes is never taken for idle).

// IdleConfig is what an IdleParker is built from.
type IdleConfig struct {
	// Idle is lifecycle.idle_park (0: off but for the groups that set
	// their own).
	Idle time.Duration
	// Groups overrides Idle for the groups that set their own idle_park
	// (0: off for that group).
	Groups map[string]time.Duration

	Pool       *host.Pool
	Supervisor *supervisor.Supervisor
	Mover      *move.Mover
	Park       park.Store
	// DiskFull reports whether the data directory is full: a parked
	// package needs the disk, so nobody is parked meanwhile (nil: never).
	DiskFull func() bool
	Logger   hclog.Logger
}

// IdleParker parks the people idle past their group's idle_park.
type IdleParker struct {
	cfg IdleConfig
	log hclog.Logger
	// seen is each person's frame count as last seen, and since when;
	// Run's goroutine owns it while it runs.
	seen map[string]idleMark
}

type idleMark struct {
	worker string
	frames uint64
	since  time.Time
}

// NewIdleParker builds an IdleParker; it parks nobody until Run.
func NewIdleParker(cfg IdleConfig) *IdleParker {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	return &IdleParker{cfg: cfg, log: log, seen: map[string]idleMark{}}
}

// On reports whether any group parks idle people: an IdleParker that is
// not on need not run.
func (p *IdleParker) On() bool {
	on := p.cfg.Idle > 0
	for _, d := range p.cfg.Groups {
		on = on || d > 0
	}
	return on
}

// idleOf is the idle_park of a worker of group (0: off).
func (p *IdleParker) idleOf(group string) time.Duration {
	if d, ok := p.cfg.Groups[group]; ok {
		return d
	}
	return p.cfg.Idle
}

// every is how often the parker looks: a quarter of the shortest
// idle_park, within 250 ms and a minute.
func (p *IdleParker) every() time.Duration {
	shortest := p.cfg.Idle
	for _, d := range p.cfg.Groups {
		if d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	return min(max(shortest/4, 250*time.Millisecond), time.Minute)
}

// Run looks for idle people and parks them until stop closes; it returns
// once the set it was parking is on the road no more.
func (p *IdleParker) Run(stop <-chan struct{}) {
	ticking(stop, p.every(), func(ctx context.Context) {
		if p.cfg.DiskFull != nil && p.cfg.DiskFull() {
			return // a parked package needs the disk
		}
		if reqs := p.due(); len(reqs) > 0 {
			p.park(ctx, reqs)
		}
	})
}

// due lists the people idle past idle_park, and updates what was seen.
func (p *IdleParker) due() []move.Request {
	var reqs []move.Request
	here := map[string]bool{}
	probed := map[string]time.Time{}
	groupOf := map[string]string{}
	for _, w := range p.cfg.Pool.Workers() {
		probed[w.ID], groupOf[w.ID] = w.LastProbe, w.Group
	}
	for _, w := range p.cfg.Pool.Ready() {
		at := probed[w]
		if at.IsZero() {
			continue // not probed yet: nothing is known of anyone's frames
		}
		idle := p.idleOf(groupOf[w])
		if idle <= 0 {
			continue // this group parks nobody
		}
		for user, u := range p.cfg.Pool.Usage(w) {
			here[user] = true
			m, ok := p.seen[user]
			if !ok || m.worker != w || m.frames != u.Frames || u.Queued > 0 {
				p.seen[user] = idleMark{worker: w, frames: u.Frames, since: at}
				continue
			}
			if at.Sub(m.since) < idle {
				continue
			}
			if info, ok := p.cfg.Supervisor.User(user); !ok || info.Worker != w || info.State != placement.StateLive {
				continue
			}
			reqs = append(reqs, move.Request{User: user})
			// Looked at again only after another idle period.
			p.seen[user] = idleMark{worker: w, frames: u.Frames, since: at}
		}
	}
	for user := range p.seen {
		if !here[user] {
			delete(p.seen, user)
		}
	}
	return reqs
}

// park parks reqs by the one road as one set, the worker letting each go.
func (p *IdleParker) park(ctx context.Context, reqs []move.Request) {
	parked := 0
	p.cfg.Mover.MoveSet(ctx, reqs, move.Options{Reason: "idle", Park: true, Evict: true}, func(r move.Result, err error) {
		if err != nil {
			p.log.Debug("parking an idle person", "user", r.User, "error", err)
			return
		}
		parked++
	})
	if err := p.cfg.Park.Sync(); err != nil {
		p.log.Warn("syncing the idle people's packages", "error", err)
	}
	p.log.Debug("parked idle people", "parked", parked, "of", len(reqs), "idle_park", p.cfg.Idle)
}

// lastFrame is when the probes last saw user's frame count change (or
// first saw it), if they did. Read it once the parker has stopped (the
// stop reads it for its order).
func (p *IdleParker) lastFrame(user string) (time.Time, bool) {
	m, ok := p.seen[user]
	return m.since, ok
}
