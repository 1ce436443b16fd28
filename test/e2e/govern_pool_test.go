package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"
)

// poolEvent is an entry of GET /v1/events.
type poolEvent struct {
	Kind   string `json:"kind"`
	ID     uint64 `json:"id"`
	Worker string `json:"worker"`
	User   string `json:"user"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// eventsAt reads an agent's /v1/events (none while it does not answer).
func eventsAt(p *proc) []poolEvent {
	code, body := adminCallAtQuiet(p.admin, "GET", "/v1/events", testToken)
	if code != 200 {
		return nil
	}
	var evs []poolEvent
	_ = json.Unmarshal([]byte(body), &evs)
	return evs
}

// startGovernedPool starts three servers, one worker each, their group
// governed by governance (the inside of its block), probed every 250 ms.
func startGovernedPool(t *testing.T, governance string) ([]*proc, int) {
	return startClusterSpec(t, 3, func(int) procSpec {
		return procSpec{workers: 1,
			group: "  checkpoint_interval = \"off\"\n  governance {\n    enabled = true\n    cpu_limit = 64\n    replace_horizon = \"0s\"\n" + governance + "  }\n",
			// Silence-killing only after 10 s: filling pages under the
			// race detector on a busy machine is slow.
			extra: []string{"probe {\n  interval = \"250ms\"\n  misses = 40\n}\nmove {\n  freeze_timeout = \"30s\"\n}\n"}}
	})
}

// pooled is a person logged in on one server of the pool and placed on a
// given worker.
type pooled struct {
	b  *browser
	tb *tab
}

// placeOn logs user in through p's front and moves them to worker (any
// host's) through the leader's admin API; their page counts once.
func placeOn(t *testing.T, p, leader *proc, user, worker string) pooled {
	t.Helper()
	b := procBrowser(t, p)
	if code, body := b.do("POST", "/login?user="+user); code != 200 {
		t.Fatalf("login %s: %d %s", user, code, body)
	}
	if b.whoami().Worker != worker {
		code, body := adminPost(t, leader.admin, "/v1/users/"+user+"/move", `{"to":"`+worker+`"}`)
		if code != 200 && !strings.Contains(body, "already") {
			t.Fatalf("placing %s on %s: %d %s", user, worker, code, body)
		}
	}
	if w := b.whoami().Worker; w != worker {
		t.Fatalf("%s is on %s, want %s", user, w, worker)
	}
	tb := b.openTab("p")
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 1)
	return pooled{b, tb}
}

// Governance is pool-wide: three hosts, one worker each; one host's worker
// (not the leader's) saturates its memory when one of its six people writes
// 8 MiB in one burst. The leader, reading every host's probes, moves that
// person first (the heaviest grower, not a uniform draw, even when the
// heap shows before the per-person accounting) to another host's worker by
// the one road, explained in its /v1/events; the followers decide nothing;
// the person's page comes through intact.
func TestPoolWideGovernanceMovesTheBurstFirst(t *testing.T) {
	// usage_wait: 40 readings (10 s at the test's 250 ms probe) for the
	// burst to show in its person's numbers; a busy machine under the
	// race detector shows the heap long before.
	ps, leader := startGovernedPool(t, "    memory_limit_mb = 12\n    compact_below = 0\n    user_cool_down = \"10m\"\n    usage_wait = 40\n")
	hot := (leader + 1) % 3
	hotWorker := "s" + strconv.Itoa(hot+1) + ".web-1"
	for i := range 5 {
		// Light: a page that counts once. Who leaves is drawn in
		// proportion to recent growth: the five lights' pages of a few
		// hundred bytes stand about a 0.01 % chance against heavy's
		// 8 MiB (with 8 KiB each, 0.5 %: a CI run met it), a uniform
		// draw five in six.
		placeOn(t, ps[hot], ps[leader], "light"+strconv.Itoa(i), hotWorker)
	}
	// The leader reads the hot worker a few times before the burst: its
	// engine measures a worker's rise from an earlier reading, and one
	// first read already hot is drawn from at once, with what its
	// people's numbers show then.
	time.Sleep(8 * 250 * time.Millisecond)
	heavy := placeOn(t, ps[hot], ps[leader], "heavy", hotWorker)
	heavy.tb.send(map[string]any{"op": "fill", "bytes": 8 << 20})

	var first poolEvent
	waitFor(t, 90*time.Second, "the leader's governance to move someone off "+hotWorker, func() bool {
		for _, e := range eventsAt(ps[leader]) {
			if e.Kind == "move" && e.Worker == hotWorker {
				first = e
				return true
			}
		}
		return false
	})
	if first.User != "heavy" {
		t.Fatalf("the first to leave %s is %s, want the person who grew most in a burst (heavy): %s\nevents: %+v", hotWorker, first.User, first.Reason, eventsAt(ps[leader]))
	}
	if strings.HasPrefix(first.To, "s"+strconv.Itoa(hot+1)+".") || first.To == "" {
		t.Fatalf("heavy moved to %q, want another host's worker", first.To)
	}
	for _, s := range []string{hotWorker + " over memory", "> 85%", "of " + hotWorker + "'s recent memory growth"} {
		if !strings.Contains(first.Reason, s) {
			t.Errorf("reason %q lacks %q", first.Reason, s)
		}
	}
	if strings.Contains(first.Reason, "uniformly") || strings.Contains(first.Reason, "though") {
		t.Errorf("not drawn by who grew: %s", first.Reason)
	}
	waitFor(t, 60*time.Second, "the move to complete", func() bool {
		for _, e := range eventsAt(ps[leader]) {
			if e.Kind == "completed" && e.ID == first.ID {
				return true
			}
			if e.Kind == "failed" && e.ID == first.ID {
				t.Fatalf("the move failed: %+v", e)
			}
		}
		return false
	})
	if w := heavy.b.whoami().Worker; w != first.To {
		t.Fatalf("heavy is on %s, want %s", w, first.To)
	}
	heavy.tb.send(map[string]any{"op": "inc"})
	heavy.tb.drainUntil("count", 2)
	// Only the leader governs.
	for i, p := range ps {
		if i == leader {
			continue
		}
		for _, e := range eventsAt(p) {
			if e.Kind == "move" || e.Kind == "start" || e.Kind == "drain" {
				t.Errorf("follower s%d decided %+v", i+1, e)
			}
		}
	}
}

// A compaction never stalls silently, whichever host runs the worker it
// drains: three hosts, one worker each (4, 2 and 1 people), min_workers 1.
// The quiet group drains the worker with 1 person: the leader moves them
// and has that worker's own host retire it (POST /v1/internal/govern/retire
// when it is not the leader's). Then it drains the next least loaded; a
// person it moved a moment ago is barred by user_cool_down, and the drain
// says whom it waits for and until when, while the others move.
func TestPoolCompactionSaysWhyItWaits(t *testing.T) {
	waits(t)
	ps, leader := startGovernedPool(t, "    memory_limit_mb = 256\n    min_workers = 1\n    compact_after = \"6s\"\n"+
		"    worker_cool_down = \"1s\"\n    user_cool_down = \"10m\"\n")
	w := func(i int) string { return "s" + strconv.Itoa(i+1) + ".web-1" }
	// The worker of 4 carries more memory, so the drained worker's person
	// goes to the worker of 2, which is drained next.
	var people []pooled
	for i := range 4 {
		p := placeOn(t, ps[0], ps[leader], "x"+strconv.Itoa(i), w(0))
		p.tb.send(map[string]any{"op": "fill", "bytes": 4 << 20})
		people = append(people, p)
	}
	for i := range 2 {
		people = append(people, placeOn(t, ps[1], ps[leader], "y"+strconv.Itoa(i), w(1)))
	}
	people = append(people, placeOn(t, ps[2], ps[leader], "z", w(2)))

	var waits poolEvent
	waitFor(t, 120*time.Second, "a drain that says whom it waits for", func() bool {
		for _, e := range eventsAt(ps[leader]) {
			if strings.Contains(e.Reason, "moved lately (user_cool_down 10m0s)") {
				waits = e
				return true
			}
		}
		return false
	})
	evs := eventsAt(ps[leader])
	var movedZ, retiredZ bool
	for _, e := range evs {
		movedZ = movedZ || e.Kind == "move" && e.User == "z" && e.Worker == w(2)
		retiredZ = retiredZ || e.Kind == "completed" && e.Worker == w(2) && strings.HasPrefix(e.Reason, "retire #")
	}
	if !movedZ || !retiredZ {
		t.Fatalf("the first compaction did not move z off %s and retire it (moved %v, retired %v): %+v", w(2), movedZ, retiredZ, evs)
	}
	if !strings.Contains(waits.Reason, "z until") || !strings.Contains(waits.Reason, "the drain ends by") {
		t.Errorf("the wait %q does not name z and when it ends", waits.Reason)
	}
	// Nobody stranded: everyone answers wherever they are, and nobody is
	// left on the retired worker.
	for _, p := range people {
		if got := p.b.whoami().Worker; got == w(2) {
			t.Errorf("%s still on the retired %s", p.b.whoami().User, got)
		}
		p.tb.send(map[string]any{"op": "inc"})
		p.tb.drainUntil("count", 2)
	}
}

// POST /v1/internal/govern/{op} serves agents only: the admin token is
// needed, an unknown call or another host's worker is refused.
func TestGovernRouteRefuses(t *testing.T) {
	ps, leader := startCluster(t, 2)
	other := ps[1-leader]
	for _, c := range []struct {
		path, body, token string
		want              int
	}{
		{"/v1/internal/govern/cordon", `{"worker":"s1.web-1"}`, "wrong", 403},
		{"/v1/internal/govern/frobnicate", `{"worker":"s1.web-1"}`, testToken, 404},
		{"/v1/internal/govern/cordon", `{}`, testToken, 400},
		{"/v1/internal/govern/cordon", `{"worker":"s` + strconv.Itoa(leader+1) + `.web-1"}`, testToken, 404},
		{"/v1/internal/govern/start", `{"group":"nope"}`, testToken, 404},
		{"/v1/internal/govern/cordon", `{"worker":"s` + strconv.Itoa(2-leader) + `.web-1"}`, testToken, 200},
		{"/v1/internal/govern/uncordon", `{"worker":"s` + strconv.Itoa(2-leader) + `.web-1"}`, testToken, 200},
	} {
		code, body := adminDoAs(t, other.admin, "POST", c.path, c.token, c.body)
		if code != c.want {
			t.Errorf("POST %s %s: %d %s, want %d", c.path, c.body, code, body, c.want)
		}
	}
}
