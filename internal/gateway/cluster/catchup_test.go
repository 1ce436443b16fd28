package cluster

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// A key created through the leader a moment ago is known on a server
// whose replica has not applied it yet: the server catches up before it
// decides, whether it knew no key yet (its gateway open) or others.
func TestCatchUpKnowsAKeyJustCreated(t *testing.T) {
	leader, replica := fsm.New(), fsm.New()
	var log [][]byte
	create := func(name string) string {
		t.Helper()
		secret := newSecret()
		entry, err := fsm.Encode(fsm.GatewayAccessRequestType, fsm.GatewayAccessRequest{Op: fsm.AccessOpKeyCreate,
			Key: &gatewaywire.APIKey{Name: name, Hash: hashKey(secret), Hint: secret[len(secret)-4:]}})
		if err != nil {
			t.Fatal(err)
		}
		log = append(log, entry)
		if res := leader.Apply(&raft.Log{Index: uint64(len(log)), Data: entry}); res != nil {
			if err, ok := res.(error); ok {
				t.Fatal(err)
			}
		}
		return secret
	}
	// The replica applies what the leader has 30 ms after it is asked.
	var asked atomic.Int64
	c := &catchUp{applied: replica.Index, leaderIndex: func(context.Context) (uint64, error) {
		asked.Add(1)
		index := leader.Index()
		from := replica.Index()
		time.AfterFunc(30*time.Millisecond, func() {
			for i := from; i < index; i++ {
				replica.Apply(&raft.Log{Index: i + 1, Data: log[i]})
			}
		})
		return index, nil
	}}
	auth := newAuthenticator(nil, replica, c)
	first := create("first")
	if n, err := auth.name(t.Context(), "Bearer "+first); n != "first" || err != nil {
		t.Fatalf("the first key, created a moment ago, on a server that knew none: %q %v, want first", n, err)
	}
	second := create("second")
	if n, err := auth.name(t.Context(), "Bearer "+second); n != "second" || err != nil {
		t.Fatalf("a key created a moment ago: %q %v, want second", n, err)
	}
	// A key nobody created is refused after the catch-up; a token of
	// another format, at once (no catch-up).
	before := asked.Load()
	if _, err := auth.name(t.Context(), "Bearer "+newSecret()); !errors.Is(err, errKeyUnknown) {
		t.Fatalf("an unknown key: %v", err)
	}
	if asked.Load() != before+1 {
		t.Fatalf("an unknown key of stickyd's format asked the leader %d times, want once", asked.Load()-before)
	}
	if _, err := auth.name(t.Context(), "Bearer not-ours"); !errors.Is(err, errKeyUnknown) {
		t.Fatalf("a token of another format: %v", err)
	}
	if _, err := auth.name(t.Context(), "Bearer "+first); err != nil || asked.Load() != before+1 {
		t.Fatalf("a known key or a foreign token asked the leader (%d times): %v", asked.Load()-before-1, err)
	}
}

// Callers of the moment share a catch-up: a crowd of made-up keys costs
// the leader a request per round trip, not one each; and a caller never
// rides a round that started before it came.
func TestCatchUpRoundsAreShared(t *testing.T) {
	var asked, index atomic.Uint64
	var mu sync.Mutex
	started := map[uint64]time.Time{}
	c := &catchUp{applied: index.Load, leaderIndex: func(context.Context) (uint64, error) {
		n := asked.Add(1)
		mu.Lock()
		started[n] = time.Now()
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		return index.Add(1), nil
	}}
	var wg sync.WaitGroup
	began := time.Now()
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			came := time.Now()
			seen := asked.Load()
			if err := c.wait(t.Context()); err != nil {
				t.Error(err)
			}
			// A round that started after this caller came has ended.
			mu.Lock()
			defer mu.Unlock()
			ok := false
			for n := seen + 1; n <= asked.Load(); n++ {
				if !started[n].Before(came) {
					ok = true
				}
			}
			if !ok {
				t.Errorf("a caller that came at %v was answered by rounds that all started before it", came)
			}
		}()
		time.Sleep(100 * time.Microsecond)
	}
	wg.Wait()
	// Rounds of 20 ms back to back, and one more.
	over := time.Since(began)
	if n := asked.Load(); n > uint64(over/(20*time.Millisecond))+1 || c.rounds.Load() != n || c.waited.Load() != 200 {
		t.Fatalf("200 callers over %v: %d rounds (the leader asked %d times), %d waits; want at most one a round trip", over, c.rounds.Load(), n, c.waited.Load())
	}
	t.Logf("200 callers over %v: %d rounds", over, asked.Load())
	// A round that fails answers its callers with its error; the next is
	// asked afresh.
	c.leaderIndex = func(context.Context) (uint64, error) { return 0, errors.New("no leader") }
	if err := c.wait(t.Context()); err == nil {
		t.Fatal("a round without a leader answered nil")
	}
}
