package fsm

import (
	"cmp"
	"fmt"
	"iter"
	"maps"
	"slices"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// The AI gateway's replicated state (docs/gateway.md): the cost counters
// and the queue of submitted calls. The leader runs the calls; the log
// makes an accepted call outlive it, and records each call's start before
// the provider is called, so that a call is never run twice: a new leader
// runs the calls still queued and rejects those a dead leader started.

const (
	// GatewayChargesRequestType adds answers' costs to the counters.
	GatewayChargesRequestType MessageType = 16
	// GatewayJobRequestType submits, starts, finishes or cancels a call.
	GatewayJobRequestType MessageType = 17
)

// GatewayChargesRequest is a batch of charges, applied in order. A ledger
// (one per server process: Ledger) numbers its batches and sends a batch
// again, unchanged, until it is applied; a batch whose number was already
// applied is skipped, so a batch sent twice counts once.
type GatewayChargesRequest struct {
	Ledger  string               `json:"ledger,omitempty"`
	Batch   uint64               `json:"batch,omitempty"`
	At      time.Time            `json:"at"`
	Charges []gatewaywire.Charge `json:"charges"`
}

// ledgerMark is the last batch applied from one ledger.
type ledgerMark struct {
	Batch uint64    `json:"batch"`
	At    time.Time `json:"at"`
}

// Retention of the gateway's records: the marks of ledgers silent for
// ledgerRetention are forgotten (their process is long gone); finished
// calls stay readable for jobRetention, and at most maxFinishedJobs of them
// are kept (the oldest go first).
const (
	ledgerRetention = 48 * time.Hour
	jobRetention    = 24 * time.Hour
	maxFinishedJobs = 100_000
)

// GatewayJob is a submitted call in the log.
type GatewayJob struct {
	gatewaywire.Job
	Call gatewaywire.Call `json:"call"`
	// Key is the call's idempotency key; Seq its place in the queue.
	Key string `json:"key"`
	Seq uint64 `json:"seq"`
}

// Gateway job operations.
const (
	JobOpSubmit = "submit"
	JobOpStart  = "start"
	JobOpFinish = "finish"
	JobOpCancel = "cancel"
)

// GatewayJobRequest changes one job. Submit carries Job (an existing key
// answers the existing job's id); Finish carries the outcome.
type GatewayJobRequest struct {
	Op  string      `json:"op"`
	Job *GatewayJob `json:"job,omitempty"`
	ID  string      `json:"id,omitempty"`
	// Finish: the answer, or the error and its kind.
	Response  *gatewaywire.Response `json:"response,omitempty"`
	Error     string                `json:"error,omitempty"`
	ErrorKind string                `json:"error_kind,omitempty"`
	At        time.Time             `json:"at"`
}

// GatewayState is the gateway's part of the maps.
type GatewayState struct {
	Counters gatewaywire.Counters `json:"counters"`
	// Ledgers holds the last batch applied from each ledger.
	Ledgers map[string]ledgerMark  `json:"ledgers,omitempty"`
	Jobs    map[string]*GatewayJob `json:"jobs,omitempty"`
	Keys    map[string]string      `json:"keys,omitempty"`
	NextSeq uint64                 `json:"next_seq"`
	// APIKeys are the keys created through the admin API, by name (held
	// as their hashes); Tenants the tenants, by name; Reservations the
	// calls' reservations not yet settled, released or expired, by id
	// (gateway_access.go).
	APIKeys      map[string]*gatewaywire.APIKey      `json:"api_keys,omitempty"`
	Tenants      map[string]*gatewaywire.Tenant      `json:"tenants,omitempty"`
	Reservations map[string]*gatewaywire.Reservation `json:"reservations,omitempty"`
	// Shares are the ceilings of the servers' shares of the limits, by
	// server (gateway_shares.go).
	Shares map[string]GatewayShare `json:"shares,omitempty"`
	// Ceilings are the ceilings of the ledgers' budget holds, by ledger
	// (gateway_ceilings.go): written by a snapshot from ceilIdx, read
	// into it by a restore.
	Ceilings map[string][]GatewayScopeCeiling `json:"ceilings,omitempty"`

	// Indexes, not persisted (rebuilt from Jobs): the jobs queued or
	// running; the queued ones in queue order (jobs that left the queue
	// are dropped lazily); the finished ones in the order they finished.
	active   map[string]bool
	perModel map[string]int // active calls by model
	queue    []*GatewayJob
	finished []*GatewayJob
	// cancels counts the cancellations applied since this state was built.
	cancels uint64
	// keyHash names the key of each hash; resvLedgers counts the
	// reservations of each ledger (rebuilt from APIKeys and
	// Reservations).
	keyHash     map[string]string
	resvLedgers map[string]int
	// ceilIdx holds the ceilings, by ledger and scope.
	ceilIdx map[string]map[gatewaywire.Scope]ceiling
}

func (f *FSM) gatewayLocked() *GatewayState {
	if f.state.Gateway == nil {
		f.state.Gateway = &GatewayState{}
	}
	g := f.state.Gateway
	if g.Ledgers == nil {
		g.Ledgers = map[string]ledgerMark{}
	}
	if g.Jobs == nil {
		g.Jobs = map[string]*GatewayJob{}
	}
	if g.Keys == nil {
		g.Keys = map[string]string{}
	}
	if g.APIKeys == nil {
		g.APIKeys = map[string]*gatewaywire.APIKey{}
	}
	if g.Tenants == nil {
		g.Tenants = map[string]*gatewaywire.Tenant{}
	}
	if g.Reservations == nil {
		g.Reservations = map[string]*gatewaywire.Reservation{}
	}
	if g.keyHash == nil {
		g.keyHash, g.resvLedgers = map[string]string{}, map[string]int{}
		for name, k := range g.APIKeys {
			g.keyHash[k.Hash] = name
		}
		for _, r := range g.Reservations {
			g.resvLedgers[r.Ledger]++
		}
	}
	if g.ceilIdx == nil {
		g.ceilIdx, g.Ceilings = indexCeilings(g.Ceilings), nil
	}
	if g.active == nil {
		g.active, g.perModel = map[string]bool{}, map[string]int{}
		g.queue, g.finished = nil, nil
		for id, j := range g.Jobs {
			switch j.State {
			case gatewaywire.JobQueued, gatewaywire.JobRunning:
				g.active[id] = true
				g.perModel[j.Model]++
				if j.State == gatewaywire.JobQueued {
					g.queue = append(g.queue, j)
				}
			default:
				g.finished = append(g.finished, j)
			}
		}
		slices.SortFunc(g.queue, func(a, b *GatewayJob) int { return cmp.Compare(a.Seq, b.Seq) })
		slices.SortFunc(g.finished, func(a, b *GatewayJob) int {
			return cmp.Or(a.Finished.Compare(b.Finished), cmp.Compare(a.Seq, b.Seq))
		})
	}
	return g
}

// decodeGateway decodes a gateway entry; Apply calls it before taking the
// lock, so readers of the maps do not wait for the decoding.
func decodeGateway(t MessageType, buf body) (any, error) {
	switch t {
	case GatewayChargesRequestType:
		var req GatewayChargesRequest
		if err := buf.decode(&req); err != nil {
			return nil, fmt.Errorf("decoding gateway charges: %w", err)
		}
		return &req, nil
	default:
		var req GatewayJobRequest
		if err := buf.decode(&req); err != nil {
			return nil, fmt.Errorf("decoding a gateway job: %w", err)
		}
		return &req, nil
	}
}

func (f *FSM) applyGatewayCharges(req *GatewayChargesRequest) interface{} {
	g := f.gatewayLocked()
	if req.Ledger != "" {
		if m, ok := g.Ledgers[req.Ledger]; ok && req.Batch <= m.Batch {
			return nil // sent again after it was applied
		}
		g.Ledgers[req.Ledger] = ledgerMark{Batch: req.Batch, At: req.At}
		for l, m := range g.Ledgers {
			if m.At.Before(req.At.Add(-ledgerRetention)) {
				delete(g.Ledgers, l)
			}
		}
	}
	for _, c := range req.Charges {
		g.Counters.Apply(c)
		if c.Reservation != "" {
			g.dropReservation(c.Reservation)
		}
	}
	g.expireReservations(req.At)
	return nil
}

func (f *FSM) applyGatewayJob(req *GatewayJobRequest) interface{} {
	g := f.gatewayLocked()
	switch req.Op {
	case JobOpSubmit:
		if req.Job == nil || req.Job.ID == "" {
			return fmt.Errorf("a gateway submit without a job")
		}
		if id, ok := g.Keys[req.Job.Key]; ok && req.Job.Key != "" {
			return id
		}
		j := *req.Job
		g.NextSeq++
		j.Seq, j.State = g.NextSeq, gatewaywire.JobQueued
		g.Jobs[j.ID] = &j
		g.active[j.ID] = true
		g.perModel[j.Model]++
		g.queue = append(g.queue, &j)
		if j.Key != "" {
			g.Keys[j.Key] = j.ID
		}
		f.gatewayChangedLocked()
		return j.ID
	case JobOpStart, JobOpFinish, JobOpCancel:
		j := g.Jobs[req.ID]
		if j == nil {
			return gatewaywire.ErrNoJob
		}
		defer f.jobChanged(j.ID)
		defer g.trimQueue()
		switch req.Op {
		case JobOpStart:
			if j.State != gatewaywire.JobQueued {
				return fmt.Errorf("job %s is %s, not queued", req.ID, j.State)
			}
			j.State = gatewaywire.JobRunning
		case JobOpFinish:
			if j.State != gatewaywire.JobRunning && j.State != gatewaywire.JobQueued {
				return nil // cancelled meanwhile: the cancel stands
			}
			j.State, j.Finished, j.Response, j.Error, j.ErrorKind = gatewaywire.JobDone, req.At, req.Response, req.Error, req.ErrorKind
			if req.Error != "" {
				j.State = gatewaywire.JobFailed
			}
			g.finish(j)
		case JobOpCancel:
			if j.State == gatewaywire.JobQueued || j.State == gatewaywire.JobRunning {
				j.State, j.Finished, j.Error = gatewaywire.JobCancelled, req.At, "cancelled by the caller"
				g.finish(j)
				g.cancels++
				f.gatewayChangedLocked() // the runner stops it
			}
		}
		return req.ID
	}
	return fmt.Errorf("unknown gateway job op %q", req.Op)
}

// finish moves j out of the active calls, and forgets the oldest
// finished calls past jobRetention (measured from j's end, so that every
// replica forgets the same ones) or past maxFinishedJobs.
func (g *GatewayState) finish(j *GatewayJob) {
	if g.active[j.ID] {
		delete(g.active, j.ID)
		if g.perModel[j.Model]--; g.perModel[j.Model] <= 0 {
			delete(g.perModel, j.Model)
		}
	}
	g.finished = append(g.finished, j)
	cut := j.Finished.Add(-jobRetention)
	n := 0
	for n < len(g.finished) && (len(g.finished)-n > maxFinishedJobs || g.finished[n].Finished.Before(cut)) {
		old := g.finished[n]
		delete(g.Jobs, old.ID)
		if g.Keys[old.Key] == old.ID {
			delete(g.Keys, old.Key)
		}
		g.finished[n] = nil
		n++
	}
	if n > 0 {
		g.finished = g.finished[n:]
	}
}

// GatewayCounters returns a copy of the cost counters.
func (f *FSM) GatewayCounters() gatewaywire.Counters {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return gatewaywire.Counters{}
	}
	return f.state.Gateway.Counters.Clone()
}

