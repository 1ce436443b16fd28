package cluster

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
)

// fakeServer is a server as the share table sees it: it runs up to its
// capacity, which it sets from each grant, and keeps running what it
// started when its capacity drops or its lease lapses.
type fakeServer struct {
	name, process string
	capacity      int
	running       int
	queued        int
	expires       time.Time
	down          bool // cut off: neither renews nor is heard
	stopped       bool // stopped after its calls ended (and said so): comes back as a new process
}

// TestSharesNeverPassTheLimit drives a share table with servers whose
// demand shifts, which are cut off and come back, and whose processes
// restart, and checks at every step that what the servers may run (the
// calls they run, and what their leases let them start) never passes the
// model's limit, and that a busy server gets slots.
func TestSharesNeverPassTheLimit(t *testing.T) {
	const limit = 30
	grace := 3 * time.Second
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	tbl := newShareTable(map[string]int{"m": limit}, map[string]fsm.GatewayShare{}, grace, clock)
	rng := rand.New(rand.NewPCG(1, 2))
	servers := []*fakeServer{{name: "s1", process: "a"}, {name: "s2", process: "a"}, {name: "s3", process: "a"}}
	granted, terms, leaves := 0, 1, 0
	// raftLog is the ceilings as the log has them: a new leader's table
	// starts from them.
	raftLog := map[string]fsm.GatewayShare{}
	for step := 0; step < 20000; step++ {
		now = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
		s := servers[rng.IntN(len(servers))]
		if rng.IntN(500) == 0 {
			// A leader change: the new leader knows the log alone.
			tbl = newShareTable(map[string]int{"m": limit}, maps.Clone(raftLog), grace, clock)
			terms++
		}
		switch r := rng.IntN(100); {
		case r < 2 && !s.stopped:
			s.down = !s.down
		case r < 3 && (!s.down || s.stopped):
			// The process restarts: its calls die with it.
			s.process = fmt.Sprint(step)
			s.capacity, s.running, s.queued, s.expires = 0, 0, 0, time.Time{}
			s.down, s.stopped = false, false
		case r < 8 && !s.down && s.running == 0:
			// A graceful stop: its calls have ended, its lease loop
			// stopped, and it says so.
			s.capacity, s.queued, s.expires = 0, 0, time.Time{}
			s.down, s.stopped = true, true
			if drop := tbl.leave(leaseAsk{Server: s.name, Process: s.process, Leaving: true}); drop != nil {
				tbl.applyLowered(drop)
				for _, d := range drop.Drop {
					delete(raftLog, d)
				}
			}
			leaves++
		}
		// Calls end and arrive.
		for _, x := range servers {
			if x.running > 0 && rng.IntN(3) == 0 {
				x.running--
			}
			x.queued = max(0, x.queued+rng.IntN(5)-2)
			if now.After(x.expires) {
				x.capacity = 0
				if now.After(x.expires.Add(grace)) {
					x.running = 0 // cut
				}
			}
			for x.queued > 0 && x.running < x.capacity && now.Before(x.expires) {
				x.queued--
				x.running++
			}
		}
		if !s.down {
			sent := now
			g, raise := tbl.grant(leaseAsk{Server: s.name, Process: s.process,
				Models: map[string]load{"m": {Capacity: s.capacity, InFlight: s.running, Queued: s.queued}}})
			if raise != nil {
				tbl.raised(s.name, *raise)
				raftLog[s.name] = *raise
			}
			s.capacity = g.Shares["m"]
			s.expires = sent.Add(g.ValidFor - leaseMargin)
			granted += g.Shares["m"]
		}
		if step%500 == 0 {
			if req := tbl.lowered(); req != nil {
				tbl.applyLowered(req)
				maps.Copy(raftLog, req.Set)
				for _, d := range req.Drop {
					delete(raftLog, d)
				}
			}
		}
		total := 0
		for _, x := range servers {
			may := x.running
			if now.Before(x.expires) {
				may = max(may, x.capacity)
			}
			total += may
		}
		if total > limit {
			t.Fatalf("step %d: the servers may run %d calls; the limit is %d (%+v %+v %+v)", step, total, limit, *servers[0], *servers[1], *servers[2])
		}
	}
	if granted == 0 || terms < 10 || leaves < 10 {
		t.Fatalf("%d slots granted over %d terms, %d graceful stops: the test did not exercise the table", granted, terms, leaves)
	}
}

