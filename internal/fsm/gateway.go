package fsm

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
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

// GatewayChargesRequest is a batch of charges, applied in order; a charge
// whose request was already charged is skipped.
type GatewayChargesRequest struct {
	Charges []gateway.Charge `json:"charges"`
}

// GatewayJob is a submitted call in the log.
type GatewayJob struct {
	gateway.Job
	Call gateway.Call `json:"call"`
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
	Response  *gateway.Response `json:"response,omitempty"`
	Error     string            `json:"error,omitempty"`
	ErrorKind string            `json:"error_kind,omitempty"`
	At        time.Time         `json:"at"`
}

// GatewayState is the gateway's part of the maps.
type GatewayState struct {
	Counters gateway.Counters `json:"counters"`
	// Charged remembers the requests charged, by day, so a charge applied
	// twice counts once; days older than the last two are forgotten.
	Charged map[string]map[string]bool `json:"charged,omitempty"`
	Jobs    map[string]*GatewayJob     `json:"jobs,omitempty"`
	Keys    map[string]string          `json:"keys,omitempty"`
	NextSeq uint64                     `json:"next_seq"`
	// active indexes the jobs queued or running (not persisted: rebuilt
	// from Jobs).
	active map[string]bool
}

func (f *FSM) gatewayLocked() *GatewayState {
	if f.state.Gateway == nil {
		f.state.Gateway = &GatewayState{}
	}
	g := f.state.Gateway
	if g.Charged == nil {
		g.Charged = map[string]map[string]bool{}
	}
	if g.Jobs == nil {
		g.Jobs = map[string]*GatewayJob{}
	}
	if g.Keys == nil {
		g.Keys = map[string]string{}
	}
	if g.active == nil {
		g.active = map[string]bool{}
		for id, j := range g.Jobs {
			if j.State == gateway.JobQueued || j.State == gateway.JobRunning {
				g.active[id] = true
			}
		}
	}
	return g
}

func (f *FSM) applyGatewayCharges(buf []byte) interface{} {
	var req GatewayChargesRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding gateway charges: %w", err)
	}
	g := f.gatewayLocked()
	for _, c := range req.Charges {
		day := g.Charged[c.Day]
		if day == nil {
			day = map[string]bool{}
			g.Charged[c.Day] = day
			// Keep the two newest days of request ids.
			days := slices.Sorted(maps.Keys(g.Charged))
			for _, d := range days[:max(0, len(days)-2)] {
				delete(g.Charged, d)
			}
		}
		if c.Request != "" && day[c.Request] {
			continue
		}
		if c.Request != "" {
			day[c.Request] = true
		}
		g.Counters.Apply(c)
	}
	return nil
}

func (f *FSM) applyGatewayJob(buf []byte, index uint64) interface{} {
	var req GatewayJobRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding a gateway job: %w", err)
	}
	g := f.gatewayLocked()
	defer f.gatewayChangedLocked()
	switch req.Op {
	case JobOpSubmit:
		if req.Job == nil || req.Job.ID == "" {
			return fmt.Errorf("a gateway submit without a job")
		}
		if id, ok := g.Keys[req.Job.Key]; ok && req.Job.Key != "" {
			return id
		}
		j := *req.Job
		if g.NextSeq%1024 == 0 {
			pruneJobs(g, j.Submitted.Add(-24*time.Hour))
		}
		g.NextSeq++
		j.Seq, j.State = g.NextSeq, gateway.JobQueued
		g.Jobs[j.ID] = &j
		g.active[j.ID] = true
		if j.Key != "" {
			g.Keys[j.Key] = j.ID
		}
		return j.ID
	case JobOpStart, JobOpFinish, JobOpCancel:
		j := g.Jobs[req.ID]
		if j == nil {
			return gateway.ErrNoJob
		}
		switch req.Op {
		case JobOpStart:
			if j.State != gateway.JobQueued {
				return fmt.Errorf("job %s is %s, not queued", req.ID, j.State)
			}
			j.State = gateway.JobRunning
		case JobOpFinish:
			if j.State != gateway.JobRunning && j.State != gateway.JobQueued {
				return nil // cancelled meanwhile: the cancel stands
			}
			j.State, j.Finished, j.Response, j.Error, j.ErrorKind = gateway.JobDone, req.At, req.Response, req.Error, req.ErrorKind
			if req.Error != "" {
				j.State = gateway.JobFailed
			}
			delete(g.active, j.ID)
		case JobOpCancel:
			if j.State == gateway.JobQueued || j.State == gateway.JobRunning {
				j.State, j.Finished, j.Error = gateway.JobCancelled, req.At, "cancelled by the caller"
				delete(g.active, j.ID)
			}
		}
		return req.ID
	}
	return fmt.Errorf("unknown gateway job op %q", req.Op)
}

// pruneJobs forgets the calls that finished before cut.
func pruneJobs(g *GatewayState, cut time.Time) {
	for id, j := range g.Jobs {
		if !j.Finished.IsZero() && j.Finished.Before(cut) {
			delete(g.Jobs, id)
			if g.Keys[j.Key] == id {
				delete(g.Keys, j.Key)
			}
		}
	}
}

// GatewayCounters returns a copy of the cost counters.
func (f *FSM) GatewayCounters() gateway.Counters {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return gateway.Counters{}
	}
	return f.state.Gateway.Counters.Clone()
}

// GatewaySpent returns what a session and a day have spent.
func (f *FSM) GatewaySpent(session, day string) (int64, int64) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return 0, 0
	}
	c := f.state.Gateway.Counters
	return c.Sessions[session].Micros, c.Days[day].Micros
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
func (f *FSM) GatewayJobs(state gateway.JobState) []GatewayJob {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.state.Gateway == nil {
		return nil
	}
	var out []GatewayJob
	g := f.state.Gateway
	if (state == gateway.JobQueued || state == gateway.JobRunning) && g.active != nil {
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

// WatchGateway returns a channel closed at the next change of the jobs.
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

// cloneGateway deep-copies the gateway state for a snapshot.
func cloneGateway(g *GatewayState) *GatewayState {
	if g == nil {
		return nil
	}
	out := &GatewayState{Counters: g.Counters.Clone(), Charged: map[string]map[string]bool{}, Jobs: map[string]*GatewayJob{},
		Keys: maps.Clone(g.Keys), NextSeq: g.NextSeq}
	for d, ids := range g.Charged {
		out.Charged[d] = maps.Clone(ids)
	}
	for id, j := range g.Jobs {
		c := *j
		out.Jobs[id] = &c
	}
	return out
}

// GatewayActive counts the submitted calls of model queued or running.
func (f *FSM) GatewayActive(model string) int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.state.Gateway
	if g == nil {
		return 0
	}
	n := 0
	for id := range g.active {
		if j := g.Jobs[id]; j != nil && j.Model == model {
			n++
		}
	}
	return n
}
