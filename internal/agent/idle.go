package agent

import (
	"context"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
)

// Idle parking (lifecycle.idle_park): a person of this agent's workers who
// sent no frame for that long is parked by the one road, to their own
// worker, which lets them go and frees their memory; their next frame wakes
// them there from their package, as after a restart. A person is idle when
// their worker's probes show their frame count unchanged, with nothing in
// their mailbox, over probes idle_park apart (the time is the probes', so a
// person typing between two probes is never taken for idle).
type idleParker struct {
	a    *Agent
	idle time.Duration
	// groups overrides idle for the groups that set their own idle_park
	// (0: off for that group).
	groups map[string]time.Duration
	// seen is each person's frame count as last seen, and since when.
	seen map[string]idleMark
	wg   sync.WaitGroup
}

type idleMark struct {
	worker string
	frames uint64
	since  time.Time
}

func newIdleParker(a *Agent, idle time.Duration) *idleParker {
	return &idleParker{a: a, idle: idle, seen: map[string]idleMark{}}
}

// idleOf is the idle_park of a worker of group (0: off).
func (p *idleParker) idleOf(group string) time.Duration {
	if d, ok := p.groups[group]; ok {
		return d
	}
	return p.idle
}

// every is how often the parker looks: a quarter of the shortest
// idle_park, within 250 ms and a minute.
func (p *idleParker) every() time.Duration {
	shortest := p.idle
	for _, d := range p.groups {
		if d > 0 && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	return min(max(shortest/4, 250*time.Millisecond), time.Minute)
}

// run looks until stop closes; the caller has added it to p.wg.
func (p *idleParker) run(stop <-chan struct{}) {
	defer p.wg.Done()
	ticking(stop, p.every(), func(ctx context.Context) {
		if p.a.disk != nil && p.a.disk.Full() {
			return // a parked package needs the disk
		}
		if reqs := p.due(); len(reqs) > 0 {
			p.park(ctx, reqs)
		}
	})
}

func (p *idleParker) wait() { p.wg.Wait() }

// due lists the people idle past idle_park, and updates what was seen.
func (p *idleParker) due() []move.Request {
	var reqs []move.Request
	here := map[string]bool{}
	probed := map[string]time.Time{}
	groupOf := map[string]string{}
	for _, w := range p.a.pool.Workers() {
		probed[w.ID], groupOf[w.ID] = w.LastProbe, w.Group
	}
	for _, w := range p.a.pool.Ready() {
		at := probed[w]
		if at.IsZero() {
			continue // not probed yet: nothing is known of anyone's frames
		}
		idle := p.idleOf(groupOf[w])
		if idle <= 0 {
			continue // this group parks nobody
		}
		for user, u := range p.a.pool.Usage(w) {
			here[user] = true
			m, ok := p.seen[user]
			if !ok || m.worker != w || m.frames != u.Frames || u.Queued > 0 {
				p.seen[user] = idleMark{worker: w, frames: u.Frames, since: at}
				continue
			}
			if at.Sub(m.since) < idle {
				continue
			}
			if info, ok := p.a.sup.User(user); !ok || info.Worker != w || info.State != placement.StateLive {
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
func (p *idleParker) park(ctx context.Context, reqs []move.Request) {
	parked := 0
	p.a.mover.MoveSet(ctx, reqs, move.Options{Reason: "idle", Park: true, Evict: true}, func(r move.Result, err error) {
		if err != nil {
			p.a.log.Debug("parking an idle person", "user", r.User, "error", err)
			return
		}
		parked++
	})
	if err := p.a.park.Sync(); err != nil {
		p.a.log.Warn("syncing the idle people's packages", "error", err)
	}
	p.a.log.Debug("parked idle people", "parked", parked, "of", len(reqs), "idle_park", p.idle)
}

// lastFrame is when the probes last saw user's frame count change (or
// first saw it), if they did. Read it once the parker has stopped (the
// stop reads it for its order).
func (p *idleParker) lastFrame(user string) (time.Time, bool) {
	m, ok := p.seen[user]
	return m.since, ok
}
