package governor

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// hotWorker is a worker over (or still shedding on) one resource.
type hotWorker struct {
	w     *worker
	res   Resource
	level float64
	th    Threshold
}

// saturate decides, for group g, one move out of each worker that is hot on
// some resource, or a start when no worker has room.
//
// A worker turns hot on a resource when a reading puts it over the high mark
// and cools when one puts it under the low mark (Observe); while hot it gives
// up one user per round, and rests WorkerCoolDown after each move completes.
func (e *Engine) saturate(rd *round, g string, out []Decision) []Decision {
	p := e.policy(g)
	var hot []hotWorker
	for _, w := range e.workersOf(g) {
		if !w.available(rd.now, p) {
			continue
		}
		h, ok := w.hottest(p)
		if !ok {
			w.note = ""
			continue
		}
		hot = append(hot, h)
	}
	// The most saturated first: the road's budget goes where it is most needed.
	sort.SliceStable(hot, func(i, j int) bool {
		return hot[i].level-hot[i].th.High > hot[j].level-hot[j].th.High
	})

	for _, h := range hot {
		w := h.w
		if from, to := e.movesTouching(w.name); from+to > 0 || w.coolUntil.After(rd.now) {
			continue // rate limit: it just gave or received users
		}
		if rd.moves >= p.MaxConcurrentMoves {
			break
		}
		over := h.explain()
		if !e.anyFree(w, rd.now) {
			e.block(rd, w, "no-leaver", fmt.Sprintf("%s but none of its %s can leave now (recently moved, moving, or not named in its reading)", over, count(w.last.Users, "user")))
			continue
		}
		to, why := e.saturationTarget(rd, g, w, h.res, p)
		if to == nil {
			if ok, cannot := e.canStart(rd, g, p); ok {
				n := e.size(g)
				bound := "no max"
				if p.MaxWorkers > 0 {
					bound = fmt.Sprintf("max %d", p.MaxWorkers)
				}
				out = e.issue(rd, Decision{
					Kind: KindStart, Group: g, Cause: CauseSaturation,
					Reason: fmt.Sprintf("%s and no other worker of %s has room (%s): start a worker (%d → %d, %s)",
						over, g, why, n, n+1, bound),
				}, out)
				e.group(g).starting++
				w.note = "no-room:" + alreadyStarting // what the next rounds would say
			} else {
				e.block(rd, w, "no-room:"+cannot, fmt.Sprintf("%s but no other worker of %s has room (%s) and %s", over, g, why, cannot))
			}
			continue
		}
		waited := w.unseen[h.res]
		if waited > 0 && waited <= p.UsageWait {
			// The level shows before the people's numbers do (a heap
			// jump a probe sees before the accounting of who grew):
			// drawing now would pick at random.
			e.block(rd, w, "usage-wait:"+h.res.String(), fmt.Sprintf("%s but %s: waiting up to %s for its people's numbers to show who it is before drawing who leaves",
				over, w.unshown(h.res), count(p.UsageWait, "reading")))
			continue
		}
		unshown := w.unshown(h.res)
		user, share, total, _ := e.pickLeaver(w, h.res, rd.now) // anyFree: there is one
		used := fmt.Sprintf("used %s of %s's %s", pct(share), w.name, consumption(h.res))
		switch {
		case total == 0:
			used = fmt.Sprintf("drawn uniformly: nobody on %s had %s", w.name, consumption(h.res))
			if waited > 0 {
				used += fmt.Sprintf(" after %s", count(waited-1, "reading"))
			}
		case waited > 0:
			used += fmt.Sprintf(", though %s after %s", unshown, count(waited-1, "reading"))
		}
		lv, _, _ := to.level(h.res, p)
		out = e.issue(rd, Decision{
			Kind: KindMove, Group: g, Worker: w.name, User: user, To: to.name, Cause: CauseSaturation,
			Reason: fmt.Sprintf("%s: moving %s to %s (%s; %s at %s %s)", over, user, to.name, used, to.name, h.res, pct(lv)),
		}, out)
		w.note = ""
	}
	return out
}

// hottest returns the hot resource of w furthest over its high mark.
func (w *worker) hottest(p Policy) (hotWorker, bool) {
	var best hotWorker
	found := false
	for i, res := range allResources {
		if !w.hot[i] {
			continue
		}
		lv, th, ok := w.level(res, p)
		if !ok {
			continue
		}
		if !found || lv-th.High > best.level-best.th.High {
			best, found = hotWorker{w: w, res: res, level: lv, th: th}, true
		}
	}
	return best, found
}

