package api

import (
	"context"
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
