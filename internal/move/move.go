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
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
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

// ErrLogGone, as the cause a caller cancels a MoveSet's context with, says
// the log cannot take entries any more (no quorum): the set gives up at
// once, barriers that are up included, instead of waiting to settle them.
var ErrLogGone = errors.New("the log takes no entries: no quorum")

// Precopier is the optional ability of Workers to copy a person ahead of
// their move (docs/moves.md): the old worker hands over a copy of their
// state while they go on (Precopy), the destination reads it in advance
// (Stage), and the freeze then hands over only what changed since
// (FreezeWith, naming the base), so the pause does not grow with the
// person's size. FreezeWith also carries the freeze's own bounds, which
// the worker enforces (Freeze.wait_ms, request_wait_ms).
type Precopier interface {
	Precopy(ctx context.Context, worker, user string) (*protocol.Precopied, error)
	Stage(ctx context.Context, worker, user, digest string, pkg []byte) error
	FreezeWith(ctx context.Context, worker string, fz *protocol.Freeze) (*protocol.Frozen, error)
}

// precopyTimeout bounds a precopy and its staging; one that takes longer
// is given up, and the person moves by a full freeze.
const precopyTimeout = 30 * time.Second

// Config tunes the road.
type Config struct {
	// FreezeTimeout bounds the freeze: an old worker that has not handed
	// the package over by then has the move rolled back. Default 5 s.
	FreezeTimeout time.Duration
	// RequestWait bounds the freeze instead while the person's site
	// request is running in the app (a slow report, an upload): the move
	// waits for it to finish rather than roll back. Default 30 s; never less than
	// FreezeTimeout. A park's freeze (Options.Park) uses its own bound for
	// both.
	RequestWait time.Duration
	Logger      hclog.Logger
	Registry    prometheus.Registerer
	// Encode builds the road's log entries (the maps' EncodeEntry, which
	// writes them binary once every server applies that). Default
	// fsm.Encode, JSON.
	Encode func(fsm.MessageType, any) ([]byte, error)
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
	// noPrecopy names the workers that answered a precopy or a stage as
	// something they do not handle (another SDK, an older build).
	noPrecopy sync.Map
	// onRoad holds the people whose barrier this mover raised and has not
	// settled yet (user → *traveller): a new term's roll-back leaves them
	// to it.
	onRoad sync.Map
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
	// Precopied is the size of the copy sent ahead of the freeze, and
	// FromBase the pages the freeze then sent as their changes alone.
	Precopied int    `json:"precopied_bytes,omitempty"`
	FromBase  int    `json:"from_base_pages,omitempty"`
	Conns     int    `json:"conns"`
	Pages     int    `json:"pages"`
	Package   string `json:"package,omitempty"`
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
	if cfg.RequestWait <= 0 {
		cfg.RequestWait = 30 * time.Second
	}
	cfg.RequestWait = max(cfg.RequestWait, cfg.FreezeTimeout)
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Encode == nil {
		cfg.Encode = fsm.Encode
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
// changed (bad input, busy), ErrRolledBack, or ErrStateLost. It is MoveSet
// for a set of one.
func (m *Mover) Move(ctx context.Context, user, to, reason string) (Result, error) {
	return m.one(ctx, Request{User: user, To: to}, Options{Reason: reason})
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
// configured one.
func (m *Mover) ParkWithin(ctx context.Context, user string, freeze time.Duration) (Result, error) {
	return m.one(ctx, Request{User: user}, Options{Reason: "park", Park: true, Freeze: freeze})
}

func (m *Mover) one(ctx context.Context, r Request, opt Options) (res Result, err error) {
	opt.Parallel = 1
	m.MoveSet(ctx, []Request{r}, opt, func(r Result, e error) { res, err = r, e })
	return res, err
}

// rolledBack is the outcome of a move whose person stays home: the barrier
// dropped and the old worker runs them again.
func (m *Mover) rolledBack(res *Result, cause error) error {
	res.Outcome = RolledBack
	m.cfg.Logger.Warn("move rolled back", "user", res.User, "from", res.From, "cause", cause)
	return fmt.Errorf("moving %q: %w: %v", res.User, ErrRolledBack, cause)
}

// isWorkerGone tells a dead worker from a slow or failing one.
func isWorkerGone(err error) bool {
	var re *channel.RemoteError
	if errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	return true
}
