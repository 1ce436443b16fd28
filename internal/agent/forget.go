package agent

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/front"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
)

// Forgetting by time (lifecycle.forget_after). Two halves, joined by the
// maps:
//   - every front records who it saw (a request, or a WebSocket open at
//     any moment of the interval) and writes them into the maps as seen
//     now, many people to an entry, each person at most once an interval;
//   - every host looks over the people homed on its workers, and forgets,
//     by the one batched road (move.Mover.Forget), those the maps last saw
//     forget_after ago or more: their connections, their place in the
//     maps, what their worker holds and their parked package.
//
// A person is seen by whichever front they use, and forgotten by the host
// holding them; the time in the maps is at most two intervals old for
// anyone still active, and the interval is a tenth of forget_after, so an
// active person is never taken for gone.
type forgetter struct {
	a     *Agent
	after time.Duration // 0: this agent forgets nobody (it still stamps)
	// activity is this agent's front's; nil without a front.
	activity *front.Activity
	// stamped is when each person was last written as seen by this
	// front, so that a person seen all day costs one entry an interval;
	// stampedConns the same for their connections.
	stamped, stampedConns map[string]time.Time
	wg                    sync.WaitGroup

	stampedTotal        prometheus.Counter
	forgottenTotal      prometheus.Counter
	refusedTotal        prometheus.Counter
	connsForgottenTotal prometheus.Counter
}

func newForgetter(a *Agent, after time.Duration, activity *front.Activity, reg prometheus.Registerer) (*forgetter, error) {
	f := &forgetter{a: a, after: after, activity: activity, stamped: map[string]time.Time{}, stampedConns: map[string]time.Time{},
		stampedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_seen_stamped_total",
			Help: "People this agent's front wrote into the maps as seen (lifecycle.forget_after)."}),
		forgottenTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_forgotten_total",
			Help: "People this agent forgot because no front saw them for lifecycle.forget_after."}),
		refusedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_forget_refused_total",
			Help: "People due to be forgotten whom the maps kept (moving, or moved meanwhile); tried again at the next look."}),
		connsForgottenTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_connections_forgotten_total",
			Help: "Connections this agent forgot because no front saw them for lifecycle.forget_after while their person was seen on another."}),
	}
	for _, c := range []prometheus.Collector{f.stampedTotal, f.forgottenTotal, f.refusedTotal, f.connsForgottenTotal} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// every is how often the forgetter stamps and looks: a tenth of
// forget_after, within 250 ms and 10 minutes (10 minutes when off: the
// front still says who it saw, for agents that do forget).
func (f *forgetter) every() time.Duration {
	if f.after <= 0 {
		return 10 * time.Minute
	}
	return min(max(f.after/10, 250*time.Millisecond), 10*time.Minute)
}

// run stamps and looks until stop closes; the caller has added it to f.wg.
func (f *forgetter) run(stop <-chan struct{}) {
	defer f.wg.Done()
	ticking(stop, f.every(), func(ctx context.Context) {
		f.stamp(ctx, time.Now())
		if f.after > 0 && f.a.pool != nil {
			f.sweep(ctx, time.Now())
		}
	})
}

// ticking calls f every interval until stop closes, with a context that
// ends when it does.
func ticking(stop <-chan struct{}, every time.Duration, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f(ctx)
	}
}

func (f *forgetter) wait() { f.wg.Wait() }

// stamp writes the people this front saw since the last stamp as seen at
// now, skipping those written less than an interval ago.
func (f *forgetter) stamp(ctx context.Context, now time.Time) {
	if f.activity == nil {
		return
	}
	if f.a.disk != nil && f.a.disk.Full() {
		// The stamps can wait for room: the reserve is raft's for the
		// writes that cannot (those seen meanwhile stay in Activity).
		return
	}
	var users, conns []string
	for _, c := range f.activity.Take() {
		rt, ok := f.a.sup.Lookup(c)
		if !ok || rt.User == "" {
			continue
		}
		// A connection's own time matters only beside another of its
		// person's: one alone goes with its person, whose time is kept
		// anyway. So most people cost no connection stamp (a second
		// connection's arrival has the first stamped at the next sweep).
		if at, ok := f.stampedConns[c]; (!ok || now.Sub(at) >= f.every()) && f.connsOf(rt.User) > 1 {
			f.stampedConns[c] = now
			conns = append(conns, c)
		}
		if at, ok := f.stamped[rt.User]; ok && now.Sub(at) < f.every() {
			continue
		}
		f.stamped[rt.User] = now
		users = append(users, rt.User)
	}
	// The record of what was written is bounded by those seen in the
	// last two intervals.
	for _, m := range []map[string]time.Time{f.stamped, f.stampedConns} {
		for k, at := range m {
			if now.Sub(at) >= 2*f.every() {
				delete(m, k)
			}
		}
	}
	if len(users) == 0 && len(conns) == 0 {
		return
	}
	if err := f.a.sup.Seen(ctx, now, users, conns); err != nil {
		// Not written: tried again at the next interval.
		for _, u := range users {
			delete(f.stamped, u)
		}
		for _, c := range conns {
			delete(f.stampedConns, c)
		}
		f.a.log.Warn("recording who was seen", "people", len(users), "connections", len(conns), "error", err)
		return
	}
	f.stampedTotal.Add(float64(len(users)))
}

