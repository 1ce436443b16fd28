package governor

import (
	"strings"
	"testing"
	"time"
)

// lights is a worker's people who each grew a little, and burst (when
// grew > 0) the one who grew by grew bytes.
func lights(grew float64) map[string]Usage {
	per := users("light", 5, Usage{MemGrowth: 128 << 10})
	per["burst"] = Usage{MemGrowth: grew}
	return per
}

// TestLeaverWaitsForUsage: a probe may show a worker's memory jump before
// (or after) its per-person accounting shows who grew. The engine draws
// who leaves only from readings whose people's numbers show the rise, waits
// up to UsageWait readings for them and says so, then draws with what
// there is.
func TestLeaverWaitsForUsage(t *testing.T) {
	const mib = 1 << 20
	type step struct {
		mem  float64 // w-1's memory, a fraction of 1 GiB
		per  map[string]Usage
		want string // who leaves at this reading; "" for nobody
	}
	cases := []struct {
		name  string
		wait  int
		steps []step
		// blocked and reason are substrings of the wait's event and of the
		// move's reason.
		blocked, reason string
	}{
		{
			name: "heap before the people's numbers: wait a reading, then the burst",
			wait: 2,
			steps: []step{
				{mem: 0.50, per: lights(0)},
				{mem: 0.90, per: lights(0)},                        // 410 MiB more, nobody's growth shows it
				{mem: 0.90, per: lights(400 * mib), want: "burst"}, // now it does
			},
			blocked: "its people grew 1.2 MiB of its 410 MiB rise: waiting up to 2 readings",
			reason:  "used 100% of w-1's recent memory growth",
		},
		{
			name: "the people's numbers before the heap: the burst at once",
			wait: 2,
			steps: []step{
				{mem: 0.50, per: lights(0)},
				{mem: 0.50, per: lights(400 * mib)}, // written, not yet in the heap
				{mem: 0.90, per: lights(0), want: "burst"},
			},
			reason: "used 100% of w-1's recent memory growth",
		},
		{
			name: "never shown: after UsageWait readings, drawn with what there is",
			wait: 2,
			steps: []step{
				{mem: 0.50, per: users("u", 4, Usage{})},
				{mem: 0.90, per: users("u", 4, Usage{})},
				{mem: 0.90, per: users("u", 4, Usage{})},
				{mem: 0.90, per: users("u", 4, Usage{}), want: "u-*"},
			},
			blocked: "its people grew 0 B of its 410 MiB rise: waiting up to 2 readings",
			reason:  "drawn uniformly: nobody on w-1 had recent memory growth after 2 readings",
		},
		{
			name: "partly shown: after UsageWait readings, the draw says so",
			wait: 1,
			steps: []step{
				{mem: 0.50, per: lights(0)},
				{mem: 0.90, per: lights(0)},
				{mem: 0.90, per: lights(0), want: "light-*"},
			},
			blocked: "waiting up to 1 reading",
			reason:  "though its people grew 1.2 MiB of its 410 MiB rise after 1 reading",
		},
		{
			name: "no wait: drawn at once",
			wait: 0,
			steps: []step{
				{mem: 0.50, per: users("u", 4, Usage{})},
				{mem: 0.90, per: users("u", 4, Usage{}), want: "u-*"},
			},
			reason: "drawn uniformly",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(20) {
				p := DefaultPolicy()
				p.UsageWait = tc.wait
				e := newEngine(t, p, seed)
				now := t0
				var moved Decision
				for i, s := range tc.steps {
					now = now.Add(2 * time.Second)
					e.Observe(reading("w-1", now, 0.05, s.mem, s.per))
					e.Observe(reading("w-2", now, 0.05, 0.10, users("b", 2, Usage{})))
					ds := ofKind(e.Decide(now, 0), KindMove)
					if s.want == "" {
						if len(ds) != 0 {
							t.Fatalf("seed %d, reading %d: %s, want nobody drawn yet", seed, i, kinds(ds))
						}
						continue
					}
					if len(ds) != 1 {
						t.Fatalf("seed %d, reading %d: %s, want one move", seed, i, kinds(ds))
					}
					moved = ds[0]
					if want, ok := strings.CutSuffix(s.want, "*"); ok && !strings.HasPrefix(moved.User, want) || !ok && moved.User != want {
						t.Fatalf("seed %d, reading %d: %s leaves (%s), want %s", seed, i, moved.User, moved.Reason, s.want)
					}
				}
				if !strings.Contains(moved.Reason, tc.reason) {
					t.Errorf("seed %d: reason %q lacks %q", seed, moved.Reason, tc.reason)
				}
				waits := 0
				for _, ev := range eventsOf(e, KindBlocked) {
					if strings.Contains(ev.Reason, "waiting up to") {
						waits++
						if tc.blocked == "" || !strings.Contains(ev.Reason, tc.blocked) {
							t.Errorf("seed %d: wait %q, want one with %q", seed, ev.Reason, tc.blocked)
						}
					}
				}
				if want := min(1, len(tc.blocked)); waits != want {
					t.Errorf("seed %d: %d wait events, want %d (once per wait)", seed, waits, want)
				}
			}
		})
	}
}

// A wait ends when the worker cools: a later rise waits again.
func TestUsageWaitResets(t *testing.T) {
	e := newEngine(t, DefaultPolicy(), 1)
	now := t0
	observe := func(mem float64, per map[string]Usage) []Decision {
		now = now.Add(2 * time.Second)
		e.Observe(reading("w-1", now, 0.05, mem, per))
		e.Observe(reading("w-2", now, 0.05, 0.10, nil))
		return ofKind(e.Decide(now, 0), KindMove)
	}
	observe(0.50, lights(0))
	for i := range 3 { // hot and unexplained for 3 readings: drawn at the third
		if ds := observe(0.90, lights(0)); len(ds) != min(1, i/2) {
			t.Fatalf("reading %d: %s", i, kinds(ds))
		} else if len(ds) == 1 {
			e.Done(ds[0], true, now)
		}
	}
	observe(0.50, lights(0)) // cooled
	now = now.Add(time.Minute)
	if ds := observe(0.90, lights(0)); len(ds) != 0 {
		t.Fatalf("a new rise drew at once: %s", kinds(ds))
	}
}

func TestUsageWaitValidated(t *testing.T) {
	p := DefaultPolicy()
	p.UsageWait = -1
	if err := p.Validate(); err == nil || !strings.Contains(err.Error(), "usage wait") {
		t.Fatalf("Validate = %v, want a negative usage wait refused", err)
	}
}
