package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/front"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
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

// ForgetConfig is what a Forgetter is built from.
type ForgetConfig struct {
	// After is lifecycle.forget_after; 0: this agent forgets nobody (it
	// still stamps who its front saw, for the agents that do).
	After time.Duration
	// Activity is this agent's front's record of who it saw; nil without
	// a front.
	Activity   *front.Activity
	Supervisor *supervisor.Supervisor
	// Pool is this agent's workers; nil forgets nobody.
	Pool  *host.Pool
	Mover *move.Mover
	// DiskFull reports whether the data directory is full: the stamps
	// wait for room (nil: never full).
	DiskFull func() bool
	// Registry is where the stickyd_lifecycle_* metrics are registered.
	Registry prometheus.Registerer
	Logger   hclog.Logger
}

// Forgetter stamps who this agent's front saw and forgets the people (and
// connections) of this agent's workers nobody saw for forget_after.
type Forgetter struct {
	cfg ForgetConfig
	log hclog.Logger
	// stamped is when each person was last written as seen by this
	// front, so that a person seen all day costs one entry an interval;
	// stampedConns the same for their connections. Run's goroutine owns
	// both.
	stamped, stampedConns map[string]time.Time

	stampedTotal        prometheus.Counter
	forgottenTotal      prometheus.Counter
	refusedTotal        prometheus.Counter
	connsForgottenTotal prometheus.Counter
}

