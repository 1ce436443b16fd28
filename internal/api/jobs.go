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

	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// A job is a long operation on many people (a promotion, a rollback, the
// moves after a rule changed). It runs on the agent that received the call,
// in the background: a caller that stops following it does not stop it.

// Job is a job's state as GET /v1/jobs/{id} shows it.
type Job struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"` // promote, rollback, assign
	Group    string    `json:"group,omitempty"`
	From     string    `json:"from,omitempty"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Users    int       `json:"users"`
	Moved    int       `json:"moved"`
	Failed   int       `json:"failed"`
	Done     bool      `json:"done"`
	Error    string    `json:"error,omitempty"`
}

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
}

func newJobID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// start runs fn as a job. fn reports each move through progress and returns
// the totals.
func (js *jobs) start(kind, group, from string, fn func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error)) *job {
	j := &job{state: Job{ID: newJobID(), Kind: kind, Group: group, From: from, Started: time.Now()}, wake: make(chan struct{})}
	js.mu.Lock()
	if js.byID == nil {
		js.byID = map[string]*job{}
	}
	js.byID[j.state.ID] = j
	js.pruneLocked()
	js.mu.Unlock()
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
		j.state.Users, j.state.Moved, j.state.Failed = res.Users, res.Moved, res.Failed
		j.state.Done, j.state.Finished = true, time.Now()
		if err != nil {
			j.state.Error = err.Error()
		}
		final := j.state
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
	for _, j := range all {
		out = append(out, j.snapshot())
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Started.Before(out[b].Started) })
	return out
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
