// Package host runs the worker processes of the groups placed on this agent
// and relays their channels. Each worker sits in a slot with a stable id
// ("web-1"); when its process exits, the slot records how and starts a
// replacement, and frames for the slot wait (bounded by their context) until
// it is back. The host decides nothing about people: where a user lives is
// the supervisor's business.
package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/protocol"
)

// GroupSpec is a group of identical workers on this host.
type GroupSpec struct {
	Name     string
	Workers  int
	Launcher Launcher
	// Prefix starts every worker id of the group ("s1." in a cluster, so
	// ids are unique across hosts).
	Prefix string
}

// Parcels is where the host reads parked packages to wake people from.
type Parcels interface {
	Get(digest string) ([]byte, error)
}

// Pool is every worker slot of this host.
type Pool struct {
	// Parcels and Woken must be set before Start when frames may ask for a
	// wake: the package is read from Parcels, and Woken is told once a
	// worker has installed it (the supervisor records it in the maps).
	Parcels Parcels
	Woken   func(user, digest string)
	// ProbeInterval is how often each worker is probed; its answer is both
	// its numbers and its proof of life. Zero means no probing.
	ProbeInterval time.Duration
	// ProbeMisses is how many probes in a row a worker may leave
	// unanswered before it is killed and relaunched; default 3.
	ProbeMisses int
	// probesOff stops killing for silence (PauseProbes).
	probesOff atomic.Bool

	log    hclog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex // guards slots and order
	slots map[string]*slot
	order []string
}

var (
	// ErrUnknownWorker is returned for a worker id this host does not run.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrStopping is returned once the pool is shutting down.
	ErrStopping = errors.New("host is shutting down")
)

// Lifecycle states of a slot.
const (
	StateStarting = "starting"
	StateReady    = "ready"
	StateDead     = "dead"
	StateRefused  = "refused"
	StateStopped  = "stopped"
)

// WorkerInfo is a slot as the monitor sees it.
type WorkerInfo struct {
	ID          string    `json:"id"`
	Group       string    `json:"group"`
	State       string    `json:"state"`
	Pid         int       `json:"pid,omitempty"`
	Incarnation int       `json:"incarnation"`
	Born        time.Time `json:"born,omitzero"`
	DiedAt      time.Time `json:"died_at,omitzero"`
	HowDied     string    `json:"how_died,omitempty"`
	App         string    `json:"app,omitempty"`
	AppVersion  string    `json:"app_version,omitempty"`
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
}

type slot struct {
	id, group string
	launcher  Launcher
	log       hclog.Logger
	pool      *Pool

	mu   sync.Mutex // guards everything below
	peer *channel.Peer
	proc Process
	// woken is the epoch at which each user was woken on this incarnation,
	// so that a wake is sent once however many frames ask for it.
	woken map[string]uint64
	up    chan struct{} // closed while ready; replaced when down
	info  WorkerInfo

	first chan error // the first start's outcome, once
}

// New returns a pool for the given groups; Start launches it.
func New(log hclog.Logger, groups []GroupSpec) *Pool {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Pool{log: log, slots: map[string]*slot{}}
	for _, g := range groups {
		for i := 1; i <= g.Workers; i++ {
			id := fmt.Sprintf("%s%s-%d", g.Prefix, g.Name, i)
			s := &slot{id: id, group: g.Name, launcher: g.Launcher, log: log.With("worker", id),
				up: make(chan struct{}), first: make(chan error, 1), pool: p}
			s.info = WorkerInfo{ID: id, Group: g.Name, State: StateStarting}
			p.slots[id] = s
			p.order = append(p.order, id)
		}
	}
	return p
}

