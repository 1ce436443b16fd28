package lifecycle

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hashicorp/raft"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// A stop parks the people who matter first: live before parked, logged in
// before anonymous, the most recently active first; never by name.
func TestStopOrder(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) int64 { return now.Add(-d).Unix() }
	people := []placement.UserInfo{
		{User: "aaron", State: placement.StateParked, Seen: ago(time.Second)},
		{User: "~visitor", State: placement.StateLive, Seen: ago(time.Second)},
		{User: "bea", State: placement.StateLive, Seen: ago(time.Hour)},
		{User: "zoe", State: placement.StateLive, Seen: ago(time.Minute)},
		{User: "cy", State: placement.StateLive},
	}
	p := New(Config{})
	got := p.stopOrder(people)
	want := []string{"zoe", "bea", "cy", "~visitor", "aaron"}
	if !slices.Equal(got, want) {
		t.Fatalf("stop order %v, want %v", got, want)
	}
	// The probes' last frame counts when newer than the maps' time.
	idle := NewIdleParker(IdleConfig{Idle: time.Minute})
	idle.seen["bea"] = idleMark{since: now}
	p = New(Config{Idle: idle})
	got = p.stopOrder(people)
	want = []string{"bea", "zoe", "cy", "~visitor", "aaron"}
	if !slices.Equal(got, want) {
		t.Fatalf("with bea's frame just seen: %v, want %v", got, want)
	}
}

func TestKeepOrder(t *testing.T) {
	some := []string{"zed", "amy", "kim"}
	keepOrder(some, []string{"kim", "bob", "zed", "amy"})
	if want := []string{"kim", "zed", "amy"}; !slices.Equal(some, want) {
		t.Fatalf("kept %v, want %v", some, want)
	}
}

// The restart reads the newest complete park folder only: incomplete ones
// are named and ignored, missing packages counted, and the people parked
// with no quorum whose package is there are kept for their worker.
func TestRecover(t *testing.T) {
	dir := t.TempDir()
	store := park.NewMemStore()
	pa, err := store.Put([]byte("ann's pages"), true)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := store.Put([]byte("cy's pages"), true)
	if err != nil {
		t.Fatal(err)
	}
	restart := Dir(dir)
	write := func(folder, manifest string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(restart, folder), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(restart, folder, "manifest.json"), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("park-20260101T000000.000000000Z", `{"parked":[{"user":"old","package":"gone"}]}`)
	// The maps: ann and bob parked on their packages; eve woken since the
	// stop (her package went with the wake); zed forgotten.
	f := fsm.New()
	index := uint64(0)
	apply := func(kind fsm.MessageType, req any) {
		t.Helper()
		b, err := fsm.Encode(kind, req)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if err, ok := f.Apply(&raft.Log{Index: index, Data: b}).(error); ok {
			t.Fatal(err)
		}
	}
	for _, u := range []struct{ user, pkg string }{{"ann", pa}, {"bob", "lost"}, {"eve", ""}} {
		apply(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: "c-" + u.user, User: u.user, Worker: "w1"})
		info, _ := f.User(u.user)
		apply(fsm.MoveBatchRequestType, fsm.MoveBatchRequest{Begin: []fsm.MoveBeginRequest{{User: u.user, From: "w1", To: "w1", Epoch: info.Epoch}}})
		apply(fsm.MoveBatchRequestType, fsm.MoveBatchRequest{Commit: []fsm.MoveCommitRequest{{User: u.user, To: "w1", Epoch: info.Epoch + 1, Package: u.pkg}}})
	}
	write("park-20260102T000000.000000000Z", `{"parked":[{"user":"ann","package":"`+pa+`"},{"user":"bob","package":"lost"},
		{"user":"eve","package":"eve-woken"},{"user":"zed","package":"zed-forgotten"}],
		"offline":[{"user":"cy","worker":"w1","epoch":2,"package":"`+pc+`"},{"user":"dan","worker":"w1","epoch":2,"package":"lost"}]}`)
	write("park-20260103T000000.000000000Z.tmp", `{`)
	loaded := 0
	p := New(Config{DataDir: dir, Park: store, Supervisor: supervisor.New(f, nil, nil, nil), Checkpoints: func() (int, error) { loaded++; return 7, nil }})
	rep, err := p.Recover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Missing: bob's package, and dan's offline one; eve's and zed's are
	// not missed (the maps no longer name them).
	want := RestartReport{Folder: "park-20260102T000000.000000000Z", Parked: 4, Missing: 2, Offline: 2,
		Incomplete: []string{"park-20260103T000000.000000000Z.tmp"}, Checkpointed: 7}
	if rep.Folder != want.Folder || rep.Parked != want.Parked || rep.Missing != want.Missing || rep.Offline != want.Offline ||
		!slices.Equal(rep.Incomplete, want.Incomplete) || rep.Checkpointed != want.Checkpointed || loaded != 1 {
		t.Fatalf("report %+v (checkpoints loaded %d times), want %+v", rep, loaded, want)
	}
	if got := p.Offline().List("w1"); !slices.Equal(got, []string{"cy"}) {
		t.Fatalf("offline parks on w1: %v, want cy", got)
	}
	if d, ok := p.Offline().Take("w1", "cy", 2); !ok || d != pc {
		t.Fatalf("cy's offline park: %q %v", d, ok)
	}
}

// With no data directory (dev) nothing is read, but the checkpoints are
// still loaded.
func TestRecoverDev(t *testing.T) {
	p := New(Config{Checkpoints: func() (int, error) { return 3, nil }})
	rep, err := p.Recover(context.Background())
	if err != nil || rep.Checkpointed != 3 || rep.Folder != "" {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if err := p.ParkAll(context.Background()); err != nil {
		t.Fatalf("parking in dev: %v", err)
	}
}

type fakeLeader struct{ id atomic.Pointer[string] }

func (l *fakeLeader) Leader() (string, string) {
	if p := l.id.Load(); p != nil {
		return "addr", *p
	}
	return "", ""
}

// A stop's context ends with errNoQuorum once no leader has been known for
// leaderGone, not while one is.
func TestWithLeader(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := &fakeLeader{}
	id := "s1"
	l.id.Store(&id)
	p := New(Config{Leader: l})
	ctx, cancel := p.withLeader(context.Background())
	defer cancel()
	if !p.hasLeader() {
		t.Fatal("no leader known")
	}
	select {
	case <-ctx.Done():
		t.Fatal("ended with a leader known")
	case <-time.After(300 * time.Millisecond):
	}
	l.id.Store(nil)
	select {
	case <-ctx.Done():
		if context.Cause(ctx) != errNoQuorum {
			t.Fatalf("ended by %v", context.Cause(ctx))
		}
	case <-time.After(leaderGone + 5*time.Second):
		t.Fatal("still going with no leader")
	}
	if p.hasLeader() {
		t.Fatal("a leader known")
	}
}