// A server that stops after its calls ended hands its share on at once:
// the others get it at their next renewal, and a leader elected next does
// not wait for its ceiling either. A leave from a process the table no
// longer knows (the server came back since) changes nothing.
func TestSharesHandedOnWhenAServerLeaves(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	tbl := newShareTable(map[string]int{"m": 30}, map[string]fsm.GatewayShare{}, time.Minute, clock)
	now = now.Add(leaseFor)
	ask := func(tb *shareTable, server, process string, running, queued, capacity int) int {
		g, raise := tb.grant(leaseAsk{Server: server, Process: process, Models: map[string]load{"m": {Capacity: capacity, InFlight: running, Queued: queued}}})
		if raise != nil {
			tb.raised(server, *raise)
		}
		return g.Shares["m"]
	}
	caps := map[string]int{}
	for range 3 {
		caps["s1"] = ask(tbl, "s1", "p1", caps["s1"], 40, caps["s1"])
		caps["s2"] = ask(tbl, "s2", "p", 0, 0, caps["s2"])
	}
	if caps["s1"] < 25 {
		t.Fatalf("the busy s1 got %d of 30", caps["s1"])
	}
	// s1's calls end as it drains; it stops and says so.
	now = now.Add(100 * time.Millisecond)
	if got := ask(tbl, "s2", "p", 0, 40, caps["s2"]); got > 30-caps["s1"] {
		t.Fatalf("s2 got %d while s1 may run %d of 30", got, caps["s1"])
	}
	if drop := tbl.leave(leaseAsk{Server: "s1", Process: "old", Leaving: true}); drop != nil || tbl.holders["s1"] == nil {
		t.Fatal("a leave from a process the table does not know changed it")
	}
	drop := tbl.leave(leaseAsk{Server: "s1", Process: "p1", Leaving: true})
	if drop == nil || len(drop.Drop) != 1 || drop.Drop[0] != "s1" {
		t.Fatalf("s1's leave dropped %+v from the log, want its ceiling", drop)
	}
	tbl.applyLowered(drop)
	if got := ask(tbl, "s2", "p", 0, 40, 0); got != 30 {
		t.Fatalf("once s1 left, s2 got %d of 30 at its next renewal", got)
	}
	// A new leader, from the log: nothing of s1 to wait for.
	tb2 := newShareTable(map[string]int{"m": 30}, maps.Clone(tbl.ceilings), time.Minute, clock)
	if got := ask(tb2, "s2", "p", 30, 40, 30); got != 30 {
		t.Fatalf("a new leader after s1 left granted s2 %d of 30", got)
	}
}

// TestSharesFollowDemand: a server with calls waiting gets the slots the
// others do not use, and a new leader grants nothing past the ceilings in
// the log until the servers it has not heard from may have ended their
// calls.
func TestSharesFollowDemand(t *testing.T) {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	tbl := newShareTable(map[string]int{"m": 30}, map[string]fsm.GatewayShare{}, time.Second, clock)
	now = now.Add(leaseFor) // past the term's first lease
	ask := func(tb *shareTable, server string, running, queued, capacity int) int {
		g, raise := tb.grant(leaseAsk{Server: server, Process: "p", Models: map[string]load{"m": {Capacity: capacity, InFlight: running, Queued: queued}}})
		if raise != nil {
			tb.raised(server, *raise)
		}
		return g.Shares["m"]
	}
	// Renewal rounds: a share lowered is handed on at the next.
	caps := map[string]int{}
	for range 3 {
		for _, s := range []string{"s2", "s3", "s1"} {
			queued := 0
			if s == "s1" {
				queued = 40
			}
			caps[s] = ask(tbl, s, 0, queued, caps[s])
		}
	}
	if caps["s1"] < 20 || caps["s1"]+caps["s2"]+caps["s3"] > 30 {
		t.Fatalf("a busy server beside two idle ones got %d slots of 30 (%v)", caps["s1"], caps)
	}
	// A new leader, with s1's ceiling in the log: s1 has not renewed.
	ceilings := map[string]fsm.GatewayShare{}
	for k, v := range tbl.ceilings {
		ceilings[k] = v
	}
	held := ceilings["s1"].Models["m"]
	tb2 := newShareTable(map[string]int{"m": 30}, ceilings, time.Second, clock)
	if got := ask(tb2, "s2", 0, 40, 0); got > 30-held {
		t.Fatalf("a new leader granted %d while s1 may still run %d of 30", got, held)
	}
	now = now.Add(leaseFor + time.Second + time.Millisecond)
	if got := ask(tb2, "s2", 0, 40, 0); got != 30 {
		t.Fatalf("once s1's lease and grace passed, s2 got %d of 30", got)
	}
}

// The leader tells each server what the others run on each deployment,
// for least-busy routing across the cluster.
func TestSharesTellTheOthersBusy(t *testing.T) {
	now := time.Unix(0, 0)
	tbl := newShareTable(map[string]int{"m": 30}, map[string]fsm.GatewayShare{}, time.Second, func() time.Time { return now })
	now = now.Add(leaseFor)
	ask := func(server string, busy map[string]int) leaseGrant {
		g, _ := tbl.grant(leaseAsk{Server: server, Process: "p", Models: map[string]load{"m": {}},
			Deployments: map[string]map[string]int{"m": busy}})
		return g
	}
	ask("s1", map[string]int{"a": 3, "b": 1})
	ask("s2", map[string]int{"a": 2})
	if g := ask("s3", map[string]int{"b": 7}); g.Busy["m"]["a"] != 5 || g.Busy["m"]["b"] != 1 {
		t.Fatalf("s3 was told %v; the others run a: 5, b: 1", g.Busy)
	}
	now = now.Add(leaseFor + time.Millisecond) // s1 and s2 lapsed: not counted
	if g := ask("s3", map[string]int{"b": 7}); len(g.Busy["m"]) != 0 {
		t.Fatalf("s3 was told %v of servers whose leases lapsed", g.Busy)
	}
}
