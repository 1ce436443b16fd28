// Package move is the one road a person takes between workers: barrier up,
// freeze, park, reassign, wake. Rebalancing, replacing, draining, releasing,
// rolling back and returning after a restart all call Move and nothing else;
// there is no direct worker-to-worker transfer.
//
// Move runs on the supervisor (the maps' single writer). It never waits for
// the wake: the person's first frame at the destination wakes them there,
// from the parked package, by the same code whatever parked them.
package move

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
)

// Maps is what a move reads of the placement maps.
type Maps interface {
	User(user string) (placement.UserInfo, bool)
}

// Log writes entries through the replicated log.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Workers is what a move asks of the hosts.
type Workers interface {
	Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error)
	Thaw(ctx context.Context, worker, user string, epoch uint64) error
	Evict(ctx context.Context, worker, user string) error
	Ready() []string
}

// Deliverer is the optional ability of Workers to hand a package to the
// destination's host before the maps point there, so the person wakes
// from it even if the host that froze them is gone by then. A delivery
// that fails rolls the move back.
type Deliverer interface {
	Deliver(ctx context.Context, worker, digest string, pkg []byte) error
}

// Config tunes the road.
type Config struct {
	// FreezeTimeout bounds the freeze: an old worker that has not handed
	// the package over by then has the move rolled back. Default 5 s.
	FreezeTimeout time.Duration
	Logger        hclog.Logger
	Registry      prometheus.Registerer
}

// Mover moves people.
type Mover struct {
	cfg     Config
	maps    Maps
	log     Log
	workers Workers
	store   park.Store
	moves   *prometheus.CounterVec
	seconds prometheus.Histogram
}

// Outcomes of a move, as reported and counted.
const (
	Moved      = "moved"
	RolledBack = "rolled_back"
	StateLost  = "state_lost"
	Failed     = "failed"
)

var (
	// ErrRolledBack is returned when the freeze did not finish in time (or
	// failed) and the person stayed home.
	ErrRolledBack = errors.New("move rolled back: the person stays home")
	// ErrStateLost is returned when the old worker died during the move: the
	// person is reassigned, and their pages restart clean.
	ErrStateLost = errors.New("the old worker died during the move: the person was reassigned without state")
	// ErrBadDestination is returned for a destination that cannot take people.
	ErrBadDestination = errors.New("bad destination")
)

// Result says what a move did.
type Result struct {
	User    string `json:"user"`
	From    string `json:"from"`
	To      string `json:"to"`
	Epoch   uint64 `json:"epoch"`
	Outcome string `json:"outcome"`
	Bytes   int    `json:"bytes"`
	Conns   int    `json:"conns"`
	Pages   int    `json:"pages"`
	Package string `json:"package,omitempty"`
	// Freeze is how long the old worker took to hand the person over.
	Freeze time.Duration `json:"freeze_ns"`
	// Duration runs from barrier up to reassignment. The wake, on the
	// person's next frame at the new home, comes after it.
	Duration time.Duration `json:"duration_ns"`
}

// New returns a Mover.
func New(cfg Config, maps Maps, log Log, workers Workers, store park.Store) *Mover {
	if cfg.FreezeTimeout <= 0 {
		cfg.FreezeTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	m := &Mover{cfg: cfg, maps: maps, log: log, workers: workers, store: store}
	m.moves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_move_moves_total",
		Help: "Moves of a person between workers, by reason and outcome.",
	}, []string{"reason", "outcome"})
	m.seconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stickyd_move_duration_seconds",
		Help:    "Time from barrier up to reassignment.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(m.moves, m.seconds)
	}
	return m
}

// Move takes user to the worker to, for reason (counted in metrics: "admin",
// "drain", ...). Frames of the person that arrive meanwhile wait on the
// barrier. On success the person is parked at to and wakes at their next
// frame. The error says which clear outcome happened otherwise: nothing
// changed (bad input, busy), ErrRolledBack, or ErrStateLost.
func (m *Mover) Move(ctx context.Context, user, to, reason string) (Result, error) {
	return m.travel(ctx, user, to, reason, false, m.cfg.FreezeTimeout)
}

// Park takes the same road with the person's own worker as the destination:
// the person ends parked where they live and wakes there, by the same code,
// at their next frame — after a restart of the whole agent included. An
// agent going down parks everyone this way, then makes all the packages
// durable at once with the store's Sync before it names its park folder.
func (m *Mover) Park(ctx context.Context, user string) (Result, error) {
	return m.ParkWithin(ctx, user, m.cfg.FreezeTimeout)
}

// ParkWithin is Park with freeze as the freeze's bound instead of the
// configured one: a stop retries, with a longer bound, the people whose
// freeze ran out (a large page on a busy machine).
func (m *Mover) ParkWithin(ctx context.Context, user string, freeze time.Duration) (Result, error) {
	u, ok := m.maps.User(user)
	if !ok {
		return Result{User: user, Outcome: Failed}, fmt.Errorf("parking %q: %w", user, fsm.ErrNoUser)
	}
	return m.travel(ctx, user, u.Worker, "park", true, freeze)
}

