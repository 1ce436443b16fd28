package fsm

import (
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// Charges add up once per batch; submitted calls keep their order and
// their idempotency; a snapshot carries both.
func TestGatewayState(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) any {
		t.Helper()
		idx++
		return apply(t, f, idx, typ, body)
	}
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	charge := func(ledger string, batch uint64, req, day string, micros int64) {
		t.Helper()
		do(GatewayChargesRequestType, GatewayChargesRequest{Ledger: ledger, Batch: batch, At: now,
			Charges: []gatewaywire.Charge{{Request: req, Session: "s", Day: day, Micros: micros, Usage: gatewaywire.Usage{Input: 1}}}})
	}
	charge("n1/a", 1, "r1", "2026-11-30", 10)
	charge("n1/a", 1, "r1", "2026-11-30", 10) // the same batch sent again
	charge("n2/b", 1, "r2", "2026-12-01", 5)  // another ledger's first batch
	c := f.GatewayCounters()
	if c.Total.Micros != 15 || c.Total.Calls != 2 || c.Days["2026-11-30"].Micros != 10 || c.Sessions["s"].Usage.Input != 2 {
		t.Fatalf("counters %+v", c)
	}
	submit := func(id, key string) any {
		return do(GatewayJobRequestType, GatewayJobRequest{Op: JobOpSubmit, Job: &GatewayJob{Job: gatewaywire.Job{ID: id, Submitted: time.Now()}, Key: key}})
	}
	submit("a", "k1")
	submit("b", "k2")
	if got := submit("c", "k1"); got != "a" {
		t.Fatalf("a second submit with key k1 answered %v, want a", got)
	}
	if q := f.GatewayJobs(gatewaywire.JobQueued); len(q) != 2 || q[0].ID != "a" || q[1].ID != "b" {
		t.Fatalf("queue %+v", q)
	}
	start := GatewayJobRequest{Op: JobOpStart, ID: "a"}
	do(GatewayJobRequestType, start)
	if err, _ := do(GatewayJobRequestType, start).(error); err == nil {
		t.Fatal("a job started twice")
	}
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var out sink
	if err := s.Persist(&out); err != nil {
		t.Fatal(err)
	}
	snap := New()
	if err := snap.Restore(io.NopCloser(&out.Buffer)); err != nil {
		t.Fatal(err)
	}
	if j, ok := snap.GatewayJob("a"); !ok || j.State != gatewaywire.JobRunning {
		t.Fatalf("restored job a: %+v", j)
	}
	if n := snap.GatewayActive(""); n != 2 {
		t.Fatalf("%d active calls after a restore, want 2", n)
	}
	if snap.GatewayCounters().Total.Micros != 15 {
		t.Fatal("restored counters differ")
	}
	// The restored replica still knows which batches it applied.
	idx++
	apply(t, snap, idx, GatewayChargesRequestType, GatewayChargesRequest{Ledger: "n1/a", Batch: 1, At: now,
		Charges: []gatewaywire.Charge{{Request: "r1", Day: "2026-11-30", Micros: 10}}})
	if snap.GatewayCounters().Total.Micros != 15 {
		t.Fatal("a batch applied before the snapshot was applied again after it")
	}
	// A ledger silent for longer than the retention is forgotten.
	idx++
	apply(t, snap, idx, GatewayChargesRequestType, GatewayChargesRequest{Ledger: "n3/c", Batch: 1, At: now.Add(ledgerRetention + time.Hour)})
	snap.mu.RLock()
	_, kept := snap.state.Gateway.Ledgers["n1/a"]
	snap.mu.RUnlock()
	if kept {
		t.Fatal("the mark of a ledger silent for longer than the retention was kept")
	}
}

