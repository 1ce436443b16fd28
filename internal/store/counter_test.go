package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
)

const increments = 10_000

// TestCounterNoLostUpdate: 50 simulated clients increment one counter 10,000
// times through acquire → granted → commit(value+1), in a random order. Each
// commit saw the value the previous one wrote, and the final value is 10,000.
func TestCounterNoLostUpdate(t *testing.T) {
	const clients = 50
	r := rand.New(rand.NewPCG(1, 2))
	s := New()
	type client struct {
		grant   uint64 // 0 when idle
		held    bool
		token   uint64
		seen    int
		pending bool
	}
	cs := make([]client, clients)
	byGrant := map[uint64]int{}
	onGranted := func(res Result) {
		for _, g := range res.Granted {
			c := &cs[byGrant[g.ID]]
			c.held, c.token, c.seen = true, g.Token, counterIn(t, g.Content, "counter")
		}
	}
	var id uint64
	var now int64
	value := 0 // what the last commit wrote
	for step := 0; value < increments; step++ {
		if step > 100*increments {
			t.Fatalf("no progress: counter %d after %d steps", value, step)
		}
		now += 10
		i := r.IntN(clients)
		c := &cs[i]
		switch {
		case c.grant == 0:
			id++
			c.grant = id
			byGrant[id] = i
			onGranted(mustAcquire(t, s, id, Owner{Worker: "w#1", User: strconv.Itoa(i)}, now, "counter"))
		case c.held:
			if c.seen != value {
				t.Fatalf("grant %d saw %d, the last commit wrote %d: lost update", c.grant, c.seen, value)
			}
			res, err := s.Commit(c.grant, c.token, map[string]json.RawMessage{"counter": counterJSON(c.seen + 1)}, nil, now)
			if err != nil {
				t.Fatalf("commit %d: %v", c.grant, err)
			}
			value = c.seen + 1
			delete(byGrant, c.grant)
			*c = client{}
			onGranted(res)
		}
	}
	if got := get(t, s, "counter"); got["counter"] != strconv.Itoa(increments) {
		t.Fatalf("counter = %v, want %d", got, increments)
	}
	checkInvariants(t, s)
}

