package fsm

import (
	"fmt"
	"sort"
	"time"
)

// Operator jobs (a promotion, a rollback, the moves after a rule changed)
// run on the server that received the call; their state is recorded here
// when they start, as they progress (at most once a second) and when they
// end, so that every server lists and follows every job, whoever runs it.

// JobRequestType records a job's state.
const JobRequestType MessageType = 19

// maxJobs bounds the finished jobs kept (oldest forgotten first).
const maxJobs = 64

// JobRecord is a job's state as last recorded.
type JobRecord struct {
	ID       string    `json:"id"`
	Kind     string    `json:"kind"`
	Group    string    `json:"group,omitempty"`
	From     string    `json:"from,omitempty"`
	Agent    string    `json:"agent"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	Users    int       `json:"users"`
	Moved    int       `json:"moved"`
	Failed   int       `json:"failed"`
	Done     bool      `json:"done"`
	Error    string    `json:"error,omitempty"`
}

func (f *FSM) applyJob(buf body) interface{} {
	var j JobRecord
	if err := buf.decode(&j); err != nil {
		return fmt.Errorf("decoding a job: %w", err)
	}
	if j.ID == "" {
		return fmt.Errorf("a job without an id")
	}
	if f.state.Jobs == nil {
		f.state.Jobs = map[string]*JobRecord{}
	}
	if old := f.state.Jobs[j.ID]; old != nil && old.Done {
		return nil // a late progress record after the end
	}
	f.state.Jobs[j.ID] = &j
	f.pruneJobsLocked()
	return nil
}

// pruneJobsLocked forgets the oldest finished jobs beyond maxJobs.
func (f *FSM) pruneJobsLocked() {
	if len(f.state.Jobs) <= maxJobs {
		return
	}
	var done []*JobRecord
	for _, j := range f.state.Jobs {
		if j.Done {
			done = append(done, j)
		}
	}
	sort.Slice(done, func(a, b int) bool { return done[a].Started.Before(done[b].Started) })
	for _, j := range done[:min(len(done), len(f.state.Jobs)-maxJobs)] {
		delete(f.state.Jobs, j.ID)
	}
}

// Jobs lists the recorded jobs, oldest first.
func (f *FSM) Jobs() []JobRecord {
	f.mu.RLock()
	out := make([]JobRecord, 0, len(f.state.Jobs))
	for _, j := range f.state.Jobs {
		out = append(out, *j)
	}
	f.mu.RUnlock()
	sort.Slice(out, func(a, b int) bool { return out[a].Started.Before(out[b].Started) })
	return out
}

// Job returns one recorded job.
func (f *FSM) Job(id string) (JobRecord, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	j := f.state.Jobs[id]
	if j == nil {
		return JobRecord{}, false
	}
	return *j, true
}