// The queue index answers the calls queued after a place in order, a
// watcher of one call wakes when it changes, and finished calls are
// forgotten past the retention or the bound, the oldest first.
func TestGatewayQueueIndexAndRetention(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(req GatewayJobRequest) any {
		t.Helper()
		idx++
		return apply(t, f, idx, GatewayJobRequestType, req)
	}
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for i := range 5 {
		id := fmt.Sprintf("j%d", i)
		do(GatewayJobRequest{Op: JobOpSubmit, Job: &GatewayJob{Job: gatewaywire.Job{ID: id, Submitted: t0}, Key: id}})
	}
	ids := func(js []GatewayJob) (out []string) {
		for _, j := range js {
			out = append(out, j.ID)
		}
		return out
	}
	if n := f.GatewayActive(""); n != 5 {
		t.Fatalf("%d active calls, want 5", n)
	}
	if got := ids(f.GatewayQueuedAfter(0)); !slices.Equal(got, []string{"j0", "j1", "j2", "j3", "j4"}) {
		t.Fatalf("queued after 0: %v", got)
	}
	if got := ids(f.GatewayQueuedAfter(3)); !slices.Equal(got, []string{"j3", "j4"}) {
		t.Fatalf("queued after seq 3: %v", got)
	}
	watch := f.WatchGatewayJob("j1")
	do(GatewayJobRequest{Op: JobOpStart, ID: "j1"})
	select {
	case <-watch:
	default:
		t.Fatal("the watcher of j1 was not woken by its start")
	}
	runner := f.WatchGateway()
	do(GatewayJobRequest{Op: JobOpStart, ID: "j0"})
	select {
	case <-runner:
		t.Fatal("the runner was woken by a start")
	default:
	}
	before := f.GatewayCancels()
	do(GatewayJobRequest{Op: JobOpCancel, ID: "j2", At: t0})
	select {
	case <-runner:
	default:
		t.Fatal("the runner was not woken by a cancel")
	}
	if f.GatewayCancels() == before || f.GatewayJobState("j2") != gatewaywire.JobCancelled {
		t.Fatal("the cancel is not counted")
	}
	if got := ids(f.GatewayQueuedAfter(0)); !slices.Equal(got, []string{"j3", "j4"}) {
		t.Fatalf("queued after the starts and the cancel: %v", got)
	}
	if n := f.GatewayActive(""); n != 4 {
		t.Fatalf("%d active calls after a cancel, want 4", n)
	}
	// j0 finishes now; j1 a day and more later: j0 (and the cancelled j2,
	// finished at t0) are forgotten, with their idempotency keys.
	do(GatewayJobRequest{Op: JobOpFinish, ID: "j0", At: t0})
	do(GatewayJobRequest{Op: JobOpFinish, ID: "j1", At: t0.Add(jobRetention + time.Minute)})
	for _, id := range []string{"j0", "j2"} {
		if _, ok := f.GatewayJob(id); ok {
			t.Fatalf("%s finished past the retention and is still kept", id)
		}
	}
	if j, ok := f.GatewayJob("j1"); !ok || j.State != gatewaywire.JobDone {
		t.Fatalf("j1: %+v %v", j, ok)
	}
	// The bound: past maxFinishedJobs the oldest finished go first.
	g := f.state.Gateway
	for i := range maxFinishedJobs + 2 {
		id := fmt.Sprintf("b%d", i)
		do(GatewayJobRequest{Op: JobOpSubmit, Job: &GatewayJob{Job: gatewaywire.Job{ID: id, Submitted: t0}, Key: id}})
		do(GatewayJobRequest{Op: JobOpFinish, ID: id, At: t0.Add(jobRetention + time.Hour)})
	}
	if len(g.finished) != maxFinishedJobs {
		t.Fatalf("%d finished calls kept, want the bound %d", len(g.finished), maxFinishedJobs)
	}
	if _, ok := f.GatewayJob("b0"); ok {
		t.Fatal("the oldest finished call outlived the bound")
	}
	if _, ok := f.GatewayJob(fmt.Sprintf("b%d", maxFinishedJobs+1)); !ok {
		t.Fatal("the newest finished call was dropped")
	}
	if len(g.Keys) > maxFinishedJobs+2 {
		t.Fatalf("%d idempotency keys kept for %d calls", len(g.Keys), len(g.Jobs))
	}
}
