package fsm

import (
	"io"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Charges add up once per request; submitted calls keep their order and
// their idempotency; a snapshot carries both.
func TestGatewayState(t *testing.T) {
	f := New()
	idx := uint64(0)
	do := func(typ MessageType, body any) any {
		t.Helper()
		idx++
		return apply(t, f, idx, typ, body)
	}
	charge := func(req, day string, micros int64) {
		t.Helper()
		do(GatewayChargesRequestType, GatewayChargesRequest{Charges: []gateway.Charge{{Request: req, Session: "s", Day: day, Micros: micros, Usage: gateway.Usage{Input: 1}}}})
	}
	charge("r1", "2026-11-30", 10)
	charge("r1", "2026-11-30", 10) // the same request again
	charge("r2", "2026-12-01", 5)
	c := f.GatewayCounters()
	if c.Total.Micros != 15 || c.Total.Calls != 2 || c.Days["2026-11-30"].Micros != 10 || c.Sessions["s"].Usage.Input != 2 {
		t.Fatalf("counters %+v", c)
	}
	submit := func(id, key string) any {
		return do(GatewayJobRequestType, GatewayJobRequest{Op: JobOpSubmit, Job: &GatewayJob{Job: gateway.Job{ID: id, Submitted: time.Now()}, Key: key}})
	}
	submit("a", "k1")
	submit("b", "k2")
	if got := submit("c", "k1"); got != "a" {
		t.Fatalf("a second submit with key k1 answered %v, want a", got)
	}
	if q := f.GatewayJobs(gateway.JobQueued); len(q) != 2 || q[0].ID != "a" || q[1].ID != "b" {
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
	if j, ok := snap.GatewayJob("a"); !ok || j.State != gateway.JobRunning {
		t.Fatalf("restored job a: %+v", j)
	}
	if snap.GatewayCounters().Total.Micros != 15 {
		t.Fatal("restored counters differ")
	}
}
