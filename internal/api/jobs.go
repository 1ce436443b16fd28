package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// A job is a long operation on many people (a promotion, a rollback, the
// moves after a rule changed). It runs on the agent that received the call,
// in the background: a caller that stops following it does not stop it.
// With a JobLog its state is recorded where every server reads it (start,
// progress at most once a second, end), so any server lists and follows
// it; the moves one by one are streamed only by the agent running it.

// JobLog records jobs where every server sees them: the raft log.
type JobLog interface {
	RecordJob(ctx context.Context, j Job) error
	Jobs() []Job
	Job(id string) (Job, bool)
}

// recordEvery bounds how often a running job's progress is recorded.
const recordEvery = time.Second

// Job is a job's state as GET /v1/jobs/{id} shows it: the record the
// job log keeps (kind is promote, rollback or assign).
type Job = fsm.JobRecord

// JobProgress is one line of a job's NDJSON stream: a move (with its error,
// if it failed), and at the end the job with Done set.
type JobProgress struct {
	Move  *move.Result `json:"move,omitempty"`
	Error string       `json:"error,omitempty"`
	Job   *Job         `json:"job,omitempty"`
}

type job struct {
	mu    sync.Mutex
	state Job
	lines []JobProgress // every progress line, for followers
	wake  chan struct{} // closed and replaced at each new line
}

// jobs keeps the jobs of this agent: the running ones and the last 64.
type jobs struct {
	mu   sync.Mutex
	byID map[string]*job
	log  hclog.Logger
	// rec, if set, records every job for the other servers; agent names
	// this one in them.
	rec   JobLog
	agent string
}

// record writes j's state to the job log, if there is one.
func (js *jobs) record(j Job) {
	if js.rec == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := js.rec.RecordJob(ctx, j); err != nil && js.log != nil {
		js.log.Warn("recording a job's state for the other servers", "id", j.ID, "error", err)
	}
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start runs fn as a job. fn reports each move through progress and returns
// the totals.
func (js *jobs) start(kind, group, from string, fn func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error)) *job {
	j := &job{state: Job{ID: newJobID(), Kind: kind, Group: group, From: from, Started: time.Now(), Agent: js.agent}, wake: make(chan struct{})}
	js.mu.Lock()
	if js.byID == nil {
		js.byID = map[string]*job{}
	}
	js.byID[j.state.ID] = j
	js.pruneLocked()
	js.mu.Unlock()
	js.record(j.snapshot())
	stopRecording := make(chan struct{})
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		if js.rec == nil {
			return
		}
		tick := time.NewTicker(recordEvery)
		defer tick.Stop()
		var last Job
		for {
			select {
			case <-stopRecording:
				return
			case <-tick.C:
			}
			if s := j.snapshot(); s != last {
				js.record(s)
				last = s
			}
		}
	}()
	go func() {
		res, err := fn(context.Background(), func(m move.Result, err error) {
			p := JobProgress{Move: &m}
			j.mu.Lock()
			if err != nil {
				p.Error = err.Error()
				j.state.Failed++
			} else {
				j.state.Moved++
			}
			j.addLocked(p)
			j.mu.Unlock()
		})
		j.mu.Lock()
		final := j.state
		j.mu.Unlock()
		final.Users, final.Moved, final.Failed = res.Users, res.Moved, res.Failed
		final.Done, final.Finished = true, time.Now()
		if err != nil {
			final.Error = err.Error()
		}
		close(stopRecording)
		<-recorded
		// Recorded before followers see the end: any server then has it.
		js.record(final)
		j.mu.Lock()
		j.state = final // done and its last line together: a follower sees both
		j.addLocked(JobProgress{Job: &final})
		j.mu.Unlock()
		if js.log != nil {
			js.log.Info("job done", "id", final.ID, "kind", kind, "group", group, "moved", final.Moved, "failed", final.Failed, "error", final.Error)
		}
	}()
	return j
}

func (j *job) addLocked(p JobProgress) {
	j.lines = append(j.lines, p)
	close(j.wake)
	j.wake = make(chan struct{})
}

func (j *job) snapshot() Job {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.state
}

// pruneLocked forgets the oldest finished jobs beyond 64.
func (js *jobs) pruneLocked() {
	if len(js.byID) <= 64 {
		return
	}
	var done []*job
	for _, j := range js.byID {
		if s := j.snapshot(); s.Done {
			done = append(done, j)
		}
	}
	sort.Slice(done, func(a, b int) bool { return done[a].state.Started.Before(done[b].state.Started) })
	for _, j := range done[:min(len(done), len(js.byID)-64)] {
		delete(js.byID, j.state.ID)
	}
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

func (js *jobs) list() []Job {
	js.mu.Lock()
	all := make([]*job, 0, len(js.byID))
	for _, j := range js.byID {
		all = append(all, j)
	}
	js.mu.Unlock()
	out := make([]Job, 0, len(all))
	local := map[string]bool{}
	for _, j := range all {
		s := j.snapshot()
		out = append(out, s)
		local[s.ID] = true
	}
	if js.rec != nil {
		for _, j := range js.rec.Jobs() {
			if !local[j.ID] {
				out = append(out, j)
			}
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Started.Before(out[b].Started) })
	return out
}

// followRecorded streams a job another agent runs, as recorded: its state
// each time it changes, until it is done or the caller leaves.
func (js *jobs) followRecorded(w http.ResponseWriter, r *http.Request, id string) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	var last Job
	for {
		j, ok := js.rec.Job(id)
		if ok && (j != last || j.Done) {
			_ = enc.Encode(JobProgress{Job: &j})
			if flusher != nil {
				flusher.Flush()
			}
			last = j
		}
		if !ok || j.Done {
			return
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
}

// follow streams the job's progress as NDJSON until it is done or the
// caller leaves.
func (j *job) follow(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	next := 0
	for {
		j.mu.Lock()
		lines, wake, done := j.lines[next:], j.wake, j.state.Done
		next = len(j.lines)
		j.mu.Unlock()
		for _, p := range lines {
			_ = enc.Encode(p)
		}
		if flusher != nil {
			flusher.Flush()
		}
		if done {
			return
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
	}
}
