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
	// MemoryMax is the hard memory ceiling of one worker, in bytes (its
	// RSS, or its heap when RSS is unknown): a probe that reads more kills
	// the worker ("killed for memory") and its slot relaunches it. Zero
	// means none. Governance replaces a growing worker well before it.
	MemoryMax uint64
	// CheckpointInterval is how often each worker is asked for what
	// changed since its last crash checkpoint (checkpoint.go). Zero means
	// never; so does a worker that does not declare the ability.
	CheckpointInterval time.Duration
	// Limits bound the pages of the group's people, told to each worker
	// in its handshake (nil: the SDK's defaults).
	Limits *protocol.WorkerLimits
}

// OfflineParks are the people a stop parked with no quorum: the maps still
// place them live on their worker, and their package is the truth, ahead of
// any checkpoint.
type OfflineParks interface {
	// List names the people parked offline from worker.
	List(worker string) []string
	// Take returns user's package (once), and whether it is for epoch.
	Take(worker, user string, epoch uint64) (digest string, ok bool)
}

// Parcels is where the host reads parked packages to wake people from.
type Parcels interface {
	Get(digest string) ([]byte, error)
}

// Pool is every worker slot of this host.
type Pool struct {
	// Parcels and Woken must be set before Start when frames may ask for a
	// wake: the package is read from Parcels, and Woken is told once a
	// worker has installed it (the supervisor records it in the maps), with
	// the precopy it continued, if any (no longer needed by anyone).
	Parcels Parcels
	Woken   func(user, digest, base string)
	// Offline, if set, names the people the last stop parked with no quorum
	// (set before Start).
	Offline OfflineParks
	// ProbeInterval is how often each worker is probed; its answer is both
	// its numbers and its proof of life. Zero means no probing.
	ProbeInterval time.Duration
	// ProbeMisses is how many probes in a row a worker may leave
	// unanswered before it is killed and relaunched; default 3. A probe
	// left unanswered while the worker's process burns CPU (an app call
	// holding Python's GIL) is not a miss: the worker is busy, not mute.
	ProbeMisses int
	// BusyTimeout bounds how long a worker may stay busy without answering
	// a probe before it is killed all the same; default 10 minutes.
	BusyTimeout time.Duration
	// probesOff stops killing for silence (PauseProbes).
	probesOff atomic.Bool
	// checkpointsOff stops the checkpoint rounds (PauseCheckpoints).
	checkpointsOff atomic.Bool
	// stopping refuses the wakes of parked people (Stopping).
	stopping atomic.Bool
	// FromWorker, if set, receives what a worker sends unasked: notices
	// (id 0) and requests, which it answers through r. It is called in
	// arrival order from the worker's channel and must not block. Set it
	// before Start.
	FromWorker func(worker string, incarnation int, env *protocol.Envelope, r Replier)
	// Ended, if set, is told when a worker's process has ended (died,
	// stopped or retired): what it held for others (subscriptions, grants)
	// is to be let go. Set it before Start.
	Ended func(worker string, incarnation int)
	// Greeting, if set, returns envelopes sent to a worker as soon as it is
	// accepted, before any frame can reach it.
	Greeting func(worker string) []*protocol.Envelope
	// Checkpoints, if set, keeps the workers' crash checkpoints: the
	// groups' CheckpointInterval asks for them, and a replacement wakes the
	// people its dead predecessor held from them. Set it before Start.
	Checkpoints Checkpoints

	log    hclog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards slots, order, groups, next and retired
	slots  map[string]*slot
	order  []string
	groups map[string]GroupSpec
	// next is the number of the next worker of each group: a retired id is
	// never given again while the host runs.
	next map[string]int
	// retired keeps the last retiredHistory retired workers, for the
	// monitor (their lifecycle: born, retired at, why).
	retired []WorkerInfo
}

// retiredHistory bounds the retired workers a host remembers.
const retiredHistory = 32

// Replier answers a worker's request (a *channel.Peer).
type Replier interface {
	Reply(id uint64, env *protocol.Envelope) error
	ReplyError(id uint64, code protocol.Error_Code, msg string) error
}

