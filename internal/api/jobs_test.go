package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// The jobs an agent keeps are bounded: the oldest finished ones go first,
// and running ones are never dropped, however many there are.
func TestJobsArePruned(t *testing.T) {
	js := &jobs{}
	block := make(chan struct{})
	defer close(block)
	run := func(wait bool) *job {
		return js.start("assign", "", "", func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
			if wait {
				<-block
			}
			return supervisor.ReconcileResult{}, nil
		})
	}
	var finished []*job
	for range 3 {
		finished = append(finished, run(false))
	}
	for _, j := range finished {
		for !j.snapshot().Done {
			time.Sleep(time.Millisecond)
		}
	}
	running := make([]*job, 0, 70)
	for range 70 {
		running = append(running, run(true)) // more running jobs than the bound
	}
	for _, j := range running {
		if js.get(j.snapshot().ID) == nil {
			t.Fatal("a running job was dropped")
		}
	}
	for _, j := range finished {
		if js.get(j.snapshot().ID) != nil {
			t.Fatal("a finished job was kept over the bound")
		}
	}
}

// memJobLog is a JobLog in memory, shared by two agents' jobs as the raft
// log is.
type memJobLog struct {
	mu   sync.Mutex
	jobs map[string]Job
}

func (l *memJobLog) RecordJob(_ context.Context, j Job) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.jobs == nil {
		l.jobs = map[string]Job{}
	}
	l.jobs[j.ID] = j
	return nil
}

func (l *memJobLog) Jobs() []Job {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Job
	for _, j := range l.jobs {
		out = append(out, j)
	}
	return out
}

func (l *memJobLog) Job(id string) (Job, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	j, ok := l.jobs[id]
	return j, ok
}

// A job one server runs is listed and followed through another: its
// recorded state (progress at most a second old), its end as it ran.
func TestJobsSeenFromAnotherServer(t *testing.T) {
	rec := &memJobLog{}
	runner := &jobs{rec: rec, agent: "s1"}
	other := &jobs{rec: rec, agent: "s2"}
	release := make(chan struct{})
	j := runner.start("promote", "v2", "v1", func(ctx context.Context, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
		progress(move.Result{User: "ana"}, nil)
		<-release
		return supervisor.ReconcileResult{Users: 2, Moved: 2}, nil
	})
	id := j.snapshot().ID
	list := other.list()
	if len(list) != 1 || list[0].ID != id || list[0].Agent != "s1" || list[0].Done {
		t.Fatalf("the other server lists %+v", list)
	}
	// Following it from the other server ends with the job's end.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { other.followRecorded(w, r, id) }))
	defer srv.Close()
	got := make(chan []JobProgress, 1)
	go func() {
		resp, err := http.Get(srv.URL)
		if err != nil {
			got <- nil
			return
		}
		defer resp.Body.Close()
		var lines []JobProgress
		dec := json.NewDecoder(resp.Body)
		for {
			var p JobProgress
			if dec.Decode(&p) != nil {
				break
			}
			lines = append(lines, p)
		}
		got <- lines
	}()
	time.Sleep(1500 * time.Millisecond) // a progress record
	close(release)
	select {
	case lines := <-got:
		if len(lines) == 0 {
			t.Fatal("following from the other server streamed nothing")
		}
		last := lines[len(lines)-1].Job
		if last == nil || !last.Done || last.Moved != 2 || last.Users != 2 || last.Agent != "s1" {
			t.Fatalf("the last line followed from the other server: %+v", last)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("following from the other server did not end with the job")
	}
}