// connsOf is how many connections the maps bind to user.
func (f *forgetter) connsOf(user string) int {
	u, _ := f.a.sup.User(user)
	return u.Conns
}

// sweep forgets the people of this agent's workers not seen for
// forget_after; a person the maps hold no time for (they came before the
// maps kept one, or their first stamp is on its way) is stamped now
// instead.
func (f *forgetter) sweep(ctx context.Context, now time.Time) {
	mine := map[string]bool{}
	for _, w := range f.a.pool.Workers() {
		mine[w.ID] = true
	}
	if len(mine) == 0 {
		return
	}
	var unstamped, gone []string
	for _, u := range f.a.sup.UsersHomedOn(mine) {
		switch {
		case u.State == placement.StateMoving:
		case u.Seen == 0:
			unstamped = append(unstamped, u.User)
		case now.Sub(time.Unix(u.Seen, 0)) >= f.after:
			gone = append(gone, u.User)
		}
	}
	if len(unstamped) > 0 {
		if err := f.a.sup.Seen(ctx, now, unstamped, nil); err != nil {
			f.a.log.Warn("recording people with no time as seen now", "people", len(unstamped), "error", err)
		}
	}
	f.sweepConns(ctx, now, mine, gone)
	if len(gone) == 0 {
		return
	}
	forgotten := 0
	f.a.mover.Forget(ctx, gone, func(r move.Forgotten, err error) {
		if err != nil {
			f.refusedTotal.Inc()
			f.a.log.Debug("forgetting a person not seen", "user", r.User, "error", err)
			return
		}
		forgotten++
	})
	f.forgottenTotal.Add(float64(forgotten))
	f.a.log.Info("forgot people no front saw", "forgotten", forgotten, "of", len(gone), "forget_after", f.after)
}

// sweepConns forgets the connections of this agent's people that no front
// saw for forget_after while the person was seen on another (a browser
// gone for good, a cookie past its life replaced by a new one): removed
// from the maps in batched entries, then let go by the person's worker.
// The people being forgotten whole (gone) are left to that; connections
// never stamped are stamped now.
func (f *forgetter) sweepConns(ctx context.Context, now time.Time, mine map[string]bool, gone []string) {
	stale, unstamped := f.a.sup.StaleConns(mine, now.Add(-f.after))
	if len(unstamped) > 0 {
		if err := f.a.sup.Seen(ctx, now, nil, unstamped); err != nil {
			f.a.log.Warn("recording connections with no time as seen now", "connections", len(unstamped), "error", err)
		}
	}
	if len(gone) > 0 && len(stale) > 0 {
		whole := make(map[string]bool, len(gone))
		for _, u := range gone {
			whole[u] = true
		}
		keep := stale[:0]
		for _, fc := range stale {
			if !whole[fc.User] {
				keep = append(keep, fc)
			}
		}
		stale = keep
	}
	if len(stale) == 0 {
		return
	}
	forgotten, err := f.a.sup.ForgetConns(ctx, now.Add(-f.after), stale)
	if err != nil {
		f.a.log.Warn("forgetting connections no front saw", "connections", len(stale), "error", err)
	}
	f.connsForgottenTotal.Add(float64(len(forgotten)))
	// Their workers let them go, with their pages.
	var calls []*channel.Call
	for _, fc := range forgotten {
		c, err := f.a.pool.Send(ctx, fc.Worker, &protocol.Frame{User: fc.User, Conn: fc.Conn,
			Kind: &protocol.Frame_Release{Release: &protocol.Release{}}})
		if err != nil {
			f.a.log.Debug("releasing a forgotten connection", "conn", fc.Conn, "worker", fc.Worker, "error", err)
			continue
		}
		calls = append(calls, c)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, c := range calls {
		_, _ = c.Wait(wctx)
	}
	if len(forgotten) > 0 {
		f.a.log.Info("forgot connections no front saw", "forgotten", len(forgotten), "of", len(stale), "forget_after", f.after)
	}
}
