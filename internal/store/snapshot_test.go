package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// scenario builds a store with entries, three held grants and a queue whose
// order matters. Grant 1 was the write's; then 2 holds a, 3 holds b, 7
// holds c, and the queue is 4 {a, b}, 5 {b} (behind 4), 6 {a/x}.
func scenario(t *testing.T) *Store {
	s := New()
	if err := write(t, s, map[string]string{"a/x": `1`, "b": `"<two>"`, "c": `{"k":[1,2]}`}); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, s, 2, ada, 100, "a")
	mustAcquire(t, s, 3, bob, 110, "b")
	mustAcquire(t, s, 4, cyd, 120, "a", "b")
	mustAcquire(t, s, 5, ada, 130, "b")
	mustAcquire(t, s, 6, bob, 140, "a/x")
	mustAcquire(t, s, 7, cyd, 150, "c")
	return s
}

// continueScenario runs the same operations on any copy of scenario and
// returns their results.
func continueScenario(t *testing.T, s *Store) []Result {
	var out []Result
	step := func(res Result, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, res)
	}
	minute := int64(time.Minute)
	step(s.Release(3, 200))                                                              // b is free, but 5 stays behind 4
	step(commit(s, 2, map[string]string{"a/x": `2`}, nil, 210))                          // 4 granted {a, b}
	step(s.Acquire(8, Owner{Worker: "web-9#1"}, []string{"b/z"}, time.Millisecond, 220)) // waits
	step(commit(s, 4, map[string]string{"a/x": `3`, "b": `{"y":true}`}, nil, 230))       // 5 and 6 granted
	step(s.Expire(minute+300), nil)                                                      // 5, 6, 7 expire; 8 granted
	step(s.ReleaseWorker("web-9#1", minute+400), nil)                                    // 8 ends
	step(s.Acquire(9, ada, []string{"a", "b", "c"}, time.Second, minute+500))            // granted at once
	step(commit(s, 9, map[string]string{"c/k": `null`}, []string{"a/x"}, minute+600))
	return out
}

// TestSnapshotRoundTrip: a snapshot restores exactly (same bytes, same
// queue order, same tokens and times), and the restored copy and a clone,
// given the same operations as the original, return the same results and end
// in the same state.
func TestSnapshotRoundTrip(t *testing.T) {
	orig := scenario(t)
	b := snap(t, orig)
	var sn snapshotJSON
	if err := json.Unmarshal(b, &sn); err != nil {
		t.Fatal(err)
	}
	var queue []uint64
	for _, g := range sn.Queue {
		queue = append(queue, g.ID)
	}
	if !slices.Equal(queue, []uint64{4, 5, 6}) || len(sn.Held) != 3 || sn.LastToken != 4 {
		t.Fatalf("snapshot queue %v held %d last token %d: %s", queue, len(sn.Held), sn.LastToken, b)
	}

	// Through encoding/json, as the FSM would use it.
	var rest Store
	if err := json.Unmarshal(b, &rest); err != nil {
		t.Fatal(err)
	}
	b2, err := json.Marshal(&rest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, b2) {
		t.Fatalf("round trip differs:\n%s\n%s", b, b2)
	}
	if !reflect.DeepEqual(orig.Grants(), rest.Grants()) {
		t.Fatalf("grants differ:\n%+v\n%+v", orig.Grants(), rest.Grants())
	}
	checkInvariants(t, &rest)

	clone := orig.Clone()
	want := continueScenario(t, orig)
	for name, other := range map[string]*Store{"restored": &rest, "clone": clone} {
		got := continueScenario(t, other)
		if !reflect.DeepEqual(want, got) {
			t.Fatalf("%s continues differently:\n%+v\n%+v", name, want, got)
		}
		if !bytes.Equal(snap(t, orig), snap(t, other)) {
			t.Fatalf("%s ends in another state", name)
		}
		checkInvariants(t, other)
	}
	// The continuation did what its comments say: the queue order held.
	var order []uint64
	for _, res := range want {
		order = append(order, grantedIDs(res)...)
	}
	if !slices.Equal(order, []uint64{4, 5, 6, 8, 9}) {
		t.Fatalf("granted in order %v", order)
	}
}

// TestCloneIsDeep: changing a clone leaves the original as it was.
func TestCloneIsDeep(t *testing.T) {
	orig := scenario(t)
	before := snap(t, orig)
	clone := orig.Clone()
	continueScenario(t, clone)
	if err := write(t, clone, map[string]string{"a/x/y": `1`, "new": `2`}, "c"); err != nil {
		t.Fatal(err)
	}
	unchanged(t, orig, before)
	checkInvariants(t, orig)
}

