package store

import (
	"errors"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestAllOrNothing: a request over {x, y} while y is held waits without
// holding x; when y is released it gets both at once, with their content.
func TestAllOrNothing(t *testing.T) {
	s := New()
	if err := write(t, s, map[string]string{"x": `5`, "y": `6`}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, 10, ada, 0, "y")
	if res := mustAcquire(t, s, 11, bob, 0, "x", "y"); len(res.Granted) != 0 {
		t.Fatalf("{x,y} granted while y is held")
	}
	gi, ok := s.Grant(11)
	if !ok || gi.State != StateWaiting || gi.Token != 0 || gi.Content != nil || gi.Position != 1 {
		t.Fatalf("waiting request = %+v", gi)
	}
	for _, g := range s.Grants() {
		if g.State == StateHeld && slices.Contains(g.Paths, "x") {
			t.Fatalf("x is held by %d while its request waits", g.ID)
		}
	}
	if _, err := s.Commit(11, 0, rawMap(map[string]string{"x": `1`}), nil, 0); !errors.Is(err, ErrStaleGrant) {
		t.Fatalf("commit of a waiting request: %v", err)
	}
	res := mustCommit(t, s, 10, map[string]string{"y": `7`}, nil, 5)
	if got := grantedIDs(res); !slices.Equal(got, []uint64{11}) {
		t.Fatalf("granted %v, want [11]", got)
	}
	g := res.Granted[0]
	want := map[string]string{"x": `5`, "y": `7`}
	if !maps.Equal(textMap(g.Content), want) || g.GrantedAt != 5 || g.State != StateHeld {
		t.Fatalf("granted %+v, want content %v at 5", g, want)
	}
	checkInvariants(t, s)
}

// TestFIFO: a later conflicting request never overtakes an earlier waiter,
// even over a path that is free; a later unrelated request may.
func TestFIFO(t *testing.T) {
	type step struct {
		release bool // release id instead of acquiring it
		id      uint64
		paths   []string
		granted []uint64 // ids the step grants, in order
	}
	acq := func(id uint64, granted []uint64, paths ...string) step {
		return step{id: id, paths: paths, granted: granted}
	}
	rel := func(id uint64, granted ...uint64) step {
		return step{release: true, id: id, granted: granted}
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"same path in arrival order", []step{
			acq(1, []uint64{1}, "a"), acq(2, nil, "a"), acq(3, nil, "a"),
			rel(1, 2), rel(2, 3), rel(3),
		}},
		{"no overtaking over a free path", []step{
			acq(1, []uint64{1}, "a"), acq(2, nil, "a", "b"), acq(3, nil, "b"),
			rel(1, 2), rel(2, 3),
		}},
		{"unrelated later request passes", []step{
			acq(1, []uint64{1}, "a"), acq(2, nil, "a"), acq(3, []uint64{3}, "c"), acq(4, []uint64{4}, "a-b"),
		}},
		{"prefix conflicts in the queue", []step{
			acq(1, []uint64{1}, "a/b"), acq(2, nil, "a"), acq(3, nil, "a/c"), acq(4, nil, "a/bc"),
			acq(5, []uint64{5}, "b"), rel(1, 2), rel(2, 3, 4),
		}},
		{"cancelling a waiter lets the next one through", []step{
			acq(1, []uint64{1}, "a"), acq(2, nil, "a", "b"), acq(3, nil, "b"), rel(2, 3),
		}},
		{"one release grants several, in order", []step{
			acq(1, []uint64{1}, "a", "b"), acq(2, nil, "a"), acq(3, nil, "b"), acq(4, nil, "a/x"),
			rel(1, 2, 3), rel(2, 4),
		}},
		{"a waiter blocks only what conflicts with it", []step{
			acq(1, []uint64{1}, "a"), acq(2, nil, "a", "b/x"), acq(3, []uint64{3}, "b/y"), acq(4, nil, "b"),
			rel(3), rel(1, 2), rel(2, 4),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			var lastToken uint64
			for i, st := range tc.steps {
				var res Result
				if st.release {
					res = mustRelease(t, s, st.id, int64(i))
				} else {
					res = mustAcquire(t, s, st.id, ada, int64(i), st.paths...)
				}
				if got := grantedIDs(res); !slices.Equal(got, append([]uint64{}, st.granted...)) {
					t.Fatalf("step %d: granted %v, want %v", i, got, st.granted)
				}
				for _, g := range res.Granted {
					if g.Token <= lastToken {
						t.Fatalf("step %d: token %d after %d", i, g.Token, lastToken)
					}
					lastToken = g.Token
				}
				checkInvariants(t, s)
			}
		})
	}
}