func (m *Mover) travel(ctx context.Context, user, to, reason string, parking bool, freeze time.Duration) (res Result, err error) {
	start := time.Now()
	res = Result{User: user, To: to, Outcome: Failed}
	defer func() {
		res.Duration = time.Since(start)
		m.moves.WithLabelValues(reason, res.Outcome).Inc()
		if res.Outcome == Moved {
			m.seconds.Observe(res.Duration.Seconds())
		}
	}()
	u, ok := m.maps.User(user)
	if !ok {
		return res, fmt.Errorf("moving %q: %w", user, fsm.ErrNoUser)
	}
	res.From = u.Worker
	if u.Worker == to && !parking {
		return res, fmt.Errorf("moving %q: %w: they already live on %s", user, ErrBadDestination, to)
	}
	if !parking && !contains(m.workers.Ready(), to) {
		return res, fmt.Errorf("moving %q: %w: worker %q is not ready", user, ErrBadDestination, to)
	}
	if err := m.apply(ctx, fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: user, From: u.Worker, To: to, Epoch: u.Epoch}); err != nil {
		return res, fmt.Errorf("moving %q: raising the barrier: %w", user, err)
	}
	epoch := u.Epoch + 1
	res.Epoch = epoch

	// Freeze: the old worker runs what is already in the person's mailbox
	// (a wake included), then hands over everything and refuses the rest. A
	// parked person the worker never woke is absent there: their parked
	// package stays the truth.
	var digest string
	fctx, cancel := context.WithTimeout(ctx, freeze)
	fstart := time.Now()
	fz, err := m.workers.Freeze(fctx, u.Worker, user, epoch)
	res.Freeze = time.Since(fstart)
	cancel()
	switch {
	case err != nil && isWorkerGone(err):
		m.cfg.Logger.Warn("worker died during a move; reassigning without state", "user", user, "from", u.Worker, "error", err)
		if cerr := m.apply(ctx, fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: user, To: to, Epoch: epoch, Now: time.Now().UnixNano()}); cerr != nil {
			return res, fmt.Errorf("moving %q: reassigning after the old worker died: %w", user, cerr)
		}
		res.Outcome = StateLost
		return res, fmt.Errorf("moving %q: %w (%v)", user, ErrStateLost, err)
	case err != nil:
		return res, m.rollback(ctx, &res, u.Worker, user, epoch, fmt.Errorf("freezing: %w", err))
	}
	res.Bytes, res.Conns, res.Pages = len(fz.Package), int(fz.Conns), int(fz.Pages)
	if fz.Absent && u.State == placement.StateParked {
		digest = u.Package
		if parking && !m.store.Has(digest) {
			return res, m.rollback(ctx, &res, u.Worker, user, epoch, fmt.Errorf("%w: %s", park.ErrNotFound, digest))
		}
	} else {
		// Park: the package is stored, content-addressed and
		// checksummed, before the maps point anywhere else. Not
		// fsynced for a move: the package only stands in for the
		// worker's memory, which a machine crash would take as well.
		// Parking for a restart syncs the store once at the end.
		digest, err = m.store.Put(fz.Package, false)
		if err != nil {
			return res, m.rollback(ctx, &res, u.Worker, user, epoch, err)
		}
	}
	res.Package = digest
	if d, ok := m.workers.(Deliverer); ok && !parking {
		pkg := fz.Package
		if fz.Absent {
			pkg, _ = m.store.Get(digest) // elsewhere: the wake fetches it
		}
		if pkg != nil {
			if err := d.Deliver(ctx, to, digest, pkg); err != nil {
				return res, m.rollback(ctx, &res, u.Worker, user, epoch, err)
			}
		}
	}
	// Reassign: the barrier drops with the person parked at to.
	if err := m.apply(ctx, fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: user, To: to, Epoch: epoch, Package: digest, Now: time.Now().UnixNano()}); err != nil {
		return res, m.rollback(ctx, &res, u.Worker, user, epoch, fmt.Errorf("reassigning: %w", err))
	}
	res.Outcome = Moved
	if digest != u.Package && u.Package != "" {
		_ = m.store.Delete(u.Package) // superseded: it was woken, then frozen again
	}
	if parking {
		return res, nil // the worker goes down with the agent: nothing to evict
	}
	from := u.Worker
	go func() {
		ectx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := m.workers.Evict(ectx, from, user); err != nil {
			m.cfg.Logger.Warn("evicting a moved user from their old worker", "user", user, "worker", from, "error", err)
		}
	}()
	return res, nil
}

// rollback drops the barrier and lets the old worker run the person again.
// The thaw is queued in the person's mailbox after the freeze, so it undoes
// the freeze even if the freeze completes late.
func (m *Mover) rollback(ctx context.Context, res *Result, from, user string, epoch uint64, cause error) error {
	res.Outcome = RolledBack
	if err := m.apply(context.WithoutCancel(ctx), fsm.MoveAbortRequestType, fsm.MoveAbortRequest{User: user, Epoch: epoch}); err != nil {
		return fmt.Errorf("moving %q: rolling back after %v: %w", user, cause, err)
	}
	go func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := m.workers.Thaw(tctx, from, user, epoch); err != nil {
			m.cfg.Logger.Warn("thawing a user after a rolled-back move", "user", user, "worker", from, "error", err)
		}
	}()
	m.cfg.Logger.Warn("move rolled back", "user", user, "from", from, "cause", cause)
	return fmt.Errorf("moving %q: %w: %v", user, ErrRolledBack, cause)
}

func (m *Mover) apply(ctx context.Context, t fsm.MessageType, body any) error {
	entry, err := fsm.Encode(t, body)
	if err != nil {
		return err
	}
	_, err = m.log.Apply(ctx, entry)
	return err
}

// isWorkerGone tells a dead worker from a slow or failing one.
func isWorkerGone(err error) bool {
	var re *channel.RemoteError
	if errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
