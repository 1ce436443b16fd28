package move

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// countingLog applies entries to the maps directly and counts them; each
// takes latency, as a disk write would (entries written meanwhile wait).
type countingLog struct {
	latency time.Duration
	mu      sync.Mutex
	f       *fsm.FSM
	index   uint64
	entries int
	fail    int // how many of the next entries fail before being applied
}

func (l *countingLog) Apply(ctx context.Context, entry []byte) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail > 0 {
		l.fail--
		return nil, errors.New("no leader")
	}
	time.Sleep(l.latency)
	l.index++
	l.entries++
	res := l.f.Apply(&raft.Log{Index: l.index, Data: entry})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

// scripted workers: each person's freeze does what their name says.
type scripted struct {
	ready  []string
	mu     sync.Mutex
	thawed map[string]bool
	evict  map[string]bool
	// gate, when set, holds the freeze of people named "gated…" until
	// closed; frozen is told each one that reached it.
	gate   chan struct{}
	frozen chan string
}

func (w *scripted) Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error) {
	switch {
	case strings.HasPrefix(user, "slow"):
		<-ctx.Done()
		return nil, ctx.Err()
	case strings.HasPrefix(user, "refuse"):
		return nil, &channel.RemoteError{Code: protocol.Error_INTERNAL, Message: "no"}
	case strings.HasPrefix(user, "dead"):
		return nil, errors.New("worker exited")
	case strings.HasPrefix(user, "gated"):
		w.frozen <- user
		<-w.gate
	}
	return &protocol.Frozen{Package: []byte("state of " + user), Conns: 1, Pages: 1}, nil
}

func (w *scripted) Thaw(ctx context.Context, worker, user string, epoch uint64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.thawed[user] = true
	return nil
}

func (w *scripted) Evict(ctx context.Context, worker, user string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.evict[user] = true
	return nil
}

func (w *scripted) Ready() []string { return w.ready }

func setup(t *testing.T, users []string) (*fsm.FSM, *countingLog, *scripted, *Mover) {
	t.Helper()
	f := fsm.New()
	l := &countingLog{f: f}
	for i, u := range users {
		b, _ := fsm.Encode(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: fmt.Sprintf("c%d", i), User: u, Worker: "a"})
		if _, err := l.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	l.entries = 0
	w := &scripted{ready: []string{"a", "b"}, thawed: map[string]bool{}, evict: map[string]bool{}}
	m := New(Config{FreezeTimeout: 200 * time.Millisecond}, f, l, w, park.NewMemStore())
	return f, l, w, m
}

// A set of people takes the road in a few entries, and each person's
// outcome is their own: one rolled back or lost never changes another's.
func TestMoveSetOutcomesAreEachPersons(t *testing.T) {
	var users []string
	for i := range 500 {
		users = append(users, fmt.Sprintf("u%03d", i))
	}
	users = append(users, "slow1", "refuse1", "dead1", "nobody-home")
	f, l, w, m := setup(t, users[:len(users)-1])
	l.latency = time.Millisecond
	var reqs []Request
	for _, u := range users {
		reqs = append(reqs, Request{User: u, To: "b"})
	}
	reqs = append(reqs, Request{User: "u000", To: "zz"}) // not ready: refused before the road
	before, _ := f.User("u000")
	got := map[string]error{}
	outcome := map[string]string{}
	calls := 0
	m.MoveSet(t.Context(), reqs, Options{Reason: "test", Parallel: 128}, func(r Result, err error) {
		calls++
		if _, dup := got[r.User]; dup && r.To != "zz" {
			t.Errorf("%s told twice", r.User)
		}
		if r.To != "zz" {
			got[r.User], outcome[r.User] = err, r.Outcome
		} else if !errors.Is(err, ErrBadDestination) {
			t.Errorf("a move to a worker that is not ready: %v", err)
		}
	})
	if calls != len(reqs) {
		t.Fatalf("done called %d times for %d requests", calls, len(reqs))
	}
	for _, u := range users[:500] {
		if got[u] != nil || outcome[u] != Moved {
			t.Fatalf("%s: %s %v", u, outcome[u], got[u])
		}
		info, _ := f.User(u)
		if info.Worker != "b" || info.State != placement.StateParked || info.Epoch != before.Epoch+1 {
			t.Fatalf("%s after the move: %+v", u, info)
		}
	}
	for _, u := range []string{"slow1", "refuse1"} {
		if !errors.Is(got[u], ErrRolledBack) || outcome[u] != RolledBack {
			t.Errorf("%s: %s %v", u, outcome[u], got[u])
		}
		info, _ := f.User(u)
		if info.Worker != "a" || info.State != placement.StateLive {
			t.Errorf("%s after a rolled-back move: %+v", u, info)
		}
	}
	if !errors.Is(got["dead1"], ErrStateLost) || outcome["dead1"] != StateLost {
		t.Errorf("dead1: %s %v", outcome["dead1"], got["dead1"])
	}
	if info, _ := f.User("dead1"); info.Worker != "b" || info.State != placement.StateLive {
		t.Errorf("dead1 after its worker died: %+v", info)
	}
	if !errors.Is(got["nobody-home"], fsm.ErrNoUser) {
		t.Errorf("nobody-home: %v", got["nobody-home"])
	}
	time.Sleep(50 * time.Millisecond) // thaws and evictions run behind
	w.mu.Lock()
	if !w.thawed["slow1"] || !w.thawed["refuse1"] || w.thawed["u001"] {
		t.Errorf("thawed: %v", w.thawed)
	}
	if !w.evict["u001"] || w.evict["slow1"] {
		t.Errorf("evicted %d, slow1 %v", len(w.evict), w.evict["slow1"])
	}
	w.mu.Unlock()
	// 503 people on the road, at most 128 at once: a few dozen entries,
	// not two per person.
	if l.entries > len(users)/5 {
		t.Errorf("%d log entries for %d people", l.entries, len(users))
	}
	t.Logf("%d people in %d log entries", len(users), l.entries)
}