var (
	// ErrUnknownWorker is returned for a worker id this host does not run.
	ErrUnknownWorker = errors.New("unknown worker")
	// ErrStopping is returned once the pool is shutting down.
	ErrStopping = errors.New("host is shutting down")
	// ErrNotEmpty is returned when retiring a worker that still holds
	// people or pages.
	ErrNotEmpty = errors.New("worker is not empty")
	// ErrUnknownGroup is returned for a group this host does not run.
	ErrUnknownGroup = errors.New("unknown group")
	// ErrNoCheckpoints is returned when checkpointing a worker that does
	// not checkpoint (its SDK cannot, or the pool keeps no checkpoints).
	ErrNoCheckpoints = errors.New("worker does not checkpoint")
)

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

// New returns a pool for the given groups; Start launches it.
func New(log hclog.Logger, groups []GroupSpec) *Pool {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Pool{log: log, slots: map[string]*slot{}, groups: map[string]GroupSpec{}, next: map[string]int{}}
	for _, g := range groups {
		p.groups[g.Name] = g
		for range g.Workers {
			p.newSlotLocked(g)
		}
	}
	return p
}

// newSlotLocked adds a slot for the group's next worker id. p.mu is held
// (or the pool is not shared yet).
func (p *Pool) newSlotLocked(g GroupSpec) *slot {
	p.next[g.Name]++
	id := fmt.Sprintf("%s%s-%d", g.Prefix, g.Name, p.next[g.Name])
	s := &slot{id: id, group: g.Name, spec: g, log: p.log.With("worker", id),
		up: make(chan struct{}), first: make(chan error, 1), done: make(chan struct{}), pool: p}
	s.info = WorkerInfo{ID: id, Group: g.Name, State: StateStarting}
	p.slots[id] = s
	p.order = append(p.order, id)
	return s
}

// launch runs the slot's worker in the background until the pool stops or
// the slot is retired.
func (p *Pool) launch(s *slot) {
	ctx, cancel := context.WithCancel(p.ctx)
	s.cancel = cancel
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(s.done)
		s.run(ctx)
	}()
}

// Add starts one more worker in the group and waits for its first start;
// it returns the new worker's id. A worker that fails to start is retired
// again, so that a failed Add leaves nothing behind.
func (p *Pool) Add(ctx context.Context, group string) (string, error) {
	p.mu.Lock()
	g, ok := p.groups[group]
	if !ok {
		p.mu.Unlock()
		return "", fmt.Errorf("%w %q", ErrUnknownGroup, group)
	}
	if p.ctx == nil || p.ctx.Err() != nil {
		p.mu.Unlock()
		return "", ErrStopping
	}
	s := p.newSlotLocked(g)
	p.launch(s)
	p.mu.Unlock()
	select {
	case err := <-s.first:
		if err != nil {
			p.remove(s, "failed to start: "+err.Error())
			return "", fmt.Errorf("adding a worker to group %q: %w", group, err)
		}
		s.log.Info("worker added")
		return s.id, nil
	case <-ctx.Done():
		p.remove(s, "start abandoned")
		return "", ctx.Err()
	}
}

