package raftnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/internal/fsm"
)

func connect(t *testing.T, n *Node, conn, worker string) {
	t.Helper()
	b, _ := fsm.Encode(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: conn, Worker: worker})
	if _, err := n.Apply(t.Context(), b); err != nil {
		t.Fatal(err)
	}
}

func start(t *testing.T, cfg Config, f *fsm.FSM) *Node {
	t.Helper()
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: hclog.DefaultOutput})
	n, err := New(cfg, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := n.WaitLeader(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestInmem(t *testing.T) {
	f := fsm.New()
	n := start(t, Config{ID: "dev", Bootstrap: true}, f)
	defer n.Shutdown()
	connect(t, n, "c1", "w1")
	if r, ok := f.Lookup("c1"); !ok || r.Worker != "w1" {
		t.Fatalf("lookup %+v %v", r, ok)
	}
	// An FSM error comes back as the Apply error.
	b, _ := fsm.Encode(fsm.LoginRequestType, fsm.LoginRequest{Conn: "nobody", User: "x"})
	if _, err := n.Apply(t.Context(), b); err == nil {
		t.Fatal("login on an unknown connection succeeded")
	}
}

// A member on disk with a TCP transport comes back with its maps, from the
// log and from a snapshot.
func TestDurableRestart(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{ID: "s1", DataDir: dir, BindAddr: "127.0.0.1:0", Bootstrap: true, SnapshotThreshold: 2}
	f := fsm.New()
	n := start(t, cfg, f)
	for i, c := range []string{"a", "b", "c", "d"} {
		connect(t, n, c, []string{"w1", "w2"}[i%2])
	}
	if err := n.Raft.Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	connect(t, n, "e", "w1") // after the snapshot: only in the log
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatalf("second shutdown: %v", err)
	}

	g := fsm.New()
	m := start(t, cfg, g)
	defer m.Shutdown()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if conns, _ := g.Counts(); conns == 5 {
			break
		}
		if time.Now().After(deadline) {
			conns, users := g.Counts()
			t.Fatalf("after restart: %d conns %d users, want 5", conns, users)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r, ok := g.Lookup("e"); !ok || r.Worker != "w1" {
		t.Fatalf("e after restart: %+v", r)
	}
}

// A member that lost its quorum (its configuration names a voter that is
// gone for good) elects no leader; the operator's peers.json replaces the
// configuration at the next start, keeping the log, and is renamed.
func TestRecoverFromPeersFile(t *testing.T) {
	dir := t.TempDir()
	addr := freeport.Addr(t)
	cfg := Config{ID: "s1", DataDir: dir, BindAddr: addr, Bootstrap: true}
	n := start(t, cfg, fsm.New())
	connect(t, n, "a", "w1")
	// A second voter that never answers: the change cannot commit, and the
	// cluster of two has lost its quorum.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	_ = n.AddVoter(ctx, "s2", freeport.Addr(t))
	cancel()
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	stuck, err := New(Config{ID: "s1", DataDir: dir, BindAddr: addr, Logger: hclog.NewNullLogger()}, fsm.New())
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // elections come and go
	if addr, _ := stuck.Leader(); addr != "" {
		t.Fatalf("a leader %s without a quorum", addr)
	}
	if err := stuck.Shutdown(); err != nil {
		t.Fatal(err)
	}

	peers := filepath.Join(dir, "raft", PeersFile)
	if err := os.WriteFile(peers, []byte(`[{"id": "s1", "address": "`+addr+`", "non_voter": false}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	f := fsm.New()
	m := start(t, Config{ID: "s1", DataDir: dir, BindAddr: addr}, f)
	defer m.Shutdown()
	ps, err := m.Peers()
	if err != nil || len(ps) != 1 || ps[0].ID != "s1" {
		t.Fatalf("peers after recovery: %+v %v", ps, err)
	}
	if r, ok := f.Lookup("a"); !ok || r.Worker != "w1" {
		t.Fatalf("the log before the recovery is lost: %+v %v", r, ok)
	}
	if _, err := os.Stat(peers); !os.IsNotExist(err) {
		t.Fatalf("peers.json is still there (%v)", err)
	}
	if _, err := os.Stat(peers + ".applied"); err != nil {
		t.Fatal(err)
	}
	connect(t, m, "b", "w2") // and it takes writes again
}

// With SnapshotOnStop, a stop takes a snapshot of what was applied since
// the last one, so the next start replays nothing from the log; without
// it, the entries after the last snapshot stay only in the log.
func TestSnapshotOnStop(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			dir := t.TempDir()
			cfg := Config{ID: "s1", DataDir: dir, BindAddr: "127.0.0.1:0", Bootstrap: true, SnapshotOnStop: on}
			n := start(t, cfg, fsm.New())
			for _, c := range []string{"a", "b", "c"} {
				connect(t, n, c, "w1")
			}
			if err := n.Shutdown(); err != nil {
				t.Fatal(err)
			}
			// Read once raft has stopped: an apply's future can answer
			// before raft counts its entry as applied.
			applied := n.Raft.AppliedIndex()
			snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "raft"), 1, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			metas, err := snaps.List()
			if err != nil {
				t.Fatal(err)
			}
			got := uint64(0)
			if len(metas) > 0 {
				got = metas[0].Index
			}
			if want := map[bool]uint64{false: 0, true: applied}[on]; got != want {
				t.Fatalf("last snapshot at %d after the stop, want %d (applied %d)", got, want, applied)
			}
			g := fsm.New()
			m := start(t, cfg, g)
			defer m.Shutdown()
			deadline := time.Now().Add(10 * time.Second)
			for conns, _ := g.Counts(); conns != 3; conns, _ = g.Counts() {
				if time.Now().After(deadline) {
					t.Fatalf("after restart: %d conns, want 3", conns)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
