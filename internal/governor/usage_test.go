package governor

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestUsageSince(t *testing.T) {
	const mib = 1 << 20
	cases := []struct {
		name    string
		before  *Totals
		now     Totals
		elapsed time.Duration
		want    Usage
	}{
		{"no earlier reading: the whole state is growth", nil, Totals{BusySeconds: 3, StateBytes: 72 * mib, Queued: 2}, 2 * time.Second, Usage{MemGrowth: 72 * mib, Mailbox: 2}},
		{"growth and cpu between readings", &Totals{BusySeconds: 1, StateBytes: 10 * mib}, Totals{BusySeconds: 2, StateBytes: 14 * mib}, 2 * time.Second, Usage{CPU: 0.5, MemGrowth: 4 * mib}},
		{"totals went backwards: counted from zero", &Totals{BusySeconds: 5, StateBytes: 10 * mib}, Totals{BusySeconds: 1, StateBytes: 3 * mib}, time.Second, Usage{MemGrowth: 3 * mib}},
		{"no time between readings: no cpu", &Totals{BusySeconds: 1, StateBytes: mib}, Totals{BusySeconds: 2, StateBytes: 2 * mib}, 0, Usage{MemGrowth: mib}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := UsageSince(tc.before, tc.now, tc.elapsed); got != tc.want {
				t.Fatalf("UsageSince = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// A person who wrote 72 MiB in one burst before their first reading is the
// one who leaves a worker over its memory mark, not a uniform draw.
func TestBurstNewcomerLeavesFirst(t *testing.T) {
	const mib = 1 << 20
	for seed := range uint64(20) {
		e := newEngine(t, DefaultPolicy(), seed)
		per := map[string]Usage{}
		for i := range 9 {
			// Earlier readings: they grew 64 KiB each since.
			before := &Totals{BusySeconds: 1, StateBytes: 4 * mib}
			per[fmt.Sprintf("old-%d", i)] = UsageSince(before, Totals{BusySeconds: 1.1, StateBytes: 4*mib + 64<<10}, 2*time.Second)
		}
		per["burst"] = UsageSince(nil, Totals{BusySeconds: 0.2, StateBytes: 72 * mib}, 2*time.Second)
		e.Observe(reading("w-1", t0, 0.05, 0.91, per))
		e.Observe(reading("w-2", t0, 0.05, 0.10, users("b", 2, Usage{})))
		ds := ofKind(e.Decide(t0, 0), KindMove)
		if len(ds) != 1 {
			t.Fatalf("seed %d: decisions %s, want one move", seed, kinds(ds))
		}
		if ds[0].User != "burst" || strings.Contains(ds[0].Reason, "uniformly") {
			t.Fatalf("seed %d: %s leaves first (%s), want the burst", seed, ds[0].User, ds[0].Reason)
		}
	}
}

// A failed start is not tried again before WorkerCoolDown: the caller that
// cannot start a worker (no host of the group at hand) is not asked every
// round, and the wait is explained.
func TestFailedStartWaits(t *testing.T) {
	p := DefaultPolicy()
	e := newEngine(t, p, 1)
	now := t0
	observe := func() {
		e.Observe(reading("w-1", now, 0.1, 0.90, users("u", 4, Usage{MemGrowth: 1})))
		e.Observe(reading("w-2", now, 0.1, 0.80, users("v", 4, Usage{MemGrowth: 1})))
	}
	observe()
	ds := e.Decide(now, 0)
	if len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("decisions = %s, want one start", kinds(ds))
	}
	e.Done(ds[0], false, now)
	failedAt := now
	for now = now.Add(5 * time.Second); now.Before(failedAt.Add(p.WorkerCoolDown)); now = now.Add(5 * time.Second) {
		observe()
		if more := e.Decide(now, 0); len(more) != 0 {
			t.Fatalf("%s after a failed start: %s, want none", now.Sub(failedAt), kinds(more))
		}
	}
	found := false
	for _, ev := range eventsOf(e, KindBlocked) {
		found = found || strings.Contains(ev.Reason, "the last start failed: next try at "+failedAt.Add(p.WorkerCoolDown).Format("15:04:05"))
	}
	if !found {
		t.Errorf("the wait is not explained: %+v", e.Events())
	}
	observe()
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("after the cool-down: %s, want a start again", kinds(ds))
	}
}