// GatewayCountersOf returns a copy of the cost counters and the last
// batch applied of ledger.
func (f *FSM) GatewayCountersOf(ledger string) (gatewaywire.Counters, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return gatewaywire.Counters{}, 0
	}
	return f.state.Gateway.Counters.Clone(), f.state.Gateway.Ledgers[ledger].Batch
}

// GatewayJob returns a submitted call.
func (f *FSM) GatewayJob(id string) (GatewayJob, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil || f.state.Gateway.Jobs[id] == nil {
		return GatewayJob{}, false
	}
	return *f.state.Gateway.Jobs[id], true
}

// GatewayJobs returns the calls in state, in queue order.
func (f *FSM) GatewayJobs(state gatewaywire.JobState) []GatewayJob {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return nil
	}
	var out []GatewayJob
	g := f.state.Gateway
	if state == gatewaywire.JobQueued && g.active != nil {
		return queuedAfter(g, 0)
	}
	if state == gatewaywire.JobRunning && g.active != nil {
		for id := range g.active {
			if j := g.Jobs[id]; j != nil && j.State == state {
				out = append(out, *j)
			}
		}
	} else {
		for _, j := range g.Jobs {
			if j.State == state {
				out = append(out, *j)
			}
		}
	}
	slices.SortFunc(out, func(a, b GatewayJob) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// GatewayQueuedAfter returns the queued calls whose place in the queue is
// after seq, in queue order: a runner that started everything up to seq
// asks only for what came since.
func (f *FSM) GatewayQueuedAfter(seq uint64) []GatewayJob {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil || f.state.Gateway.active == nil {
		return nil
	}
	return queuedAfter(f.state.Gateway, seq)
}

// queuedAfter reads the queue index.
func queuedAfter(g *GatewayState, seq uint64) []GatewayJob {
	i, _ := slices.BinarySearchFunc(g.queue, seq+1, func(j *GatewayJob, s uint64) int { return cmp.Compare(j.Seq, s) })
	var out []GatewayJob
	for _, j := range g.queue[i:] {
		if j.State == gatewaywire.JobQueued {
			out = append(out, *j)
		}
	}
	return out
}

// trimQueue drops the head of the queue index that left the queue, and
// compacts it when most of it has.
func (g *GatewayState) trimQueue() {
	n := 0
	for n < len(g.queue) && g.queue[n].State != gatewaywire.JobQueued {
		g.queue[n] = nil
		n++
	}
	g.queue = g.queue[n:]
	if len(g.queue) > 2*len(g.active)+64 {
		g.queue = slices.DeleteFunc(g.queue, func(j *GatewayJob) bool { return j.State != gatewaywire.JobQueued })
	}
}

// GatewayCancels counts the cancellations applied; it changes when a call
// was cancelled (or the state restored) since it was last read.
func (f *FSM) GatewayCancels() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return 0
	}
	return f.state.Gateway.cancels
}

