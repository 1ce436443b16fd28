package lifecycle

import (
	"context"
	"sort"
	"time"

	"github.com/stickyd/stickyd/internal/move"
)

// A host that goes down (a Nomad drain, an allocation stopped or replaced,
// a job update) first moves its people to the same groups' workers on the
// other hosts, hot, by the one road: the barrier holds their frames, the
// package is delivered to the destination's host before the maps point
// there, and they wake there at their next frame. Only whoever cannot be
// moved (no other host, a move that fails) is parked in place, for the
// allocation that replaces this one (same name, same worker ids) to wake.

// rehomeParallel is how many people are on the road at a time on the way
// down (the set's entries carry them together).
const rehomeParallel = 64

// rehome moves users (people living on this agent's workers) to the same
// groups' ready workers on other agents, spreading them by the number of
// people each already holds. It returns whoever it did not move. It uses
// at most half of what is left of ctx, so parking the rest has time too.
func (p *Parker) rehome(ctx context.Context, users []string) (left []string) {
	dests := p.rehomeDestinations()
	if len(dests) == 0 || len(users) == 0 {
		return users
	}
	if d, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
		defer cancel()
	}
	// Load per destination worker: people already there.
	load := map[string]int{}
	for _, u := range p.cfg.Maps.Users() {
		load[u.Worker]++
	}
	pick := func(group string) string {
		best := ""
		for _, w := range dests[group] {
			if best == "" || load[w] < load[best] {
				best = w
			}
		}
		if best != "" {
			load[best]++
		}
		return best
	}
	start := time.Now()
	var reqs []move.Request
	for _, user := range users {
		u, ok := p.cfg.Maps.User(user)
		to := ""
		if ok {
			to = pick(p.cfg.Pool.GroupOf(u.Worker))
		}
		if to == "" {
			left = append(left, user)
			continue
		}
		reqs = append(reqs, move.Request{User: user, To: to})
	}
	moved := 0
	p.cfg.Mover.MoveSet(ctx, reqs, move.Options{Reason: "host-stop", Parallel: rehomeParallel}, func(r move.Result, err error) {
		if err != nil {
			p.log.Warn("moving a person off this host before it stops; parking them here instead", "user", r.User, "to", r.To, "error", err)
			left = append(left, r.User)
			return
		}
		moved++
	})
	keepOrder(left, users)
	p.log.Info("moved people to the groups' other hosts before stopping", "moved", moved, "left", len(left), "took", time.Since(start).Round(time.Millisecond))
	return left
}

// rehomeDestinations lists, per group this agent runs, the ready workers
// of that group on other agents that are not on their way down.
func (p *Parker) rehomeDestinations() map[string][]string {
	mine := map[string]bool{}
	for _, w := range p.cfg.Pool.Workers() {
		mine[w.Group] = true
	}
	ready := map[string]bool{}
	for _, w := range p.cfg.Router.Ready() {
		ready[w] = true
	}
	out := map[string][]string{}
	for _, ag := range p.cfg.Maps.Agents() {
		if ag.Name == p.cfg.Name || ag.Draining {
			continue
		}
		for w, g := range ag.Workers {
			if mine[g] && ready[w] {
				out[g] = append(out[g], w)
			}
		}
	}
	for g := range out {
		sort.Strings(out[g])
	}
	return out
}

// startDraining tells the maps this agent is on its way down, so that no
// newcomer and no move is sent to its workers any more.
func (p *Parker) startDraining(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.cfg.Drain(cctx); err != nil {
		p.log.Warn("marking this agent as draining in the maps", "error", err)
	}
}