// TestNoStarvation: a request over every path, arriving in a stream of
// small requests that always keep some path held, is granted once the
// grants ahead of it end, and nothing that arrived after it and conflicts
// with it is granted before it.
func TestNoStarvation(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	universe := []string{"a", "b", "c", "d"}
	s := New()
	id, now := uint64(0), int64(0)
	const big = 1000 // id of the big request
	var held []uint64
	bigGranted, deadline := false, -1
	for step := range 200 {
		now += ms
		if len(held) > 0 { // the oldest holder finishes
			res := mustRelease(t, s, held[0], now)
			held = held[1:]
			for _, g := range res.Granted {
				held = append(held, g.ID)
				if g.ID == big {
					bigGranted = true
				} else if !bigGranted && g.ID > big {
					t.Fatalf("step %d: %d %v granted before the earlier %d", step, g.ID, g.Paths, big)
				}
			}
		}
		if step == 20 {
			// Everything ahead of it conflicts with it and ends one per step.
			st := s.Stats()
			deadline = step + st.Held + st.Waiting
			if res := mustAcquire(t, s, big, cyd, now, universe...); len(res.Granted) != 0 {
				t.Fatalf("big request granted at once")
			}
			id = big
		}
		for range 2 { // two arrivals per step: the holders never run out
			id++
			res := mustAcquire(t, s, id, ada, now, universe[r.IntN(len(universe))])
			held = append(held, grantedIDs(res)...)
		}
		checkInvariants(t, s)
		if step == deadline && !bigGranted {
			t.Fatalf("step %d: big request still waiting, %d grants were ahead of it", step, deadline-20)
		}
	}
	if !bigGranted {
		t.Fatal("big request starved")
	}
}

// TestFIFOProperty: under a random stream of requests over nested paths,
// with holders releasing after random delays, every request is eventually
// granted, held grants never conflict, and any two conflicting requests are
// granted in the order they arrived (their tokens are in id order).
func TestFIFOProperty(t *testing.T) {
	universe := []string{"a", "a/b", "a/b/c", "a/bc", "a/d", "b", "b/x", "b/y", "c", "c/z", "d", "d/e/f"}
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 99))
		s := New()
		type rec struct {
			paths []string
			token uint64
		}
		recs := map[uint64]*rec{}
		release := map[uint64]int{} // held id → step at which it releases
		var now int64
		note := func(res Result, step int) {
			for _, g := range res.Granted {
				recs[g.ID].token = g.Token
				release[g.ID] = step + 1 + r.IntN(4)
			}
		}
		const arrivals = 400
		for step := 0; step < arrivals || len(recs) > 0 && len(release) > 0; step++ {
			now += ms
			for _, id := range slices.Sorted(maps.Keys(release)) {
				if release[id] <= step {
					delete(release, id)
					note(mustRelease(t, s, id, now), step)
				}
			}
			if step < arrivals {
				paths := make([]string, 1+r.IntN(3))
				for i := range paths {
					paths[i] = universe[r.IntN(len(universe))]
				}
				id := uint64(step + 1)
				recs[id] = &rec{paths: paths}
				note(mustAcquire(t, s, id, ada, now, paths...), step)
			}
			checkInvariants(t, s)
		}
		if st := s.Stats(); st.Held != 0 || st.Waiting != 0 {
			t.Fatalf("seed %d: %d held, %d waiting at the end", seed, st.Held, st.Waiting)
		}
		for a, ra := range recs {
			if ra.token == 0 {
				t.Fatalf("seed %d: request %d never granted", seed, a)
			}
			for b, rb := range recs {
				if a < b && conflictOracle(ra.paths, rb.paths) && ra.token > rb.token {
					t.Fatalf("seed %d: %d %v (token %d) granted after the later conflicting %d %v (token %d)",
						seed, a, ra.paths, ra.token, b, rb.paths, rb.token)
				}
			}
		}
	}
}