// An entry that fails leaves nobody behind a barrier: the barriers it may
// have raised are dropped, and reassignments are written again.
func TestMoveSetSurvivesFailingEntries(t *testing.T) {
	users := []string{"u1", "u2", "u3"}
	f, l, _, m := setup(t, users)
	l.fail = 1 // the entry raising the barriers
	var errs []error
	m.MoveSet(t.Context(), []Request{{User: "u1", To: "b"}, {User: "u2", To: "b"}}, Options{}, func(r Result, err error) {
		errs = append(errs, err)
	})
	for _, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "raising the barrier") {
			t.Errorf("after a failed barrier entry: %v", err)
		}
	}
	for _, u := range users {
		if info, _ := f.User(u); info.State != placement.StateLive || info.Worker != "a" {
			t.Errorf("%s: %+v", u, info)
		}
	}
	// Now the reassignment's entry fails twice: it is written again.
	m2 := New(Config{FreezeTimeout: time.Second}, f, &failAfter{countingLog: l, after: 1, n: 2}, &scripted{ready: []string{"a", "b"}, thawed: map[string]bool{}, evict: map[string]bool{}}, park.NewMemStore())
	res, err := m2.Move(t.Context(), "u3", "b", "test")
	if err != nil || res.Outcome != Moved {
		t.Fatalf("move with a failing reassignment entry: %s %v", res.Outcome, err)
	}
	if info, _ := f.User("u3"); info.Worker != "b" || info.State != placement.StateParked {
		t.Errorf("u3: %+v", info)
	}
}

// failAfter lets after entries through, then fails n.
type failAfter struct {
	*countingLog
	after, n int
}

func (l *failAfter) Apply(ctx context.Context, entry []byte) (any, error) {
	if l.after > 0 {
		l.after--
		return l.countingLog.Apply(ctx, entry)
	}
	if l.n > 0 {
		l.n--
		return nil, errors.New("timed out enqueuing")
	}
	return l.countingLog.Apply(ctx, entry)
}

// A new term's roll-back leaves alone the moves this mover is making (it
// ran as the term began, after a move had raised its barrier) and rolls
// back the ones nobody is making.
func TestRollBackStuckLeavesTheMoversOwn(t *testing.T) {
	f, l, w, m := setup(t, []string{"gated1", "orphan1"})
	w.gate, w.frozen = make(chan struct{}), make(chan string, 1)
	// orphan1's barrier was raised by a leader that is gone.
	o, _ := f.User("orphan1")
	b, _ := fsm.Encode(fsm.MoveBatchRequestType, fsm.MoveBatchRequest{Begin: []fsm.MoveBeginRequest{{User: "orphan1", From: "a", To: "b", Epoch: o.Epoch}}})
	if _, err := l.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go m.MoveSet(context.Background(), []Request{{User: "gated1", To: "b"}}, Options{Freeze: 5 * time.Second}, func(r Result, err error) { done <- err })
	<-w.frozen
	if u, _ := f.User("gated1"); u.State != placement.StateMoving {
		t.Fatalf("gated1 during its freeze: %+v", u)
	}
	back, err := m.RollBackStuck(t.Context(), f.Users())
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 1 || back[0] != "orphan1" {
		t.Fatalf("rolled back %v, want only orphan1", back)
	}
	close(w.gate)
	if err := <-done; err != nil {
		t.Fatalf("the move under way was disturbed: %v", err)
	}
	if u, _ := f.User("gated1"); u.Worker != "b" {
		t.Fatalf("gated1 after its move: %+v", u)
	}
	if u, _ := f.User("orphan1"); u.State != placement.StateLive || u.Worker != "a" {
		t.Fatalf("orphan1 after the roll-back: %+v", u)
	}
	if _, left := m.onRoad.Load("gated1"); left {
		t.Fatal("a settled move is still marked as on the road")
	}
}