// TestBadSnapshot: a snapshot that breaks an invariant is refused with
// ErrBadSnapshot and leaves the store as it was.
func TestBadSnapshot(t *testing.T) {
	good := func() snapshotJSON {
		var sn snapshotJSON
		if err := json.Unmarshal(snap(t, scenario(t)), &sn); err != nil {
			t.Fatal(err)
		}
		return sn
	}
	for _, tc := range []struct {
		name   string
		mutate func(*snapshotJSON)
		raw    string // used instead of mutate when set
	}{
		{name: "not JSON", raw: `{"version":1,`},
		{name: "invalid entry value", raw: `{"version":1,"entries":{"a":tru}}`},
		{name: "wrong type", raw: `{"version":"1"}`},
		{name: "version", mutate: func(s *snapshotJSON) { s.Version = 2 }},
		{name: "negative clock", mutate: func(s *snapshotJSON) { s.Clock = -1 }},
		{name: "bad entry path", mutate: func(s *snapshotJSON) { s.Entries["a//b"] = json.RawMessage(`1`) }},
		{name: "entry under an entry", mutate: func(s *snapshotJSON) { s.Entries["a/x/y"] = json.RawMessage(`1`) }},
		{name: "entry above an entry", mutate: func(s *snapshotJSON) { s.Entries["a"] = json.RawMessage(`1`) }},
		{name: "held grants conflict", mutate: func(s *snapshotJSON) { s.Held[1].Paths = []string{"a/y"} }},
		{name: "duplicate token", mutate: func(s *snapshotJSON) { s.Held[1].Token = s.Held[0].Token }},
		{name: "token beyond counter", mutate: func(s *snapshotJSON) { s.Held[1].Token = s.LastToken + 1 }},
		{name: "held without token", mutate: func(s *snapshotJSON) { s.Held[1].Token = 0 }},
		{name: "id beyond counter", mutate: func(s *snapshotJSON) { s.LastID = 5 }},
		{name: "duplicate id", mutate: func(s *snapshotJSON) { s.Queue[1].ID = s.Held[0].ID }},
		{name: "zero id", mutate: func(s *snapshotJSON) { s.Queue[0].ID = 0 }},
		{name: "queue out of order", mutate: func(s *snapshotJSON) { s.Queue[0], s.Queue[1] = s.Queue[1], s.Queue[0] }},
		{name: "waiter could be granted", mutate: func(s *snapshotJSON) { s.Queue[2].Paths = []string{"free"} }},
		{name: "waiter with token", mutate: func(s *snapshotJSON) { s.Queue[0].Token = 1 }},
		{name: "paths not minimal", mutate: func(s *snapshotJSON) { s.Held[0].Paths = []string{"a", "a/x"} }},
		{name: "paths not sorted", mutate: func(s *snapshotJSON) { s.Queue[0].Paths = []string{"b", "a"} }},
		{name: "bad lease", mutate: func(s *snapshotJSON) { s.Held[0].Lease = 0 }},
		{name: "no worker", mutate: func(s *snapshotJSON) { s.Held[0].Owner.Worker = "" }},
		{name: "granted in the future", mutate: func(s *snapshotJSON) { s.Held[0].GrantedAt = s.Clock + 1 }},
		{name: "requested in the future", mutate: func(s *snapshotJSON) { s.Queue[0].RequestedAt = s.Clock + 1 }},
		{name: "queue too long", mutate: func(s *snapshotJSON) {
			for len(s.Queue) <= MaxWaiting {
				s.Queue = append(s.Queue, s.Queue[len(s.Queue)-1])
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte(tc.raw)
			if tc.raw == "" {
				sn := good()
				tc.mutate(&sn)
				var err error
				if b, err = json.Marshal(sn); err != nil {
					t.Fatal(err)
				}
			}
			s := New()
			if err := write(t, s, map[string]string{"keep": `1`}); err != nil {
				t.Fatal(err)
			}
			before := snap(t, s)
			err := s.UnmarshalJSON(b)
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			unchanged(t, s, before)
		})
	}

	t.Run("unmodified is accepted", func(t *testing.T) {
		b, err := json.Marshal(good())
		if err != nil {
			t.Fatal(err)
		}
		if err := New().UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("non-canonical values are made canonical", func(t *testing.T) {
		s := New()
		raw := `{"version":1,"clock":0,"last_id":0,"last_token":0,"entries":{"a":[1, 2]},"held":null,"queue":null}`
		if err := s.UnmarshalJSON([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		if got := get(t, s, "a"); got["a"] != `[1,2]` {
			t.Fatalf("entry %v", got)
		}
		if b := snap(t, s); !strings.Contains(string(b), `"held":[],"queue":[]`) {
			t.Fatalf("snapshot %s", b)
		}
	})
}
