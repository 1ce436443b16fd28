package governor

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPolicyValidate(t *testing.T) {
	cases := []struct {
		name   string
		change func(*Policy)
		err    string // "" means valid
	}{
		{name: "defaults", change: func(*Policy) {}},
		{name: "only cpu and memory", change: func(p *Policy) {
			delete(p.Thresholds, Goroutines)
			delete(p.Thresholds, Mailbox)
		}},
		{name: "low above high", change: func(p *Policy) { p.Thresholds[Memory] = Threshold{Limit: 1, High: 0.7, Low: 0.8} }, err: "low mark"},
		{name: "high over 100%", change: func(p *Policy) { p.Thresholds[CPU] = Threshold{Limit: 1, High: 1.2, Low: 0.5} }, err: "high mark"},
		{name: "no limit", change: func(p *Policy) { p.Thresholds[CPU] = Threshold{High: 0.8, Low: 0.5} }, err: "limit"},
		{name: "unknown resource", change: func(p *Policy) { p.Thresholds[Resource(9)] = Threshold{Limit: 1, High: 0.8} }, err: "unknown"},
		{name: "max below min", change: func(p *Policy) { p.MinWorkers, p.MaxWorkers = 3, 2 }, err: "below min"},
		{name: "no moves allowed", change: func(p *Policy) { p.MaxConcurrentMoves = 0 }, err: "concurrent"},
		{name: "negative cool-down", change: func(p *Policy) { p.UserCoolDown = -time.Second }, err: "negative"},
		{name: "replacement without a window", change: func(p *Policy) { p.GrowthWindow = 0 }, err: "growth window"},
		{name: "replacement off needs no window", change: func(p *Policy) { p.GrowthWindow, p.ReplaceHorizon = 0, 0 }},
		{name: "compact mark at 100%", change: func(p *Policy) { p.CompactBelow = 1 }, err: "compact"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultPolicy()
			tc.change(&p)
			err := p.Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("Validate: %v, want an error about %q", err, tc.err)
			}
		})
	}
}

func TestNew(t *testing.T) {
	if _, err := New(nil, nil); err == nil {
		t.Error("New without rng: no error")
	}
	bad := DefaultPolicy()
	bad.MaxConcurrentMoves = 0
	_, err := New(map[string]Policy{"web": bad}, rand.New(rand.NewPCG(1, 1)))
	if err == nil || !strings.Contains(err.Error(), `checking policy of group "web"`) {
		t.Errorf("New with a bad policy: %v", err)
	}
	// The engine keeps its own copy of a policy's thresholds.
	p := DefaultPolicy()
	e := newEngine(t, p, 1)
	p.Thresholds[Memory] = Threshold{Limit: 1, High: 0.01, Low: 0}
	e.Observe(reading("w-1", t0, 0.1, 0.5, users("u", 3, Usage{})))
	e.Observe(reading("w-2", t0, 0.1, 0.1, nil))
	if ds := e.Decide(t0, 0); len(ds) != 0 {
		t.Errorf("after changing the caller's map: %s", kinds(ds))
	}
}

func TestParseResource(t *testing.T) {
	for _, r := range allResources {
		got, err := ParseResource(r.String())
		if err != nil || got != r {
			t.Errorf("ParseResource(%q) = %v, %v", r, got, err)
		}
	}
	if _, err := ParseResource("load"); err == nil {
		t.Error(`ParseResource("load"): no error`)
	}
}

// TestDeterministic: the same seed, readings and clock give the same
// decisions and the same history.
func TestDeterministic(t *testing.T) {
	run := func() ([]Decision, []Event) {
		e := newEngine(t, DefaultPolicy(), 77)
		var all []Decision
		now := t0
		for i := range 200 {
			for w := range 4 {
				mem := 0.2 + 0.2*float64(w) + 0.05*float64(i%3)
				per := map[string]Usage{}
				for u := range 8 {
					per[fmt.Sprintf("u-%d-%d", w, u)] = Usage{MemGrowth: float64(u + 1), CPU: 0.01 * float64(u)}
				}
				e.Observe(reading(fmt.Sprintf("w-%d", w), now, 0.1*float64(w), mem, per))
			}
			ds := e.Decide(now, i%3)
			all = append(all, ds...)
			doneAll(e, ds, now)
			now = now.Add(7 * time.Second)
		}
		return all, e.Events()
	}
	d1, ev1 := run()
	d2, ev2 := run()
	if len(d1) == 0 {
		t.Fatal("no decisions: the scenario tests nothing")
	}
	if !reflect.DeepEqual(d1, d2) || !reflect.DeepEqual(ev1, ev2) {
		t.Error("two runs with the same seed differ")
	}
}

