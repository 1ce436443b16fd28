package governor

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// drainMoves decides, for group g, moves out of the workers being drained
// (replaced or compacted), as many as the road allows. Draining ignores
// WorkerCoolDown (the worker must empty) but not UserCoolDown: it moves
// everyone it can and records (once per set of people) whom it waits for
// and until when, so that a drain never stalls silently.
func (e *Engine) drainMoves(rd *round, g string, out []Decision) []Decision {
	p := e.policy(g)
	for _, w := range e.workersOf(g) {
		d := w.drain
		if d == nil || !d.ready || w.retiring || !w.fresh(rd.now, p) {
			continue
		}
		var cooling []string // barred by UserCoolDown
		blocked := false
		for _, u := range sortedKeys(w.last.PerUser) {
			if e.moving(u) {
				continue
			}
			if e.userFree[u].After(rd.now) {
				cooling = append(cooling, u)
				continue
			}
			if rd.moves >= p.MaxConcurrentMoves {
				return out // the road is full: the next round goes on
			}
			to, why := e.drainTarget(rd, g, w, p)
			if to == nil {
				e.block(rd, w, "drain:"+why, fmt.Sprintf("%s: cannot move %s out: %s", drainLabel(w), u, why))
				blocked = true
				break
			}
			peak, res := to.peak(p)
			out = e.issue(rd, Decision{
				Kind: KindMove, Group: g, Worker: w.name, User: u, To: to.name, Cause: d.cause,
				Reason: fmt.Sprintf("%s (%s left): moving %s to %s (its highest resource: %s %s)",
					drainLabel(w), count(w.last.Users, "user"), u, to.name, res, pct(peak)),
			}, out)
			w.note = ""
		}
		if len(cooling) > 0 && !blocked {
			e.waitCooling(rd, w, cooling, p)
		}
	}
	return out
}

// waitCooling records that the drain of w waits for users barred by the
// user cool-down: who, and until when.
func (e *Engine) waitCooling(rd *round, w *worker, users []string, p Policy) {
	const shown = 5
	var who []string
	last := time.Time{}
	for i, u := range users {
		until := e.userFree[u]
		last = laterOf(last, until)
		if i < shown {
			who = append(who, fmt.Sprintf("%s until %s", u, until.Format("15:04:05")))
		}
	}
	if len(users) > shown {
		who = append(who, fmt.Sprintf("and %d more", len(users)-shown))
	}
	e.block(rd, w, "drain-wait:"+strings.Join(users, ","),
		fmt.Sprintf("%s: waiting for %s moved lately (user_cool_down %s): %s; the drain ends by %s (in %s)",
			drainLabel(w), count(len(users), "user"), dur(p.UserCoolDown), strings.Join(who, ", "),
			last.Format("15:04:05"), dur(last.Sub(rd.now))))
}

// drainLabel says why w is being emptied.
func drainLabel(w *worker) string {
	if w.drain.cause == CauseReplace {
		if w.drain.fresh != "" {
			return fmt.Sprintf("replacing %s by %s", w.name, w.drain.fresh)
		}
		return "replacing " + w.name
	}
	return fmt.Sprintf("draining %s for compaction", w.name)
}

// drainTarget returns where the next user of the draining worker from goes:
// the replacement worker while it has room, otherwise the worker of g with
// room that is receiving the fewest moves and is least saturated. It
// returns nil and why when there is none yet.
func (e *Engine) drainTarget(rd *round, g string, from *worker, p Policy) (*worker, string) {
	if name := from.drain.fresh; name != "" {
		f := e.workers[name]
		switch {
		case f == nil && rd.now.Sub(from.drain.since) < p.StartGrace:
			return nil, fmt.Sprintf("waiting for the first reading of %s", name)
		case f != nil && f.group == g && f.available(rd.now, p):
			if _, _, _, crowded := f.crowded(p); !crowded {
				return f, ""
			}
		}
	}
	var ok []*worker
	for _, w := range e.workersOf(g) {
		if w == from || !w.available(rd.now, p) {
			continue
		}
		if _, _, _, crowded := w.crowded(p); !crowded {
			ok = append(ok, w)
		}
	}
	if len(ok) == 0 {
		return nil, fmt.Sprintf("no worker of %s has every resource under its low mark", g)
	}
	incoming := func(w *worker) int { _, to := e.movesTouching(w.name); return to }
	sort.SliceStable(ok, func(i, j int) bool {
		if a, b := incoming(ok[i]), incoming(ok[j]); a != b {
			return a < b
		}
		pi, _ := ok[i].peak(p)
		pj, _ := ok[j].peak(p)
		if pi != pj {
			return pi < pj
		}
		return ok[i].last.Users < ok[j].last.Users
	})
	return ok[0], ""
}