// Start launches every worker and waits for each first start. A worker that
// cannot start, or that speaks another protocol, fails Start with the reason;
// the pool keeps retrying it in the background either way.
func (p *Pool) Start(ctx context.Context) error {
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for _, id := range p.order {
		s := p.slots[id]
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			s.run(p.ctx)
		}()
	}
	var errs []error
	for _, id := range p.order {
		select {
		case err := <-p.slots[id].first:
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %s: %w", id, err))
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
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
	proc, conn, err := s.launcher.Launch(sctx, s.id)
	if err != nil {
		s.setState(StateDead, "launch failed: "+err.Error())
		return err
	}
	hello, err := channel.Accept(sctx, conn, &protocol.HelloAck{WorkerId: s.id, Group: s.group})
	if err != nil {
		proc.Kill()
		state := StateDead
		if errors.Is(err, channel.ErrIncompatible) {
			state = StateRefused
		}
		s.setState(state, err.Error())
		return err
	}
	peer := channel.NewPeer(conn, nil)
	s.mu.Lock()
	s.peer, s.proc = peer, proc
	s.woken = map[string]uint64{}
	s.info.Incarnation++
	s.info.State = StateReady
	s.info.Pid = proc.Pid()
	s.info.Born = time.Now()
	s.info.App, s.info.AppVersion = hello.App, hello.AppVersion
	close(s.up)
	s.mu.Unlock()
	s.log.Info("worker ready", "pid", proc.Pid(), "app", hello.App, "version", hello.AppVersion)
	return nil
}

// wait returns true when the worker died, false when the pool stopped it.
func (s *slot) wait(ctx context.Context) bool {
	s.mu.Lock()
	peer, proc := s.peer, s.proc
	s.mu.Unlock()
	var tick <-chan time.Time
	interval, misses := s.pool.ProbeInterval, s.pool.ProbeMisses
	if misses <= 0 {
		misses = 3
	}
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	missed, silent := 0, false
	for {
		select {
		case <-tick:
			if s.pool.probesOff.Load() {
				continue
			}
			if s.probe(ctx, peer, interval) {
				missed = 0
				continue
			}
			if time.Since(peer.LastRecv()) < interval {
				// No answer yet, but the worker is talking (a large
				// package on the channel ahead of the answer): alive.
				continue
			}
			missed++
			if missed < misses {
				continue
			}
			// Silence is information: a mute worker is killed and relaunched.
			silent = true
			s.log.Warn("worker missed its probes; killing it", "missed", missed, "interval", interval)
			if pid := proc.Pid(); pid > 0 {
				if p, err := os.FindProcess(pid); err == nil {
					_ = p.Kill()
				}
			}
			peer.Close()
			continue
		case <-peer.Done():
			how := "exited: channel closed"
			if err := peer.Err(); err != nil && !errors.Is(err, channel.ErrClosed) {
				how = "exited: " + err.Error()
			}
			if silent {
				how = fmt.Sprintf("killed for silence: %d probes unanswered", missed)
			}
			s.down(StateDead, how)
			proc.Kill()
			s.log.Warn("worker died; starting a replacement", "how", how)
			return true
		case <-ctx.Done():
			s.down(StateStopped, "stopped by the host")
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = peer.Call(sctx, &protocol.Envelope{Body: &protocol.Envelope_Shutdown{Shutdown: &protocol.Shutdown{Reason: "host stopping"}}})
			cancel()
			peer.Close()
			proc.Kill()
			return false
		}
	}
}

// probe asks the worker for its numbers and records them; false when it did
// not answer in time.
func (s *slot) probe(ctx context.Context, peer *channel.Peer, timeout time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	env, err := peer.Call(pctx, &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil || env.GetProbeReply() == nil {
		return false
	}
	r := env.GetProbeReply()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.LastProbe = time.Now()
	s.info.Users, s.info.Conns, s.info.Pages = r.Users, r.Conns, r.Pages
	s.info.HeapBytes, s.info.Goroutines, s.info.Frames = r.HeapBytes, r.Goroutines, r.Frames
	s.info.RSSBytes, s.info.CPUSeconds, s.info.Mailbox = r.RssBytes, r.CpuSeconds, r.MailboxDepth
	return true
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
}

func (s *slot) setState(state, how string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.State = state
	if how != "" {
		s.info.HowDied = how
		s.info.DiedAt = time.Now()
	}
}

// readyPeer waits until the slot is ready or ctx ends.
func (s *slot) readyPeer(ctx context.Context, stop <-chan struct{}) (*channel.Peer, error) {
	for {
		s.mu.Lock()
		up, peer := s.up, s.peer
		s.mu.Unlock()
		select {
		case <-up:
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

func (p *Pool) slot(id string) (*slot, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slots[id]
	if s == nil {
		return nil, fmt.Errorf("%w %q", ErrUnknownWorker, id)
	}
	return s, nil
}

func (p *Pool) stopCh() <-chan struct{} {
	if p.ctx == nil {
		return nil
	}
	return p.ctx.Done()
}

// Send starts a frame to a worker, waiting (bounded by ctx) while the worker
// is being replaced. Frames sent from one goroutine arrive in order.
func (p *Pool) Send(ctx context.Context, workerID string, f *protocol.Frame) (*channel.Call, error) {
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	for {
		peer, err := s.readyPeer(ctx, p.stopCh())
		if err != nil {
			return nil, err
		}
		if f.WakePackage != "" {
			p.wake(s, peer, f)
		}
		c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
		if err == nil {
			return c, nil
		}
		select {
		case <-peer.Done():
			// The worker died under the frame: wait for its replacement.
			if ctx.Err() != nil {
				return nil, err
			}
		default:
			// The frame itself could not be sent (it cannot be encoded):
			// retrying would fail the same way.
			return nil, err
		}
	}
}

// wake sends the user's package ahead of the frame, once per incarnation:
// the worker runs it in the user's mailbox before the frame. A package that
// cannot be read is reported and the user wakes with no state (their pages
// restart clean with a notice): a clear outcome, never a hang.
func (p *Pool) wake(s *slot, peer *channel.Peer, f *protocol.Frame) {
	s.mu.Lock()
	if s.woken[f.User] >= f.Epoch || s.peer != peer {
		s.mu.Unlock()
		return
	}
	s.woken[f.User] = f.Epoch
	s.mu.Unlock()
	var pkg []byte
	if p.Parcels != nil {
		b, err := p.Parcels.Get(f.WakePackage)
		if err != nil {
			s.log.Error("reading a parked package; the user wakes without state", "user", f.User, "package", f.WakePackage, "error", err)
		}
		pkg = b
	}
	c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: f.User, Epoch: f.Epoch, Package: pkg}}})
	if err != nil {
		return
	}
	user, digest := f.User, f.WakePackage
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		if _, err := c.Wait(ctx); err != nil {
			s.log.Error("waking a user", "user", user, "error", err)
			return
		}
		if p.Woken != nil {
			p.Woken(user, digest)
		}
	}()
}