// TestEventsBounded: the history keeps the last HistorySize events, oldest
// first.
func TestEventsBounded(t *testing.T) {
	e := newEngine(t, DefaultPolicy(), 1)
	now := t0
	total := 0
	for total < HistorySize+50 {
		now = now.Add(time.Minute)
		e.Observe(reading("w-1", now, 0.1, 0.9, users(fmt.Sprint("u", total), 3, Usage{MemGrowth: 1})))
		e.Observe(reading("w-2", now, 0.1, 0.1, nil))
		ds := e.Decide(now, 0)
		doneAll(e, ds, now)
		total += 2 * len(ds) // decided, completed
	}
	evs := e.Events()
	if len(evs) != HistorySize {
		t.Fatalf("%d events, want %d", len(evs), HistorySize)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			t.Fatalf("event %d at %s before event %d at %s", i, evs[i].At, i-1, evs[i-1].At)
		}
	}
	if evs[0].At.Equal(t0.Add(time.Minute)) {
		t.Error("the oldest events were not dropped")
	}
	last := evs[len(evs)-1]
	if last.Kind != KindCompleted || !strings.Contains(last.Reason, "completed: u") {
		t.Errorf("last event = %+v, want the last completion", last)
	}
}

// TestReadings: out-of-order readings are ignored, Done of an unknown
// decision is ignored, and a forgotten worker is gone.
func TestReadings(t *testing.T) {
	p := DefaultPolicy()
	p.UsageWait = 0 // nobody shows any use: draw at once (TestLeaverWaitsForUsage)
	e := newEngine(t, p, 1)
	e.Observe(reading("w-1", t0, 0.1, 0.9, users("u", 3, Usage{})))
	e.Observe(reading("w-1", t0.Add(-time.Second), 0.1, 0.1, nil)) // late: ignored
	e.Observe(reading("w-2", t0, 0.1, 0.1, nil))
	e.Observe(Reading{Group: "web", At: t0}) // no worker: ignored
	e.Done(Decision{ID: 99, Kind: KindRetire, Worker: "w-1"}, true, t0)
	if _, ok := e.workers["w-1"]; !ok {
		t.Fatal("Done of an unknown decision retired w-1")
	}
	ds := e.Decide(t0, 0)
	if len(ds) != 1 || ds[0].Worker != "w-1" {
		t.Fatalf("%s, want a move out of w-1 (the late reading ignored)", kinds(ds))
	}
	e.Done(ds[0], true, t0)
	e.Done(ds[0], false, t0) // twice: ignored
	if n := len(eventsOf(e, KindFailed)); n != 0 {
		t.Errorf("a second Done recorded %d failures", n)
	}
	e.Forget("w-2")
	now := t0.Add(time.Minute)
	e.Observe(reading("w-1", now, 0.1, 0.9, users("u", 3, Usage{})))
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("w-2 forgotten: %s, want a start (no room anywhere)", kinds(ds))
	}
}

// TestStartGrace: a started worker that never reports stops counting after
// StartGrace, and another start may then be decided.
func TestStartGrace(t *testing.T) {
	p := DefaultPolicy()
	e := newEngine(t, p, 1)
	now := t0
	observe := func() { e.Observe(reading("w-1", now, 0.1, 0.9, users("u", 3, Usage{}))) }
	observe()
	ds := e.Decide(now, 0)
	if len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("%s, want a start", kinds(ds))
	}
	e.Done(ds[0], true, now)
	now = now.Add(p.StartGrace - time.Second)
	observe()
	if ds := e.Decide(now, 0); len(ds) != 0 {
		t.Fatalf("within the grace: %s", kinds(ds))
	}
	now = now.Add(time.Second)
	observe()
	if ds := e.Decide(now, 0); len(ds) != 1 || ds[0].Kind != KindStart {
		t.Fatalf("after the grace: %s, want another start", kinds(ds))
	}
	found := false
	for _, ev := range eventsOf(e, KindBlocked) {
		found = found || strings.Contains(ev.Reason, "sent no reading within 2m0s")
	}
	if !found {
		t.Errorf("no event about the lost start in %+v", e.Events())
	}
}

func TestOutlook(t *testing.T) {
	p := DefaultPolicy()
	p.GrowthWindow, p.GrowthMinSamples = time.Minute, 3
	e, err := New(map[string]Policy{"web": p}, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := e.Outlook("w1"); ok {
		t.Fatal("an outlook before any reading")
	}
	t0 := time.Unix(1000, 0)
	for i := range 7 {
		e.Observe(Reading{Worker: "w1", Group: "web", At: t0.Add(time.Duration(i) * 10 * time.Second), CPU: 0.5, Heap: uint64(100<<20 + i*(10<<20))})
	}
	o, ok := e.Outlook("w1")
	if !ok || o.Saturation["cpu"] != 0.5 || len(o.Memory) != 7 {
		t.Fatalf("outlook %+v", o)
	}
	// 1 MiB/s from 160 MiB at t0+60s: the 1 GiB limit 864 s later.
	want := t0.Add(60 * time.Second).Add(864 * time.Second)
	if d := o.Ceiling.Sub(want); d < -time.Second || d > time.Second {
		t.Fatalf("ceiling %v, want %v", o.Ceiling, want)
	}
}
