package store

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// FuzzOps decodes bytes into a sequence of operations over a small universe
// of nested paths and applies them: the store must never panic, every
// invariant holds after each operation, and the final state survives a
// snapshot round trip byte for byte. `go test` runs the seeds; `go test
// -fuzz FuzzOps` explores.
func FuzzOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 0, 3, 4, 1, 0, 2, 1, 1, 0})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 5, 9, 9, 3, 0, 0, 4, 1, 1, 2, 0, 0})
	f.Add(bytes.Repeat([]byte{0, 7, 3, 1, 1, 2, 3, 2}, 20))
	universe := []string{"a", "a/b", "a/b/c", "a/bc", "b", "b/x", "c", "a-b"}
	values := []string{`1`, `{"x":2,"y":{"z":3}}`, `{}`, `"s"`, `[1]`, `{"b":{"c":4}}`}
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		var id uint64
		var now int64
		for len(data) >= 4 {
			k, a, b, c := data[0], int(data[1]), int(data[2]), int(data[3])
			data = data[4:]
			now += int64(c) * ms
			var op Op
			switch k % 6 {
			case 0:
				id++
				paths := []string{universe[a%len(universe)]}
				if b%3 == 0 {
					paths = append(paths, universe[b%len(universe)])
				}
				op = AcquireOp{ID: id, Owner: Owner{Worker: "w" + string(rune('0'+a%3)), User: string(rune('a' + b%2))},
					Paths: paths, Lease: time.Duration(1+b) * time.Millisecond, Now: now}
			case 1:
				gid := uint64(1 + a%8)
				if id > 8 {
					gid = id - uint64(a%8)
				}
				gi, _ := s.Grant(gid)
				set := map[string]json.RawMessage{universe[b%len(universe)]: json.RawMessage(values[c%len(values)])}
				var del []string
				if c%4 == 0 {
					del = []string{universe[(b+1)%len(universe)]}
				}
				op = CommitOp{ID: gid, Token: gi.Token + uint64(c%7/6), Set: set, Delete: del, Now: now}
			case 2:
				op = ReleaseOp{ID: uint64(1 + a%max(int(id), 1)), Now: now}
			case 3:
				op = ExpireOp{Now: now}
			case 4:
				op = ReleaseWorkerOp{Worker: "w" + string(rune('0'+a%3)), Now: now}
			case 5:
				op = ReleaseUserOp{Worker: "w" + string(rune('0'+a%3)), User: string(rune('a' + b%2)), Now: now}
			}
			before := snap(t, s)
			res, err := s.Apply(op)
			if err != nil {
				if len(res.Granted)+len(res.Ended)+len(res.Written) != 0 {
					t.Fatalf("%#v failed (%v) with events", op, err)
				}
				unchanged(t, s, before)
			}
			checkInvariants(t, s)
		}
		b := snap(t, s)
		if b2 := snap(t, restored(t, s)); !bytes.Equal(b, b2) {
			t.Fatalf("round trip differs:\n%s\n%s", b, b2)
		}
	})
}

// FuzzUnmarshal feeds arbitrary bytes to UnmarshalJSON: it must never panic,
// and whatever it accepts must satisfy the invariants and round-trip.
func FuzzUnmarshal(f *testing.F) {
	s := New()
	s.Acquire(1, ada, []string{"a"}, time.Second, 5)
	s.Acquire(2, bob, []string{"a/b", "c"}, time.Second, 6)
	s.Commit(1, 1, map[string]json.RawMessage{"a/x": json.RawMessage(`{"k":[1,"<"]}`)}, nil, 7)
	s.Acquire(3, cyd, []string{"a/b"}, time.Second, 8)
	good, _ := s.MarshalJSON()
	f.Add(good)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"entries":{"a":1,"a/b":2}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := New()
		if err := s.UnmarshalJSON(data); err != nil {
			return
		}
		checkInvariants(t, s)
		b := snap(t, s)
		if b2 := snap(t, restored(t, s)); !bytes.Equal(b, b2) {
			t.Fatalf("round trip differs:\n%s\n%s", b, b2)
		}
	})
}
