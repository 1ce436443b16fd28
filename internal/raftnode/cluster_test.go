package raftnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/internal/fsm"
)

func freeAddr(t *testing.T) string { return freeport.Addr(t) }

type member struct {
	cfg  Config
	fsm  *fsm.FSM
	node *Node
}

func (m *member) start(t *testing.T) {
	t.Helper()
	m.fsm = fsm.New()
	n, err := New(m.cfg, m.fsm)
	if err != nil {
		t.Fatal(err)
	}
	m.node = n
}

// A real three-member cluster over TCP on loopback: a member that was down
// while the leader compacted its log catches up from a snapshot.
func TestClusterCatchUpFromSnapshot(t *testing.T) {
	log := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: hclog.DefaultOutput})
	ms := make([]*member, 3)
	addrs := map[string]string{}
	for i := range ms {
		id := fmt.Sprintf("m%d", i+1)
		ms[i] = &member{cfg: Config{ID: id, DataDir: t.TempDir(), BindAddr: freeAddr(t), SnapshotThreshold: 16, TrailingLogs: 8, Logger: log}}
		addrs[id] = ms[i].cfg.BindAddr
	}
	for _, m := range ms {
		m.start(t)
		defer func(m *member) { m.node.Shutdown() }(m)
	}
	for _, m := range ms {
		if err := m.node.Bootstrap(addrs); err != nil {
			t.Fatal(err)
		}
	}
	leader := func() *member {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			for _, m := range ms {
				if m.node.Raft != nil && m.node.IsLeader() {
					return m
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatal("no leader")
		return nil
	}
	l := leader()
	var down *member
	for _, m := range ms {
		if m != l {
			down = m
			break
		}
	}
	if err := down.node.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Writes while it is down, then a snapshot that compacts the log past
	// them: the returning member cannot be sent those entries one by one.
	for i := 0; i < 100; i++ {
		b, _ := fsm.Encode(fsm.ConnectRequestType, fsm.ConnectRequest{Conn: fmt.Sprintf("c%d", i), Worker: "w"})
		if _, err := l.node.Apply(context.Background(), b); err != nil {
			t.Fatal(err)
		}
	}
	// Every live member compacts, not only the leader: under load another
	// one may be elected while the member returns, and it must not hold
	// the entries either.
	for _, m := range ms {
		if m == down {
			continue
		}
		if err := m.node.Raft.Barrier(10 * time.Second).Error(); err != nil && m == l {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			if conns, _ := m.fsm.Counts(); conns == 100 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("member %s did not apply the writes", m.cfg.ID)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := m.node.Raft.Snapshot().Error(); err != nil {
			t.Fatalf("member %s: snapshot: %v", m.cfg.ID, err)
		}
	}
	down.start(t)
	// Raft records the installed snapshot just after the FSM has restored
	// it, so the maps can be whole a moment before the stats say how they
	// got there: wait for both.
	deadline := time.Now().Add(20 * time.Second)
	for {
		conns, _ := down.fsm.Counts()
		snap := down.node.Raft.Stats()["last_snapshot_index"]
		if conns == 100 && snap != "0" {
			break
		}
		if time.Now().After(deadline) {
			if conns == 100 {
				t.Fatalf("the returning member caught up without a snapshot (last_snapshot_index %s)", snap)
			}
			t.Fatalf("the returning member has %d of 100 connections", conns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