// AddGroup starts a group's workers on this host and waits for their first
// start (as Start does for the initial groups). A group this host already
// runs is refused.
func (p *Pool) AddGroup(ctx context.Context, g GroupSpec) error {
	p.mu.Lock()
	if _, ok := p.groups[g.Name]; ok {
		p.mu.Unlock()
		return fmt.Errorf("adding group %q: it already runs here", g.Name)
	}
	if p.ctx == nil || p.ctx.Err() != nil {
		p.mu.Unlock()
		return ErrStopping
	}
	p.groups[g.Name] = g
	var slots []*slot
	for range g.Workers {
		s := p.newSlotLocked(g)
		p.launch(s)
		slots = append(slots, s)
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range slots {
		select {
		case err := <-s.first:
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %s: %w", s.id, err))
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// HasGroup reports whether this host runs the group.
func (p *Pool) HasGroup(name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.groups[name]
	return ok
}

// RemoveGroup retires every worker of a group and forgets the group. Like
// Retire, it refuses a worker that still holds anyone: the workers retired
// before it stay retired, and the group stays for another try.
func (p *Pool) RemoveGroup(ctx context.Context, name, reason string) error {
	p.mu.Lock()
	if _, ok := p.groups[name]; !ok {
		p.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownGroup, name)
	}
	var ids []string
	for _, id := range p.order {
		if p.slots[id].group == name {
			ids = append(ids, id)
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		if err := p.Retire(ctx, id, reason); err != nil && !errors.Is(err, ErrUnknownWorker) {
			return fmt.Errorf("removing group %q: %w", name, err)
		}
	}
	p.mu.Lock()
	delete(p.groups, name)
	p.mu.Unlock()
	return nil
}

// Retire stops an empty worker for good and forgets its slot; the monitor
// keeps its lifecycle among the retired. A worker whose probe reports a
// person or a page is refused with ErrNotEmpty: retirement never drops
// state. The caller drains it first (and keeps it cordoned).
func (p *Pool) Retire(ctx context.Context, id, reason string) error {
	s, err := p.slot(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	ready := s.info.State == StateReady
	s.mu.Unlock()
	// A worker that is not running holds nothing to lose; a running one
	// must say it is empty.
	if ready {
		r, err := p.Probe(ctx, id)
		if err != nil {
			return fmt.Errorf("retiring %s: probing it: %w", id, err)
		}
		if r.Users > 0 || r.Pages > 0 || r.Conns > 0 {
			return fmt.Errorf("retiring %s: %w: %d users, %d connections, %d pages", id, ErrNotEmpty, r.Users, r.Conns, r.Pages)
		}
	}
	p.remove(s, reason)
	s.log.Info("worker retired", "reason", reason)
	return nil
}

// remove stops the slot, waits for its worker to end and moves it to the
// retired history.
func (p *Pool) remove(s *slot, reason string) {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
	if p.Checkpoints != nil {
		// Gone for good: so is what its people would have woken from.
		p.Checkpoints.ForgetWorker(s.id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.slots, s.id)
	for i, id := range p.order {
		if id == s.id {
			p.order = append(p.order[:i:i], p.order[i+1:]...)
			break
		}
	}
	s.mu.Lock()
	info := s.infoLocked()
	s.mu.Unlock()
	info.State, info.HowDied, info.DiedAt, info.Cordoned = StateRetired, "retired: "+reason, time.Now(), false
	if n := len(info.Ends); n > 0 && info.Ends[n-1].Incarnation == info.Incarnation {
		// Its last process was stopped for the retirement.
		info.Ends[n-1].How, info.Ends[n-1].DiedAt = info.HowDied, info.DiedAt
	}
	p.retired = append(p.retired, info)
	if len(p.retired) > retiredHistory {
		p.retired = p.retired[len(p.retired)-retiredHistory:]
	}
}

// Cordon stops (on) or resumes (off) placing newcomers on a worker: it
// leaves Ready, so neither placement nor a move chooses it, while frames
// for the people it holds go on.
func (p *Pool) Cordon(id string, on bool) error {
	s, err := p.slot(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.info.Cordoned = on
	s.mu.Unlock()
	return nil
}

// Usage returns a copy of each user's running totals on a worker, as its
// probes reported them.
func (p *Pool) Usage(id string) map[string]*protocol.UserUsage {
	s, err := p.slot(id)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]*protocol.UserUsage, len(s.usage))
	for k, v := range s.usage {
		out[k] = v
	}
	return out
}

// Start launches every worker and waits for each first start. A worker that
// cannot start, or that speaks another protocol, fails Start with the reason;
// the pool keeps retrying it in the background either way.
func (p *Pool) Start(ctx context.Context) error {
	p.mu.Lock()
	p.ctx, p.cancel = context.WithCancel(context.WithoutCancel(ctx))
	slots := make([]*slot, 0, len(p.order))
	for _, id := range p.order {
		s := p.slots[id]
		p.launch(s)
		slots = append(slots, s)
	}
	p.mu.Unlock()
	var errs []error
	for _, s := range slots {
		id := s.id
		select {
		case err := <-s.first:
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

// wait returns true when the worker died, false when the pool stopped it.
func (s *slot) wait(ctx context.Context) bool {
	s.mu.Lock()
	peer, proc, incarnation, checkpoints := s.peer, s.proc, s.info.Incarnation, s.checkpoints
	s.mu.Unlock()
	if every := s.spec.CheckpointInterval; every > 0 && checkpoints && s.pool.Checkpoints != nil {
		// The rounds end before wait returns: the next incarnation reads
		// an index its predecessor no longer writes.
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			s.checkpointLoop(ctx, peer, incarnation, every, stop)
		}()
		defer func() {
			close(stop)
			<-done
		}()
	}
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
	missed, silent, bloated := 0, false, ""
	busyFor := s.pool.BusyTimeout
	if busyFor <= 0 {
		busyFor = defaultBusyTimeout
	}
	cpu := progress{pid: proc.Pid()}
	busyKilled := ""
	cpu.moved(0) // the first reading
	busyMin := busyTicks(interval)
	kill := func() {
		if pid := proc.Pid(); pid > 0 {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		peer.Close()
	}
	for {
		select {
		case <-tick:
			if s.pool.probesOff.Load() {
				continue
			}
			if s.probe(ctx, peer, interval) {
				missed = 0
				cpu.moved(0)
				s.busy(time.Time{})
				if bloated == "" {
					if bloated = s.overMemory(); bloated != "" {
						s.log.Warn("worker over its memory ceiling; killing it", "why", bloated)
						kill()
						tick = nil
					}
				}
				continue
			}
			s.mu.Lock()
			s.info.ProbeFailures++
			s.mu.Unlock()
			if time.Since(peer.LastRecv()) < interval {
				// No answer yet, but the worker is talking (a large
				// package on the channel ahead of the answer): alive.
				continue
			}
			if cpu.moved(busyMin) {
				// Busy in the app (the probe's answer waits for the GIL,
				// or a C call): alive, up to busyFor.
				since := s.busy(time.Now())
				if time.Since(since) < busyFor {
					missed = 0
					continue
				}
				busyKilled = fmt.Sprintf("killed: busy for %s without answering a probe (busy_timeout %s)", time.Since(since).Round(time.Second), busyFor)
				s.log.Warn("worker busy without answering its probes for too long; killing it", "busy_for", time.Since(since).Round(time.Second), "busy_timeout", busyFor)
				kill()
				tick = nil
				continue
			} else {
				missed++
				if missed < misses {
					continue
				}
			}
			// Silence is information: a mute worker is killed and relaunched.
			silent = true
			s.log.Warn("worker missed its probes; killing it", "missed", missed, "interval", interval)
			kill()
			tick = nil // no probe of a worker being killed: it would count as one more miss
			continue
		case <-peer.Done():
			how := "exited: channel closed"
			if err := peer.Err(); err != nil && !errors.Is(err, channel.ErrClosed) {
				how = "exited: " + err.Error()
			}
			switch {
			case busyKilled != "":
				how = busyKilled
			case silent:
				how = fmt.Sprintf("killed for silence: %d probes unanswered", missed)
			case bloated != "":
				how = "killed for memory: " + bloated
			default:
				proc.Kill()
				if er, ok := proc.(exitReporter); ok {
					if st := er.ExitStatus(time.Second); st != "" {
						how = "exited: " + st
					}
				}
			}
			s.down(StateDead, how)
			proc.Kill()
			s.ended()
			s.log.Warn("worker died; starting a replacement", "how", how)
			return true
		case <-ctx.Done():
			s.down(StateStopped, "stopped by the host")
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = peer.Call(sctx, &protocol.Envelope{Body: &protocol.Envelope_Shutdown{Shutdown: &protocol.Shutdown{Reason: "host stopping"}}})
			cancel()
			peer.Close()
			proc.Kill()
			s.ended()
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
	s.info.StateRefused, s.info.PagesRefused = r.StateRefused, r.PagesRefused
	s.info.RSSBytes, s.info.CPUSeconds, s.info.Mailbox = r.RssBytes, r.CpuSeconds, r.MailboxDepth
	s.info.MaintenanceWaiting, s.info.MaintenanceTimedOut = r.MaintenanceWaiting, r.MaintenanceTimedOut
	for _, u := range r.PerUser {
		s.usage[u.User] = u
	}
	for _, u := range r.Left {
		delete(s.usage, u)
	}
	return true
}

// overMemory describes the worker's breach of its group's hard memory
// ceiling, or returns "".
func (s *slot) overMemory() string {
	max := s.spec.MemoryMax
	if max == 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, what := s.info.RSSBytes, "rss"
	if mem == 0 {
		mem, what = s.info.HeapBytes, "heap"
	}
	if mem <= max {
		return ""
	}
	return fmt.Sprintf("%s %d MiB > ceiling %d MiB", what, mem>>20, max>>20)
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
		if err := p.beforeUser(ctx, s, peer, f.User, f.Epoch, f.WakePackage); err != nil {
			return nil, err
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

// beforeUser sends, ahead of an envelope of user at epoch, the wake it
// needs: from the parked package digest (once per incarnation), or, for a
// person this incarnation must restore, from their crash checkpoint. The
// worker runs the wake in the person's mailbox before the envelope. A wake
// another goroutine is sending the person is waited for (bounded by ctx),
// so nothing of theirs overtakes it.
func (p *Pool) beforeUser(ctx context.Context, s *slot, peer *channel.Peer, user string, epoch uint64, digest string) error {
	if digest != "" && p.stopping.Load() {
		return ErrNoWakeStopping
	}
	if digest == "" && s.listing.Load() {
		// The people to restore are being listed: this one may be of them.
		s.mu.Lock()
		listed := s.listed
		s.mu.Unlock()
		select {
		case <-listed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the crash checkpoint list: %w", ctx.Err())
		}
	}
	if digest == "" && s.special.Load() == 0 {
		return nil
	}
	for {
		s.mu.Lock()
		if s.peer != peer {
			s.mu.Unlock()
			return nil // replaced: the envelope's Start fails, and Send retries
		}
		ch := s.waking[user]
		if ch == nil {
			break // s.mu held
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the wake of %q: %w", user, ctx.Err())
		}
	}
	restore := s.restore[user]
	if restore {
		delete(s.restore, user)
		s.special.Add(-1)
	}
	if digest != "" && s.woken[user] >= epoch || digest == "" && !restore {
		s.mu.Unlock()
		return nil
	}
	if digest != "" {
		s.woken[user] = epoch
	}
	ch := make(chan struct{})
	s.waking[user] = ch
	s.special.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.waking[user] == ch { // not a new incarnation's map
			delete(s.waking, user)
			s.special.Add(-1)
		}
		s.mu.Unlock()
		close(ch)
	}()
	if digest != "" {
		// A package is the truth: whatever checkpoint the person had here
		// is older (dropped once they are woken).
		p.wake(s, peer, user, epoch, digest)
	} else {
		p.restore(s, peer, user, epoch)
	}
	return nil
}

// ErrNoWakeStopping refuses a parked person's wake on a host that is
// stopping: its workers go down with it, and what the person did there
// would go with them. Their package waits for wherever they go next; the
// front retries.
var ErrNoWakeStopping = errors.New("this host is stopping; the session wakes where it goes next: retry")

// Stopping refuses, from now on, to wake parked people on this host's
// workers (ErrNoWakeStopping): the stop is parking everyone, and a person woken
// here meanwhile (an idle park, or one the stop already parked, whose next
// frame came through another server) would lose what they did before the
// workers stop. People already awake are served until their park.
func (p *Pool) Stopping() { p.stopping.Store(true) }

// wake sends the user's package. A package that cannot be read is reported
// and the user wakes with no state (their pages restart clean with a
// notice): a clear outcome, never a hang.
func (p *Pool) wake(s *slot, peer *channel.Peer, user string, epoch uint64, digest string) {
	var pkg []byte
	if p.Parcels != nil {
		b, err := p.Parcels.Get(digest)
		if err != nil {
			s.log.Error("reading a parked package; the user wakes without state", "user", user, "package", digest, "error", err)
		}
		pkg = b
	}
	woken := func() {
		if p.Checkpoints != nil {
			p.Checkpoints.Forget(s.id, user, epoch)
		}
		if p.Woken != nil {
			p.Woken(user, digest, protocol.PackageBase(pkg))
		}
	}
	wake := &protocol.Wake{User: user, Epoch: epoch, Package: pkg}
	if base := protocol.PackageBase(pkg); base != "" {
		// The package continues a precopy the worker should have staged:
		// the wake is waited for (the envelope behind it waits anyway), and
		// sent again with the precopy if the worker no longer has it.
		p.wakeFromBase(s, peer, wake, base, woken)
		return
	}
	c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}})
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		if _, err := c.Wait(ctx); err != nil {
			s.log.Error("waking a user", "user", user, "error", err)
			return
		}
		woken()
	}()
}

// wakeFromBase sends a wake whose package continues the precopy base and
// waits for it; a worker that no longer has base staged is sent it.
func (p *Pool) wakeFromBase(s *slot, peer *channel.Peer, wake *protocol.Wake, base string, woken func()) {
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	for try := 0; ; try++ {
		c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}})
		if err != nil {
			return
		}
		_, err = c.Wait(ctx)
		var re *channel.RemoteError
		if try == 0 && errors.As(err, &re) && re.Code == protocol.Error_NOT_FOUND && p.Parcels != nil {
			s.log.Info("the worker has no staged copy of a moved person's precopy; sending it with the wake", "user", wake.User, "package", base)
			b, gerr := p.Parcels.Get(base)
			if gerr != nil {
				s.log.Error("reading the precopy a parked package continues; the user wakes without state", "user", wake.User, "package", base, "error", gerr)
				wake.Package = nil
			}
			wake.BasePackage = b
			continue
		}
		if err != nil {
			s.log.Error("waking a user", "user", wake.User, "error", err)
			return
		}
		woken()
		return
	}
}

// restore wakes a person of a worker that died from their crash checkpoint
// (pieces of the epoch they still live at). With none, nothing is sent:
// their pages restart clean when the page asks, as without checkpoints.
func (p *Pool) restore(s *slot, peer *channel.Peer, user string, epoch uint64) {
	if p.Offline != nil {
		if digest, ok := p.Offline.Take(s.id, user, epoch); ok {
			// Parked with no quorum: their package, not a checkpoint.
			p.wake(s, peer, user, epoch, digest)
			return
		}
	}
	ck := p.Checkpoints
	if ck == nil {
		return
	}
	pkg, gen, err := ck.Restore(s.id, user, epoch)
	if err != nil {
		s.log.Warn("reading a crash checkpoint: some of the person's pages restart clean", "user", user, "error", err)
	}
	if pkg == nil {
		return
	}
	c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{
		User: user, Epoch: epoch, Package: pkg, Checkpoint: true, Generation: gen}}})
	if err != nil {
		ck.Restored(s.id, user, err)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		_, err := c.Wait(ctx)
		if err != nil {
			s.log.Error("waking a user from their checkpoint", "user", user, "error", err)
		} else {
			s.log.Info("woke a user from their checkpoint", "user", user, "generation", gen)
		}
		ck.Restored(s.id, user, err)
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
	switch b := env.Body.(type) {
	case *protocol.Envelope_Freeze:
		// A person not yet back from their checkpoint is woken first: the
		// freeze then hands over what they had, not nothing. They still
		// live at the epoch before the move's.
		if b.Freeze.Epoch > 0 {
			if err := p.beforeUser(ctx, s, peer, b.Freeze.User, b.Freeze.Epoch-1, ""); err != nil {
				return nil, err
			}
		}
	case *protocol.Envelope_Evict:
		// The person's move committed elsewhere: nothing here is theirs.
		p.forget(s, b.Evict.User)
	}
	return peer.Start(env)
}

// forget drops what this slot would wake user from after a crash.
func (p *Pool) forget(s *slot, user string) {
	if p.Checkpoints == nil {
		return
	}
	s.mu.Lock()
	if s.restore[user] {
		delete(s.restore, user)
		s.special.Add(-1)
	}
	s.mu.Unlock()
	p.Checkpoints.Forget(s.id, user, 0)
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
		out = append(out, s.infoLocked())
		s.mu.Unlock()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Group < out[j].Group })
	return out
}

// Retired lists the workers retired lately, oldest first.
func (p *Pool) Retired() []WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]WorkerInfo(nil), p.retired...)
}

// PauseProbes stops probing, for a planned operation that keeps workers
// busy on purpose (parking everyone before a stop): nobody is killed for
// silence while it runs.
func (p *Pool) PauseProbes() { p.probesOff.Store(true) }

// PauseCheckpoints stops the checkpoint rounds, for an agent parking
// everyone before it stops: their packages are the truth from then on, and
// the workers' time is theirs.
func (p *Pool) PauseCheckpoints() { p.checkpointsOff.Store(true) }

// ResumeCheckpoints undoes PauseCheckpoints (the data directory has room
// again).
func (p *Pool) ResumeCheckpoints() { p.checkpointsOff.Store(false) }

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

// Ready lists the ids of the workers ready now that take newcomers.
func (p *Pool) Ready() []string {
	var ids []string
	for _, w := range p.Workers() {
		if w.State == StateReady && !w.Cordoned {
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