// GatewayJobState returns the state of a submitted call ("" if unknown).
func (f *FSM) GatewayJobState(id string) gatewaywire.JobState {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil || f.state.Gateway.Jobs[id] == nil {
		return ""
	}
	return f.state.Gateway.Jobs[id].State
}

// WatchGatewayJob returns a channel closed at the next change of job id
// (at once if there is no such job). Watches have their own lock, so that
// many waiters do not queue for the maps' write lock.
func (f *FSM) WatchGatewayJob(id string) <-chan struct{} {
	f.jobMu.Lock()
	if f.jobWatch == nil {
		f.jobWatch = map[string]chan struct{}{}
	}
	ch := f.jobWatch[id]
	if ch == nil {
		ch = make(chan struct{})
		f.jobWatch[id] = ch
	}
	f.jobMu.Unlock()
	// Subscribed first, then checked: a change in between closes ch.
	f.mu.RLock()
	known := f.state.Gateway != nil && f.state.Gateway.Jobs[id] != nil
	f.mu.RUnlock()
	if !known {
		f.jobChanged(id)
	}
	return ch
}

// jobChanged wakes the watchers of job id.
func (f *FSM) jobChanged(id string) {
	f.jobMu.Lock()
	defer f.jobMu.Unlock()
	if ch := f.jobWatch[id]; ch != nil {
		close(ch)
		delete(f.jobWatch, id)
	}
}