// StartEnvelope sends one request envelope to a worker without waiting for the
// answer (a Frame goes through Send, for the wake). Envelopes started from
// one goroutine reach the worker in order.
func (p *Pool) StartEnvelope(ctx context.Context, workerID string, env *protocol.Envelope) (*channel.Call, error) {
	if f := env.GetFrame(); f != nil {
		return p.Send(ctx, workerID, f)
	}
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	peer, err := s.readyPeer(ctx, p.stopCh())
	if err != nil {
		return nil, err
	}
	return peer.Start(env)
}

// Has reports whether this host runs the worker.
func (p *Pool) Has(workerID string) bool {
	_, err := p.slot(workerID)
	return err == nil
}

// Probe asks a worker for its numbers.
func (p *Pool) Probe(ctx context.Context, workerID string) (*protocol.ProbeReply, error) {
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	peer, err := s.readyPeer(ctx, p.stopCh())
	if err != nil {
		return nil, err
	}
	env, err := peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil {
		return nil, err
	}
	return env.GetProbeReply(), nil
}

// Workers lists the slots in id order.
func (p *Pool) Workers() []WorkerInfo {
	p.mu.Lock()
	slots := make([]*slot, 0, len(p.order))
	for _, id := range p.order {
		slots = append(slots, p.slots[id])
	}
	p.mu.Unlock()
	out := make([]WorkerInfo, 0, len(slots))
	for _, s := range slots {
		s.mu.Lock()
		out = append(out, s.info)
		s.mu.Unlock()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// PauseProbes stops probing, for a planned operation that keeps workers
// busy on purpose (parking everyone before a stop): nobody is killed for
// silence while it runs.
func (p *Pool) PauseProbes() { p.probesOff.Store(true) }

// Busy reports whether a worker has requests in flight.
func (p *Pool) Busy(workerID string) bool {
	s, err := p.slot(workerID)
	if err != nil {
		return false
	}
	s.mu.Lock()
	peer := s.peer
	s.mu.Unlock()
	return peer != nil && peer.Pending() > 0
}

// GroupOf names the group of a worker ("" for an unknown worker).
func (p *Pool) GroupOf(workerID string) string {
	s, err := p.slot(workerID)
	if err != nil {
		return ""
	}
	return s.group
}

// Ready lists the ids of the workers ready now.
func (p *Pool) Ready() []string {
	var ids []string
	for _, w := range p.Workers() {
		if w.State == StateReady {
			ids = append(ids, w.ID)
		}
	}
	return ids
}

// Close stops every worker (asking each to shut down, then killing it) and
// waits for them. Idempotent.
func (p *Pool) Close() error {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
	return nil
}