// TestCounterChaos: the same counter, with requests over overlapping path
// sets, releases without commit, lease expiries, dead workers and moved
// users mixed in at random (seeded). After every operation the held grants
// never conflict; the whole invariant set is checked often; every grant on
// the counter sees the last value committed; no commit is lost or applied
// twice. The store is regularly replaced by its own snapshot, and a twin
// store fed the same operations (never restored) must return the same
// results and end byte-identical: the state machine is deterministic and its
// snapshot exact.
func TestCounterChaos(t *testing.T) {
	const clients, workers = 50, 10
	sets := [][]string{
		{"n"}, {"n/counter"}, {"n/counter", "m/a"}, {"m"}, {"m/a", "m/b"},
		{"n/other"}, {"m/b", "n"}, {"n/other", "m/a/deep"},
	}
	r := rand.New(rand.NewPCG(42, 4242))
	s, twin := New(), New()
	apply := func(op Op) (Result, error) {
		res, err := s.Apply(op)
		tres, terr := twin.Apply(op)
		if fmt.Sprint(err) != fmt.Sprint(terr) || !reflect.DeepEqual(res, tres) {
			t.Fatalf("%#v: store and twin differ:\n%+v %v\n%+v %v", op, res, err, tres, terr)
		}
		checkHeld(t, s)
		return res, err
	}

	type client struct {
		grant     uint64
		held      bool
		token     uint64
		paths     []string
		expiresAt int64
		seen      int // counter value its grant carried, if it covers it
	}
	cs := make([]client, clients)
	incarnation := make([]int, workers)
	owner := func(i int) Owner {
		w := i % workers
		return Owner{Worker: fmt.Sprintf("w%d#%d", w, incarnation[w]), User: "u" + strconv.Itoa(i)}
	}
	byGrant := map[uint64]int{}
	value := 0
	covers := func(paths []string) bool { return within("n/counter", paths) }
	events := func(res Result) {
		for _, e := range res.Ended {
			if i, ok := byGrant[e.ID]; ok {
				delete(byGrant, e.ID)
				cs[i] = client{}
			}
		}
		for _, g := range res.Granted {
			c := &cs[byGrant[g.ID]]
			c.held, c.token, c.expiresAt = true, g.Token, g.ExpiresAt
			if covers(g.Paths) {
				c.seen = counterIn(t, g.Content, "n/counter")
				if c.seen != value {
					t.Fatalf("grant %d carries counter %d, last commit wrote %d", g.ID, c.seen, value)
				}
			}
		}
	}

	var id uint64
	var now int64
	stale, steps := 0, 0
	for value < increments {
		steps++
		if steps > 2_000_000 {
			t.Fatalf("no progress: counter %d after %d steps", value, steps)
		}
		now += r.Int64N(100_000) // up to 0.1ms per step
		if r.IntN(1000) == 0 {
			now += 40 * ms // a stall: many leases run out
		}
		var res Result
		var err error
		switch k := r.IntN(100); {
		case k < 75: // a client acts: most often one that holds a grant
			i := r.IntN(clients)
			if k < 60 {
				var holders []int
				for j := range cs {
					if cs[j].held {
						holders = append(holders, j)
					}
				}
				if len(holders) > 0 {
					i = holders[r.IntN(len(holders))]
				}
			}
			c := &cs[i]
			switch {
			case c.grant == 0:
				id++
				paths := sets[r.IntN(len(sets))]
				lease := time.Duration(5+r.IntN(45)) * time.Millisecond
				byGrant[id] = i
				*c = client{grant: id, paths: paths}
				res, err = apply(AcquireOp{ID: id, Owner: owner(i), Paths: paths, Lease: lease, Now: now})
				if err != nil {
					t.Fatalf("acquire: %v", err)
				}
			case c.held && r.IntN(10) == 0: // gives up without writing
				res, err = apply(ReleaseOp{ID: c.grant, Now: now})
				if err != nil {
					t.Fatalf("release: %v", err)
				}
			case c.held:
				set := map[string]json.RawMessage{}
				for _, p := range c.paths {
					if !covers([]string{p}) { // never a scalar above another client's path
						set[p] = json.RawMessage(`{"v":` + strconv.Itoa(steps) + `}`)
					}
				}
				if covers(c.paths) {
					set["n/counter"] = counterJSON(c.seen + 1)
				}
				grant, seen := c.grant, c.seen
				res, err = apply(CommitOp{ID: grant, Token: c.token, Set: set, Now: now})
				switch {
				case err == nil:
					if covers(c.paths) {
						if seen != value {
							t.Fatalf("commit %d wrote %d over %d: lost update", grant, seen+1, value)
						}
						value = seen + 1
					}
				case errors.Is(err, ErrStaleGrant) && c.expiresAt <= max(now, s.clock):
					stale++
					res, err = apply(ExpireOp{Now: now}) // its holder learns it lost the grant
				default:
					t.Fatalf("commit %d: %v", grant, err)
				}
			}
		case k < 88:
			res, err = apply(ExpireOp{Now: now})
		case k < 90:
			w := r.IntN(workers)
			res, err = apply(ReleaseWorkerOp{Worker: owner(w).Worker, Now: now})
			incarnation[w]++ // relaunched: a new incarnation
		case k < 92:
			i := r.IntN(clients)
			o := owner(i)
			res, err = apply(ReleaseUserOp{Worker: o.Worker, User: o.User, Now: now})
		default:
			if next := s.NextExpiry(); next != 0 && next <= now {
				res, err = apply(ExpireOp{Now: now})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		events(res)
		if steps%64 == 0 {
			checkInvariants(t, s)
		}
		if steps%5000 == 0 {
			s = restored(t, s)
		}
	}
	if got := get(t, s, "n/counter"); got["n/counter"] != strconv.Itoa(increments) {
		t.Fatalf("counter = %v, want %d", got, increments)
	}
	if !bytes.Equal(snap(t, s), snap(t, twin)) {
		t.Fatal("store and twin end with different states")
	}
	if stale == 0 {
		t.Fatalf("the chaos was too tame: %d stale commits in %d steps", stale, steps)
	}
	t.Logf("%d steps, %d stale commits, %+v", steps, stale, s.Stats())
	checkInvariants(t, s)
}

func counterJSON(n int) json.RawMessage { return json.RawMessage(strconv.Itoa(n)) }

// counterIn reads an integer entry from a grant's content; absent is 0.
func counterIn(t testing.TB, content map[string]json.RawMessage, path string) int {
	t.Helper()
	v, ok := content[path]
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		t.Fatalf("counter %s = %s: %v", path, v, err)
	}
	return n
}