// NewForgetter builds a Forgetter and registers its metrics; it does
// nothing until Run.
func NewForgetter(cfg ForgetConfig) (*Forgetter, error) {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	f := &Forgetter{cfg: cfg, log: log, stamped: map[string]time.Time{}, stampedConns: map[string]time.Time{},
		stampedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_seen_stamped_total",
			Help: "People this agent's front wrote into the maps as seen (lifecycle.forget_after)."}),
		forgottenTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_forgotten_total",
			Help: "People this agent forgot because no front saw them for lifecycle.forget_after."}),
		refusedTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_forget_refused_total",
			Help: "People due to be forgotten whom the maps kept (moving, or moved meanwhile); tried again at the next look."}),
		connsForgottenTotal: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_lifecycle_connections_forgotten_total",
			Help: "Connections this agent forgot because no front saw them for lifecycle.forget_after while their person was seen on another."}),
	}
	if cfg.Registry != nil {
		for _, c := range []prometheus.Collector{f.stampedTotal, f.forgottenTotal, f.refusedTotal, f.connsForgottenTotal} {
			if err := cfg.Registry.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return f, nil
}

// every is how often the forgetter stamps and looks: a tenth of
// forget_after, within 250 ms and 10 minutes (10 minutes when off: the
// front still says who it saw, for agents that do forget).
func (f *Forgetter) every() time.Duration {
	if f.cfg.After <= 0 {
		return 10 * time.Minute
	}
	return min(max(f.cfg.After/10, 250*time.Millisecond), 10*time.Minute)
}

// Run stamps and looks until stop closes; it returns once the look under
// way has ended.
func (f *Forgetter) Run(stop <-chan struct{}) {
	ticking(stop, f.every(), func(ctx context.Context) {
		f.stamp(ctx, time.Now())
		if f.cfg.After > 0 && f.cfg.Pool != nil {
			f.sweep(ctx, time.Now())
		}
	})
}

// stamp writes the people this front saw since the last stamp as seen at
// now, skipping those written less than an interval ago.
func (f *Forgetter) stamp(ctx context.Context, now time.Time) {
	if f.cfg.Activity == nil {
		return
	}
	if f.cfg.DiskFull != nil && f.cfg.DiskFull() {
		// The stamps can wait for room: the reserve is raft's for the
		// writes that cannot (those seen meanwhile stay in Activity).
		return
	}
	sup := f.cfg.Supervisor
	var users, conns []string
	for _, c := range f.cfg.Activity.Take() {
		rt, ok := sup.Lookup(c)
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
	if err := sup.Seen(ctx, now, users, conns); err != nil {
		// Not written: tried again at the next interval.
		for _, u := range users {
			delete(f.stamped, u)
		}
		for _, c := range conns {
			delete(f.stampedConns, c)
		}
		f.log.Warn("recording who was seen", "people", len(users), "connections", len(conns), "error", err)
		return
	}
	f.stampedTotal.Add(float64(len(users)))
}

// connsOf is how many connections the maps bind to user.
func (f *Forgetter) connsOf(user string) int {
	u, _ := f.cfg.Supervisor.User(user)
	return u.Conns
}

// sweep forgets the people of this agent's workers not seen for
// forget_after; a person the maps hold no time for (they came before the
// maps kept one, or their first stamp is on its way) is stamped now
// instead.
func (f *Forgetter) sweep(ctx context.Context, now time.Time) {
	sup := f.cfg.Supervisor
	mine := map[string]bool{}
	for _, w := range f.cfg.Pool.Workers() {
		mine[w.ID] = true
	}
	if len(mine) == 0 {
		return
	}
	var unstamped, gone []string
	for _, u := range sup.UsersHomedOn(mine) {
		switch {
		case u.State == placement.StateMoving:
		case u.Seen == 0:
			unstamped = append(unstamped, u.User)
		case now.Sub(time.Unix(u.Seen, 0)) >= f.cfg.After:
			gone = append(gone, u.User)
		}
	}
	if len(unstamped) > 0 {
		if err := sup.Seen(ctx, now, unstamped, nil); err != nil {
			f.log.Warn("recording people with no time as seen now", "people", len(unstamped), "error", err)
		}
	}
	f.sweepConns(ctx, now, mine, gone)
	if len(gone) == 0 {
		return
	}
	forgotten := 0
	f.cfg.Mover.Forget(ctx, gone, func(r move.Forgotten, err error) {
		if err != nil {
			f.refusedTotal.Inc()
			f.log.Debug("forgetting a person not seen", "user", r.User, "error", err)
			return
		}
		forgotten++
	})
	f.forgottenTotal.Add(float64(forgotten))
	f.log.Info("forgot people no front saw", "forgotten", forgotten, "of", len(gone), "forget_after", f.cfg.After)
}

// sweepConns forgets the connections of this agent's people that no front
// saw for forget_after while the person was seen on another (a browser
// gone for good, a cookie past its life replaced by a new one): removed
// from the maps in batched entries, then let go by the person's worker.
// The people being forgotten whole (gone) are left to that; connections
// never stamped are stamped now.
func (f *Forgetter) sweepConns(ctx context.Context, now time.Time, mine map[string]bool, gone []string) {
	sup := f.cfg.Supervisor
	stale, unstamped := sup.StaleConns(mine, now.Add(-f.cfg.After))
	if len(unstamped) > 0 {
		if err := sup.Seen(ctx, now, nil, unstamped); err != nil {
			f.log.Warn("recording connections with no time as seen now", "connections", len(unstamped), "error", err)
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
	forgotten, err := sup.ForgetConns(ctx, now.Add(-f.cfg.After), stale)
	if err != nil {
		f.log.Warn("forgetting connections no front saw", "connections", len(stale), "error", err)
	}
	f.connsForgottenTotal.Add(float64(len(forgotten)))
	// Their workers let them go, with their pages.
	var calls []*channel.Call
	for _, fc := range forgotten {
		c, err := f.cfg.Pool.Send(ctx, fc.Worker, &protocol.Frame{User: fc.User, Conn: fc.Conn,
			Kind: &protocol.Frame_Release{Release: &protocol.Release{}}})
		if err != nil {
			f.log.Debug("releasing a forgotten connection", "conn", fc.Conn, "worker", fc.Worker, "error", err)
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
		f.log.Info("forgot connections no front saw", "forgotten", len(forgotten), "of", len(stale), "forget_after", f.cfg.After)
	}
}

// ForgetLoggedOut forgets a person the site asked to forget (a logout):
// worker is the one that asked. A person on the move is forgotten once
// settled, within a minute.
func ForgetLoggedOut(sup *supervisor.Supervisor, log hclog.Logger, worker, user string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		_, err := sup.ForgetUser(ctx, user)
		if errors.Is(err, fsm.ErrBusy) && ctx.Err() == nil {
			time.Sleep(250 * time.Millisecond) // moving: forgotten once settled
			continue
		}
		if err != nil {
			log.Warn("forgetting a person the site logged out", "user", user, "worker", worker, "error", err)
			return
		}
		break
	}
	log.Debug("forgot a person the site logged out", "user", user, "worker", worker)
}
