package store

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

// BenchmarkAcquireCommit is one uncontended read-modify-write.
func BenchmarkAcquireCommit(b *testing.B) {
	s := New()
	set := map[string]json.RawMessage{"counter": json.RawMessage(`1`)}
	var id uint64
	for b.Loop() {
		id++
		res, err := s.Acquire(id, ada, []string{"counter"}, time.Second, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Commit(id, res.Granted[0].Token, set, nil, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReleaseFullQueue: a release that unblocks nobody in front of a
// full queue costs nothing more than on an empty store.
func BenchmarkReleaseFullQueue(b *testing.B) {
	s := fullQueue(b)
	id := uint64(MaxWaiting + 1)
	for b.Loop() {
		id++
		mustAcquire(b, s, id, bob, 0, "other")
		mustRelease(b, s, id, 0)
	}
}

// BenchmarkReleaseFullQueueScan is the worst case: each release may unblock
// the whole full queue, which is scanned and stays blocked.
func BenchmarkReleaseFullQueueScan(b *testing.B) {
	s := fullQueue(b)
	id := uint64(MaxWaiting + 1)
	for b.Loop() {
		id++
		mustAcquire(b, s, id, bob, 0, "root") // waits behind the queue
		mustRelease(b, s, id, 0)              // cancelled: its paths meet every waiter's
	}
}

// fullQueue holds "x" and queues MaxWaiting-1 requests, each on a path
// under "x" and one under "root".
func fullQueue(b *testing.B) *Store {
	s := New()
	mustAcquire(b, s, 1, ada, 0, "x")
	for i := range MaxWaiting - 1 {
		mustAcquire(b, s, uint64(i+2), ada, 0, "root/"+strconv.Itoa(i), "x/"+strconv.Itoa(i))
	}
	return s
}
