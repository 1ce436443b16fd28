package host

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
)

func TestParseCheckpointInterval(t *testing.T) {
	tests := []struct {
		name, setting string
		want          time.Duration
		err           bool
	}{
		{"default", "", DefaultCheckpointInterval, false},
		{"off", "off", 0, false},
		{"zero", "0s", 0, false},
		{"bare zero", "0", 0, false},
		{"set", "1500ms", 1500 * time.Millisecond, false},
		{"too often", "10ms", 0, true},
		{"negative", "-1s", 0, true},
		{"not a duration", "often", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseCheckpointInterval(tt.setting)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("%q: %v, %v; want %v (error: %v)", tt.setting, got, err, tt.want, tt.err)
			}
		})
	}
}

// A person's crash checkpoint stands for them from the epoch they arrived
// at their worker on: a move that rolls back (a park that failed on the
// way down) raises the epoch and keeps it; a move away and back disowns
// what was kept before they left.
func TestKeepCheckpointAcrossARollback(t *testing.T) {
	l := newMemLog()
	f := l.f
	l.apply(t, fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c1", User: "ana", Worker: "w1"})
	u, _ := f.User("ana")
	e0 := u.Epoch
	check := func(worker string, epoch uint64, want bool) {
		t.Helper()
		if got := keepCheckpoint(f, worker, "ana", epoch); got != want {
			u, _ := f.User("ana")
			t.Fatalf("keep %s at epoch %d = %v, want %v (maps: %+v)", worker, epoch, got, want, u)
		}
	}
	check("w1", e0, true)
	l.apply(t, fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w1", To: "w1", Epoch: e0})
	check("w1", e0, true) // moving from there
	l.apply(t, fsm.MoveAbortRequestType, fsm.MoveAbortRequest{User: "ana", Epoch: e0 + 1})
	check("w1", e0, true) // rolled back: still hers
	check("w1", e0+1, true)
	check("w2", e0, false)

	// Away to w2 and back: w1's pieces from before are not hers any more.
	l.apply(t, fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w1", To: "w2", Epoch: e0 + 1})
	l.apply(t, fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: "ana", To: "w2", Epoch: e0 + 2, Package: "sha256:aa"})
	l.apply(t, fsm.WokenRequestType, fsm.WokenRequest{User: "ana", Package: "sha256:aa"})
	check("w2", e0+2, true)
	check("w1", e0+1, false)
	l.apply(t, fsm.MoveBeginRequestType, fsm.MoveBeginRequest{User: "ana", From: "w2", To: "w1", Epoch: e0 + 2})
	l.apply(t, fsm.MoveCommitRequestType, fsm.MoveCommitRequest{User: "ana", To: "w1", Epoch: e0 + 3, Package: "sha256:bb"})
	l.apply(t, fsm.WokenRequestType, fsm.WokenRequest{User: "ana", Package: "sha256:bb"})
	check("w1", e0+1, false)
	check("w1", e0+3, true)
}

// fakeReplica is a raft member whose replica is caught up.
type fakeReplica struct {
	leader   bool
	barriers int
	last     uint64
}

func (r *fakeReplica) IsLeader() bool                    { return r.leader }
func (r *fakeReplica) Barrier(ctx context.Context) error { r.barriers++; return nil }
func (r *fakeReplica) LastIndex() uint64                 { return r.last }

// Without a journal the index is loaded at once; with one, behind the
// start, once the leader's barrier has passed, and Loaded is told.
func TestLoadCheckpoints(t *testing.T) {
	l := newMemLog()
	x, n, err := LoadCheckpoints(CheckpointStartConfig{Store: park.NewMemStore(), Maps: l.f})
	if err != nil || x == nil || n != 0 {
		t.Fatalf("without a journal: %v %d %v", x, n, err)
	}

	r := &fakeReplica{leader: true}
	loaded := make(chan int, 1)
	x, n, err = LoadCheckpoints(CheckpointStartConfig{Store: park.NewMemStore(), Maps: l.f, Raft: r,
		JournalDir: filepath.Join(t.TempDir(), "checkpoints"), Loaded: func(n int) { loaded <- n }})
	if err != nil || x == nil || n != 0 {
		t.Fatalf("with a journal: %v %d %v", x, n, err)
	}
	select {
	case n := <-loaded:
		if n != 0 || r.barriers != 1 {
			t.Fatalf("an empty journal loaded %d people after %d barriers", n, r.barriers)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the journal was never loaded")
	}
}