// explain says why h sheds users, with the numbers.
func (h hotWorker) explain() string {
	amount := fmt.Sprintf("%s of %s", quantity(h.res, h.w.last.value(h.res)), quantity(h.res, h.th.Limit))
	if h.level > h.th.High {
		return fmt.Sprintf("%s over %s %s > %s (%s)", h.w.name, h.res, pct(h.level), pct(h.th.High), amount)
	}
	return fmt.Sprintf("%s %s %s (%s) still above its low mark %s since going over %s",
		h.w.name, h.res, pct(h.level), amount, pct(h.th.Low), pct(h.th.High))
}

// saturationTarget returns the least saturated worker of g, other than from,
// with room and free to receive (for res, then overall), or nil and why
// each worker was refused.
func (e *Engine) saturationTarget(rd *round, g string, from *worker, res Resource, p Policy) (*worker, string) {
	var ok []*worker
	var refused []string
	for _, w := range e.workersOf(g) {
		if w == from {
			continue
		}
		switch f, t := e.movesTouching(w.name); {
		case !w.fresh(rd.now, p):
			refused = append(refused, w.name+" silent")
		case w.drain != nil || w.retiring:
			refused = append(refused, w.name+" draining")
		case f+t > 0 || w.coolUntil.After(rd.now):
			refused = append(refused, w.name+" cooling down")
		default:
			if r, lv, th, crowded := w.crowded(p); crowded {
				refused = append(refused, fmt.Sprintf("%s %s %s ≥ %s", w.name, r, pct(lv), pct(th.Low)))
				continue
			}
			ok = append(ok, w)
		}
	}
	if len(ok) == 0 {
		if len(refused) == 0 {
			return nil, "it is alone"
		}
		return nil, strings.Join(refused, ", ")
	}
	sort.SliceStable(ok, func(i, j int) bool {
		li, _, _ := ok[i].level(res, p)
		lj, _, _ := ok[j].level(res, p)
		if li != lj {
			return li < lj
		}
		pi, _ := ok[i].peak(p)
		pj, _ := ok[j].peak(p)
		return pi < pj
	})
	return ok[0], ""
}

// alreadyStarting is why no second worker is started while one is.
const alreadyStarting = "a worker is already starting"

// canStart reports whether saturation may start a worker in g now, or why not.
func (e *Engine) canStart(rd *round, g string, p Policy) (bool, string) {
	gs := e.group(g)
	if gs.starting > 0 || len(gs.expected) > 0 {
		return false, alreadyStarting
	}
	if gs.startRetry.After(rd.now) {
		return false, fmt.Sprintf("the last start failed: next try at %s", gs.startRetry.Format("15:04:05"))
	}
	if n := e.size(g); p.MaxWorkers > 0 && n >= p.MaxWorkers {
		return false, fmt.Sprintf("the group is at its max of %d workers", p.MaxWorkers)
	}
	return true, ""
}

// anyFree reports whether some user of w is free to move: not cooling down,
// not moving.
func (e *Engine) anyFree(w *worker, now time.Time) bool {
	for u := range w.last.PerUser {
		if !e.userFree[u].After(now) && !e.moving(u) {
			return true
		}
	}
	return false
}

// pickLeaver draws the user who leaves w because of res: at random, in
// proportion to what each user consumed of res recently (worker.weight), among the users
// free to move (not cooling down, not moving). It returns the user, their
// share of w's whole consumption and that whole (0 when nobody consumed
// anything: the draw is then uniform).
func (e *Engine) pickLeaver(w *worker, res Resource, now time.Time) (user string, share, total float64, ok bool) {
	names := sortedKeys(w.last.PerUser)
	var free []string
	var freeTotal float64
	for _, u := range names {
		wt := w.weight(u, res)
		total += wt
		if e.userFree[u].After(now) || e.moving(u) {
			continue
		}
		free = append(free, u)
		freeTotal += wt
	}
	if len(free) == 0 {
		return "", 0, total, false
	}
	if freeTotal > 0 {
		x := e.rng.Float64() * freeTotal
		for _, u := range free {
			wt := w.weight(u, res)
			if wt <= 0 {
				continue
			}
			user = u
			if x < wt {
				break
			}
			x -= wt
		}
	} else {
		user = free[e.rng.IntN(len(free))]
	}
	if total > 0 {
		share = w.weight(user, res) / total
	}
	return user, share, total, true
}