// WatchGateway returns a channel closed at the next change a runner of
// the queue acts on: a call submitted or cancelled, or a restore.
func (f *FSM) WatchGateway() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gatewayCh == nil {
		f.gatewayCh = make(chan struct{})
	}
	return f.gatewayCh
}

func (f *FSM) gatewayChangedLocked() {
	if f.gatewayCh != nil {
		close(f.gatewayCh)
		f.gatewayCh = nil
	}
}

// gatewayRestoredLocked rebuilds the indexes and wakes every watcher after
// a restore.
func (f *FSM) gatewayRestoredLocked() {
	if f.state.Gateway != nil {
		f.gatewayLocked()
	}
	f.gatewayChangedLocked()
	f.jobMu.Lock()
	for id, ch := range f.jobWatch {
		close(ch)
		delete(f.jobWatch, id)
	}
	f.jobMu.Unlock()
}

// cloneGateway deep-copies the gateway state for a snapshot.
func cloneGateway(g *GatewayState) *GatewayState {
	if g == nil {
		return nil
	}
	out := &GatewayState{Counters: g.Counters.Clone(), Ledgers: maps.Clone(g.Ledgers), Jobs: make(map[string]*GatewayJob, len(g.Jobs)),
		Keys: maps.Clone(g.Keys), NextSeq: g.NextSeq}
	for id, j := range g.Jobs {
		c := *j
		out.Jobs[id] = &c
	}
	// Keys, tenants, reservations, shares and ceilings are replaced
	// whole, never changed in place: the snapshot shares them.
	out.APIKeys, out.Tenants, out.Reservations = maps.Clone(g.APIKeys), maps.Clone(g.Tenants), maps.Clone(g.Reservations)
	out.Shares, out.Ceilings = maps.Clone(g.Shares), flattenCeilings(g.ceilIdx)
	return out
}

// GatewayActive counts the submitted calls of model queued or running.
func (f *FSM) GatewayActive(model string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if g := f.state.Gateway; g != nil {
		return g.perModel[model]
	}
	return 0
}

// GatewaySessions returns the cost counters of the named sessions that have
// one, read under one lock, and the last batch applied of ledger.
func (f *FSM) GatewaySessions(names iter.Seq[string], ledger string) (map[string]gatewaywire.Tally, uint64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string]gatewaywire.Tally{}
	if f.state.Gateway == nil {
		return out, 0
	}
	for n := range names {
		if t, ok := f.state.Gateway.Counters.Sessions[n]; ok {
			out[n] = t
		}
	}
	return out, f.state.Gateway.Ledgers[ledger].Batch
}