// TestReleaseOwners: ReleaseUser ends exactly that person's grants and
// requests on that worker, ReleaseWorker exactly that worker's, and the
// requests they blocked are granted.
func TestReleaseOwners(t *testing.T) {
	s := New()
	mustAcquire(t, s, 1, ada, 0, "a")
	mustAcquire(t, s, 2, bob, 0, "b")
	mustAcquire(t, s, 3, cyd, 0, "a")
	mustAcquire(t, s, 4, ada, 0, "b")
	mustAcquire(t, s, 5, cyd, 0, "c")
	adaElsewhere := Owner{Worker: "web-2#1", User: "ada"}
	mustAcquire(t, s, 6, adaElsewhere, 0, "d")

	res := s.ReleaseUser("web-1#1", "ada", 10)
	if got := endedIDs(res); !slices.Equal(got, []uint64{1, 4}) {
		t.Fatalf("ReleaseUser ended %v, want [1 4]", got)
	}
	for _, e := range res.Ended {
		if e.Reason != EndUserGone || e.Owner != ada {
			t.Fatalf("ended %+v", e)
		}
	}
	if res.Ended[0].Token == 0 || res.Ended[1].Token != 0 {
		t.Fatalf("held grant should report its token, waiting request none: %+v", res.Ended)
	}
	if got := grantedIDs(res); !slices.Equal(got, []uint64{3}) || res.Granted[0].GrantedAt != 10 {
		t.Fatalf("ReleaseUser granted %+v, want 3 at 10", res.Granted)
	}
	checkInvariants(t, s)

	res = s.ReleaseWorker("web-1#1", 11)
	if got := endedIDs(res); !slices.Equal(got, []uint64{2}) || res.Ended[0].Reason != EndWorkerGone {
		t.Fatalf("ReleaseWorker ended %+v, want [2]", res.Ended)
	}
	res = s.ReleaseWorker("web-2#1", 12)
	if got := endedIDs(res); !slices.Equal(got, []uint64{3, 5, 6}) {
		t.Fatalf("ReleaseWorker ended %v, want [3 5 6]", got)
	}
	if res = s.ReleaseWorker("web-3#1", 13); len(res.Ended)+len(res.Granted) != 0 {
		t.Fatalf("ReleaseWorker of a stranger: %+v", res)
	}
	if st := s.Stats(); st.Held+st.Waiting != 0 {
		t.Fatalf("left %+v", st)
	}
	checkInvariants(t, s)
}

