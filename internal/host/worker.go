package host

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A worker's slot: its process's start (the handshake, the greeting, the
// wake of the people a dead predecessor held), its states, how each of its
// incarnations ended, and the relaunch after a death.

// Lifecycle states of a slot.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateDead     = "dead"
	StateRefused  = "refused"
	StateStopped  = "stopped"
	StateRetired  = "retired"
)

// End is how one incarnation of a slot ended.
type End struct {
	Incarnation int       `json:"incarnation"`
	Born        time.Time `json:"born,omitzero"`
	DiedAt      time.Time `json:"died_at"`
	How         string    `json:"how"`
}

// maxEnds bounds the ends a slot remembers.
const maxEnds = 8

// WorkerInfo is a slot as the monitor sees it.
type WorkerInfo struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	State string `json:"state"`
	Pid   int    `json:"pid,omitempty"`
	// SharedProcess is set for an in-process worker (its Process has no
	// pid of its own): HeapBytes, RSSBytes and CPUSeconds are then the
	// agent's whole process's, shared by every in-process worker, not
	// this worker's.
	SharedProcess bool      `json:"shared_process,omitempty"`
	Incarnation   int       `json:"incarnation"`
	Born          time.Time `json:"born,omitzero"`
	// DiedAt and HowDied say when and how the slot's last process ended
	// ("killed for silence: 3 probes unanswered"); a relaunch keeps them,
	// and a failed launch does not overwrite them (LaunchError). Before
	// any process ran, they say why none could start.
	DiedAt  time.Time `json:"died_at,omitzero"`
	HowDied string    `json:"how_died,omitempty"`
	// Ends lists how the slot's last processes ended, oldest first (at
	// most maxEnds): the lifecycle of its incarnations.
	Ends []End `json:"ends,omitempty"`
	// LaunchError is why the slot's last launch failed, while no process
	// runs; cleared by the next start that succeeds.
	LaunchError string `json:"launch_error,omitempty"`
	App         string `json:"app,omitempty"`
	AppVersion  string `json:"app_version,omitempty"`
	// Template is the group's template process, for a worker forked from
	// one (a python3 group's template).
	Template *TemplateInfo `json:"template,omitempty"`
	// Cordoned is set while the worker takes no newcomers (it is being
	// drained or replaced).
	Cordoned bool `json:"cordoned,omitempty"`
	// The last probe's answer.
	LastProbe  time.Time `json:"last_probe,omitzero"`
	Users      int64     `json:"users"`
	Conns      int64     `json:"conns"`
	Pages      int64     `json:"pages"`
	HeapBytes  uint64    `json:"heap_bytes"`
	RSSBytes   uint64    `json:"rss_bytes"`
	CPUSeconds float64   `json:"cpu_seconds"`
	Mailbox    int64     `json:"mailbox_depth"`
	Goroutines int64     `json:"goroutines"`
	Frames     uint64    `json:"frames"`
	// StateRefused counts the writes refused past a page's or a person's
	// state bound.
	StateRefused uint64 `json:"state_refused"`
	// PagesRefused counts the page opens refused past a connection's or a
	// person's page-count bound.
	PagesRefused uint64 `json:"pages_refused"`
	// ProbeFailures counts the probes the slot's workers left unanswered.
	ProbeFailures int64 `json:"probe_failures"`
	// BusySince is set while the worker answers no probe but its process
	// burns CPU: busy in the app, not killed for silence.
	BusySince time.Time `json:"busy_since,omitzero"`
	// MaintenanceWaiting counts, per backend, the requests waiting on a
	// maintenance window; MaintenanceTimedOut those that gave up (this
	// incarnation's running total).
	MaintenanceWaiting  map[string]int64  `json:"maintenance_waiting,omitempty"`
	MaintenanceTimedOut map[string]uint64 `json:"maintenance_timed_out,omitempty"`
	// LastCheckpoint is when the slot's last complete checkpoint round
	// began: a change its worker made before then is in the checkpoint.
	// The counters are the slot's rounds and the pieces and bytes they
	// parked, over its incarnations.
	LastCheckpoint   time.Time `json:"last_checkpoint,omitzero"`
	CheckpointRounds int64     `json:"checkpoint_rounds,omitempty"`
	CheckpointPieces int64     `json:"checkpoint_pieces,omitempty"`
	CheckpointBytes  int64     `json:"checkpoint_bytes,omitempty"`
}

