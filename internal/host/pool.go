package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
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
	g := p.groups[name]
	delete(p.groups, name)
	p.mu.Unlock()
	closeLauncher(g.Launcher)
	return nil
}

// closeLauncher lets go what a group's launcher holds besides its workers
// (a template process).
func closeLauncher(l Launcher) {
	if c, ok := l.(io.Closer); ok {
		_ = c.Close()
	}
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

// Has reports whether this host runs the worker.
func (p *Pool) Has(workerID string) bool {
	_, err := p.slot(workerID)
	return err == nil
}

// Workers lists the slots in id order.
func (p *Pool) Workers() []WorkerInfo {
	p.mu.Lock()
	slots := make([]*slot, 0, len(p.order))
	for _, id := range p.order {
		slots = append(slots, p.slots[id])
	}
	templates := map[string]*TemplateLauncher{}
	for name, g := range p.groups {
		if tl, ok := g.Launcher.(*TemplateLauncher); ok {
			templates[name] = tl
		}
	}
	p.mu.Unlock()
	out := make([]WorkerInfo, 0, len(slots))
	for _, s := range slots {
		s.mu.Lock()
		info := s.infoLocked()
		s.mu.Unlock()
		if tl := templates[info.Group]; tl != nil {
			t := tl.Info()
			info.Template = &t
		}
		out = append(out, info)
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
	p.mu.Lock()
	groups := maps.Clone(p.groups)
	p.mu.Unlock()
	for _, g := range groups {
		closeLauncher(g.Launcher)
	}
	return nil
}