// retire decides, for group g, to retire each draining worker whose reading,
// taken after its drain began, shows it empty: 0 users, 0 pages, 0 grants.
// Nothing else is ever retired.
func (e *Engine) retire(rd *round, g string, out []Decision) []Decision {
	p := e.policy(g)
	for _, w := range e.workersOf(g) {
		d := w.drain
		if d == nil || !d.ready || w.retiring || w.retryAt.After(rd.now) || !w.fresh(rd.now, p) {
			continue
		}
		if !w.last.At.After(d.since) || !w.last.empty() {
			continue
		}
		if from, to := e.movesTouching(w.name); from+to > 0 {
			continue
		}
		why := "its drain for compaction"
		if d.cause == CauseReplace {
			why = "its replacement"
			if d.fresh != "" {
				why += " by " + d.fresh
			}
		}
		n := len(e.workersOf(g))
		out = e.issue(rd, Decision{
			Kind: KindRetire, Group: g, Worker: w.name, Cause: d.cause,
			Reason: fmt.Sprintf("%s is empty (%d users, %d pages, %d grants at %s) after %s: retire it (%s %d → %d workers)",
				w.name, w.last.Users, w.last.Pages, w.last.Grants, w.last.At.Format("15:04:05"), why, g, n, n-1),
		}, out)
		w.retiring = true
	}
	return out
}

// quietest reports whether group g is quiet enough to think of compaction:
// nothing starting, more than MinWorkers (and at least two) workers, every
// one fresh, in service and under CompactBelow of every watched limit. It
// returns the busiest worker's highest level, for the reason.
func (e *Engine) quietest(rd *round, g string, ws []*worker, p Policy) (top *worker, level float64, res Resource, quiet bool) {
	gs := e.group(g)
	if gs.starting > 0 || len(gs.expected) > 0 || len(ws) <= max(p.MinWorkers, 1) {
		return nil, 0, 0, false
	}
	for _, w := range ws {
		if !w.available(rd.now, p) {
			return nil, 0, 0, false
		}
		lv, r := w.peak(p)
		if lv >= p.CompactBelow {
			return nil, 0, 0, false
		}
		if top == nil || lv > level {
			top, level, res = w, lv, r
		}
	}
	return top, level, res, true
}

// compact decides, for group g, to drain its least loaded worker when every
// worker has been under CompactBelow of every watched limit for
// CompactAfter, and the group has more than MinWorkers (and at least two)
// workers. Nothing is compacted while a drain, a start or a stale reading
// leaves the picture unsure.
func (e *Engine) compact(rd *round, g string, out []Decision) []Decision {
	p := e.policy(g)
	gs := e.group(g)
	if p.CompactBelow <= 0 {
		return out
	}
	ws := e.workersOf(g)
	top, topLevel, topRes, quiet := e.quietest(rd, g, ws, p)
	if !quiet {
		gs.lowSince = time.Time{}
		return out
	}
	if gs.lowSince.IsZero() {
		gs.lowSince = rd.now
	}
	low := rd.now.Sub(gs.lowSince)
	if low < p.CompactAfter {
		return out
	}
	least := ws[0] // fewest users, then lowest peak, then first by name
	for _, w := range ws[1:] {
		a, _ := w.peak(p)
		b, _ := least.peak(p)
		if w.last.Users < least.last.Users || w.last.Users == least.last.Users && a < b {
			least = w
		}
	}
	leastLevel, leastRes := least.peak(p)
	out = e.issue(rd, Decision{
		Kind: KindDrain, Group: g, Worker: least.name, Cause: CauseCompact,
		Reason: fmt.Sprintf("%s: all %d workers under %s of every limit for %s (highest: %s %s %s): draining %s, the least loaded (%s, %s %s), to go %d → %d workers (min %d)",
			g, len(ws), pct(p.CompactBelow), dur(low), top.name, topRes, pct(topLevel),
			least.name, count(least.last.Users, "user"), leastRes, pct(leastLevel), len(ws), len(ws)-1, p.MinWorkers),
	}, out)
	least.drain = &drain{cause: CauseCompact}
	gs.lowSince = time.Time{}
	return out
}