type slot struct {
	id, group string
	spec      GroupSpec
	log       hclog.Logger
	pool      *Pool
	// cancel stops this slot alone (retirement); done closes when its
	// worker is stopped for good.
	cancel context.CancelFunc
	done   chan struct{}
	// special counts the entries of restore and waking, so that a frame
	// takes the lock to look at them only when there is something to see.
	special atomic.Int32
	// listing is set while the incarnation's people to restore are being
	// listed (the checkpoint journal may still be loading); listed closes
	// when they are.
	listing atomic.Bool
	// ckMu runs one checkpoint round at a time, so rounds park in order.
	ckMu sync.Mutex

	mu   sync.Mutex // guards everything below
	peer *channel.Peer
	proc Process
	// woken is the epoch at which each user was woken on this incarnation,
	// so that a wake is sent once however many frames ask for it.
	woken map[string]uint64
	// restore names the people this incarnation wakes from their crash
	// checkpoints before their first frame (or freeze); waking holds a
	// channel per person whose wake is being sent, closed once it is: their
	// frames wait for it.
	restore map[string]bool
	waking  map[string]chan struct{}
	listed  chan struct{}
	// checkpoints says this incarnation's worker declared it checkpoints.
	checkpoints bool
	up          chan struct{} // closed while ready; replaced when down
	info        WorkerInfo
	// usage is each user's running totals from the probes (UserUsage).
	usage map[string]*protocol.UserUsage

	first chan error // the first start's outcome, once
}