// TestLeases: Expire revokes exactly the grants whose lease has ended
// (granted-at + lease <= now), grants the waiters with the Expire's Now as
// their granted-at, NextExpiry follows, and time never runs backwards.
func TestLeases(t *testing.T) {
	s := New()
	acquire := func(id uint64, lease time.Duration, now int64, paths ...string) Result {
		t.Helper()
		res, err := s.Acquire(id, ada, paths, lease, now)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if s.NextExpiry() != 0 {
		t.Fatal("NextExpiry of an empty store")
	}
	acquire(1, 10*time.Millisecond, 0, "a")
	acquire(2, 20*time.Millisecond, 0, "b")
	acquire(3, 30*time.Millisecond, 0, "c")
	acquire(4, 10*time.Millisecond, 1*ms, "a")
	acquire(5, 50*time.Millisecond, 2*ms, "b")
	if got := s.NextExpiry(); got != 10*ms {
		t.Fatalf("NextExpiry = %d, want %d", got, 10*ms)
	}
	if res := s.Expire(10*ms - 1); len(res.Ended)+len(res.Granted) != 0 {
		t.Fatalf("Expire before any lease ended: %+v", res)
	}

	res := s.Expire(10 * ms) // exactly at the end of 1's lease
	if got := endedIDs(res); !slices.Equal(got, []uint64{1}) || res.Ended[0].Reason != EndExpired {
		t.Fatalf("Expire(10ms) ended %+v, want [1]", res.Ended)
	}
	if got := grantedIDs(res); !slices.Equal(got, []uint64{4}) || res.Granted[0].GrantedAt != 10*ms ||
		res.Granted[0].ExpiresAt != 20*ms {
		t.Fatalf("Expire(10ms) granted %+v, want 4 at 10ms until 20ms", res.Granted)
	}
	if got := s.NextExpiry(); got != 20*ms {
		t.Fatalf("NextExpiry = %d, want 20ms", got)
	}

	res = s.Expire(25 * ms) // 2 (0+20) and 4 (10+10) end; 3 (0+30) does not
	if got := endedIDs(res); !slices.Equal(got, []uint64{2, 4}) {
		t.Fatalf("Expire(25ms) ended %v, want [2 4]", got)
	}
	if got := grantedIDs(res); !slices.Equal(got, []uint64{5}) || res.Granted[0].GrantedAt != 25*ms {
		t.Fatalf("Expire(25ms) granted %+v, want 5 at 25ms", res.Granted)
	}
	if got := s.NextExpiry(); got != 30*ms {
		t.Fatalf("NextExpiry = %d, want 30ms", got)
	}

	// An older Now (a new leader with a slow clock) runs at the store's clock.
	if res := s.Expire(1 * ms); len(res.Ended) != 0 {
		t.Fatalf("Expire in the past ended %v", endedIDs(res))
	}
	res = acquire(6, time.Millisecond, 3*ms, "e")
	if g := res.Granted[0]; g.RequestedAt != 25*ms || g.GrantedAt != 25*ms || g.ExpiresAt != 26*ms {
		t.Fatalf("grant with an old Now: %+v, want times from 25ms", g)
	}
	if st := s.Stats(); st.Clock != 25*ms {
		t.Fatalf("clock = %d, want 25ms", st.Clock)
	}
	checkInvariants(t, s)
}

// TestGrantLookup: Grant reports a waiting request's position and a held
// grant's token, times and current content; Grants lists both.
func TestGrantLookup(t *testing.T) {
	s := New()
	if err := write(t, s, map[string]string{"a/x": `1`, "b": `2`}); err != nil {
		t.Fatal(err)
	}
	base := s.lastID
	mustAcquire(t, s, base+1, ada, 5, "a")
	mustAcquire(t, s, base+2, bob, 6, "a/x")
	mustAcquire(t, s, base+3, cyd, 7, "a", "b")

	g, ok := s.Grant(base + 1)
	if !ok || g.State != StateHeld || g.Token == 0 || g.GrantedAt != 5 || g.ExpiresAt != 5+int64(time.Minute) ||
		!maps.Equal(textMap(g.Content), map[string]string{"a/x": `1`}) || g.Position != 0 || g.Owner != ada {
		t.Fatalf("held grant = %+v", g)
	}
	g, ok = s.Grant(base + 3)
	if !ok || g.State != StateWaiting || g.Position != 2 || g.RequestedAt != 7 || g.Content != nil {
		t.Fatalf("second waiter = %+v", g)
	}
	if _, ok := s.Grant(base + 4); ok {
		t.Fatal("Grant of an unknown id")
	}
	var ids []uint64
	for _, g := range s.Grants() {
		ids = append(ids, g.ID)
	}
	if !slices.Equal(ids, []uint64{base + 1, base + 2, base + 3}) {
		t.Fatalf("Grants ids %v", ids)
	}
}

// TestHeldLimit: past MaxHeld a free request waits instead of failing, and
// is granted when a grant ends.
func TestHeldLimit(t *testing.T) {
	s := New()
	for i := range MaxHeld {
		mustAcquire(t, s, uint64(i+1), ada, 0, "p"+strconv.Itoa(i))
	}
	res := mustAcquire(t, s, MaxHeld+1, ada, 0, "free")
	if len(res.Granted) != 0 {
		t.Fatal("granted beyond MaxHeld")
	}
	checkInvariants(t, s)
	res = mustRelease(t, s, 1, 1)
	if got := grantedIDs(res); !slices.Equal(got, []uint64{MaxHeld + 1}) {
		t.Fatalf("release granted %v", got)
	}
	checkInvariants(t, s)
}

// TestQueueLimit: the MaxWaiting+1st waiting request is refused, and
// refusing it changes nothing.
func TestQueueLimit(t *testing.T) {
	s := New()
	mustAcquire(t, s, 1, ada, 0, "a")
	for i := range MaxWaiting {
		mustAcquire(t, s, uint64(i+2), ada, 0, "a/"+strconv.Itoa(i))
	}
	before := snap(t, s)
	if _, err := s.Acquire(MaxWaiting+2, ada, []string{"a"}, time.Minute, 0); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("acquire into a full queue: %v", err)
	}
	unchanged(t, s, before)
	// A request that would be granted at once still is.
	if res := mustAcquire(t, s, MaxWaiting+3, ada, 0, "b"); len(res.Granted) != 1 {
		t.Fatal("free request refused with a full queue")
	}
	// Releasing the holder grants the waiters (all disjoint) up to MaxHeld:
	// "b" is held too, so the last one waits.
	if res := mustRelease(t, s, 1, 0); len(res.Granted) != MaxWaiting-1 {
		t.Fatalf("granted %d, want %d", len(res.Granted), MaxWaiting-1)
	}
	if st := s.Stats(); st.Held != MaxHeld || st.Waiting != 1 {
		t.Fatalf("stats %+v", st)
	}
	checkInvariants(t, s)
}