// run keeps the slot's worker alive until ctx ends.
func (s *slot) run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	first := true
	report := func(err error) {
		if first {
			s.first <- err
			first = false
		}
	}
	for {
		if ctx.Err() != nil {
			report(ErrStopping)
			s.setState(StateStopped, "")
			return
		}
		began := time.Now()
		err := s.start(ctx)
		report(err)
		if err == nil {
			died := s.wait(ctx)
			if !died {
				return
			}
			if time.Since(began) > 10*time.Second {
				backoff = 100 * time.Millisecond
			}
		} else {
			s.log.Error("starting worker", "error", err)
			if errors.Is(err, channel.ErrIncompatible) {
				backoff = 30 * time.Second
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// start launches a process and completes the handshake.
func (s *slot) start(ctx context.Context) error {
	s.setState(StateStarting, "")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	proc, conn, err := s.spec.Launcher.Launch(sctx, s.id)
	if err != nil {
		s.setState(StateDead, "launch failed: "+err.Error())
		return err
	}
	// The envelopes go on the worker's framed channel when it offers one
	// (conn is then that channel), else on conn as it came.
	hello, conn, err := channel.AcceptFramed(sctx, conn, &protocol.HelloAck{WorkerId: s.id, Group: s.group, PackageChunks: true, Batches: true, Limits: s.spec.Limits})
	if err != nil {
		proc.Kill()
		state := StateDead
		if errors.Is(err, channel.ErrIncompatible) {
			state = StateRefused
		}
		s.setState(state, err.Error())
		return err
	}
	s.mu.Lock()
	incarnation := s.info.Incarnation + 1
	s.mu.Unlock()
	var peer *channel.Peer
	peer = channel.NewIdlePeer(conn, func(env *protocol.Envelope) {
		if f := s.pool.FromWorker; f != nil {
			f(s.id, incarnation, env, peer)
		} else if env.Id != 0 {
			_ = peer.ReplyError(env.Id, protocol.Error_BAD_REQUEST, fmt.Sprintf("the host does not handle %T", env.Body))
		}
	})
	if hello.PackageChunks {
		peer.EnableChunks()
	}
	if hello.Batches {
		peer.EnableBatches()
	}
	peer.DigestPackages()
	peer.Listen()
	// What the worker must know before its first frame (the maintenance
	// windows) goes first: envelopes started in order arrive in order.
	if g := s.pool.Greeting; g != nil {
		for _, env := range g(s.id) {
			if _, err := peer.Start(env); err != nil {
				s.log.Warn("greeting the worker", "envelope", fmt.Sprintf("%T", env.Body), "error", err)
			}
		}
	}
	s.mu.Lock()
	s.peer, s.proc = peer, proc
	s.woken = map[string]uint64{}
	s.restore, s.waking, s.checkpoints = map[string]bool{}, map[string]chan struct{}{}, hello.Checkpoints
	s.special.Store(0)
	// The people its predecessor held (their checkpoint rounds are over:
	// wait returned) wake from their checkpoints on their first frame. The
	// list waits for the checkpoint journal, which an agent loads behind
	// its start: meanwhile a frame of a person who is not parked waits for
	// the list (a parked person wakes from their package and need not).
	listed := make(chan struct{})
	s.listed = listed
	s.listing.Store(true)
	s.usage = map[string]*protocol.UserUsage{}
	s.info.Incarnation = incarnation
	s.info.State = StateReady
	s.info.LaunchError = ""
	s.info.Pid = proc.Pid()
	s.info.SharedProcess = s.info.Pid == 0
	s.info.Born = time.Now()
	s.info.App, s.info.AppVersion = hello.App, hello.AppVersion
	close(s.up)
	s.mu.Unlock()
	go func() {
		defer close(listed)
		defer s.listing.Store(false)
		var list []string
		if o := s.pool.Offline; o != nil {
			list = o.List(s.id)
		}
		if ck := s.pool.Checkpoints; ck != nil {
			list = append(list, ck.Restorable(s.id, incarnation)...)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.peer != peer {
			return // replaced meanwhile: the next incarnation lists its own
		}
		for _, u := range list {
			if !s.restore[u] {
				s.restore[u] = true
				s.special.Add(1)
			}
		}
	}()
	s.log.Info("worker ready", "pid", proc.Pid(), "app", hello.App, "version", hello.AppVersion)
	return nil
}

// ended tells the pool's Ended hook that this incarnation is over.
func (s *slot) ended() {
	if f := s.pool.Ended; f != nil {
		s.mu.Lock()
		inc := s.info.Incarnation
		s.mu.Unlock()
		f(s.id, inc)
	}
}

func (s *slot) down(state, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.up:
		s.up = make(chan struct{})
	default:
	}
	s.info.State = state
	s.info.DiedAt = time.Now()
	s.info.HowDied = how
	s.info.Ends = append(s.info.Ends, End{Incarnation: s.info.Incarnation, Born: s.info.Born, DiedAt: s.info.DiedAt, How: how})
	if n := len(s.info.Ends); n > maxEnds {
		s.info.Ends = append([]End(nil), s.info.Ends[n-maxEnds:]...)
	}
}

// setState sets the slot's state; a non-empty how is why a launch failed:
// it is the slot's LaunchError, and its HowDied only while no process has
// ever run (a relaunch failing must not erase how the last one ended).
func (s *slot) setState(state, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.State = state
	if how != "" {
		s.info.LaunchError = how
		if s.info.Incarnation == 0 {
			s.info.HowDied = how
			s.info.DiedAt = time.Now()
		}
	}
}

// infoLocked returns a copy of the slot's info that shares no slice with it.
func (s *slot) infoLocked() WorkerInfo {
	info := s.info
	info.Ends = append([]End(nil), s.info.Ends...)
	return info
}

// readyPeer waits until the slot is ready or ctx ends.
func (s *slot) readyPeer(ctx context.Context, stop <-chan struct{}) (*channel.Peer, error) {
	for {
		s.mu.Lock()
		up, peer := s.up, s.peer
		s.mu.Unlock()
		// The common case, the worker up, asks nothing of ctx: a context
		// that makes its Done channel only when asked (the front's) costs
		// nothing then.
		if peer != nil && closed(up) && !closed(peer.Done()) {
			return peer, nil
		}
		select {
		case <-up:
			if peer == nil {
				// Read before the first start set it: read again.
				continue
			}
			select {
			case <-peer.Done():
				// Died between the check and now; wait for the next one.
				time.Sleep(time.Millisecond)
				continue
			default:
			}
			return peer, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for worker %s: %w", s.id, ctx.Err())
		case <-stop:
			return nil, ErrStopping
		}
	}
}

// closed reports a channel closed, without waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
