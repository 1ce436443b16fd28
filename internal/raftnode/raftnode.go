// Package raftnode runs one hashicorp/raft member for the supervisor: its log
// and stable store (BoltDB under the data dir, or in memory for dev), its
// snapshots, its TCP transport, and applying entries with a deadline. It
// knows the FSM only as a raft.FSM.
package raftnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// Config describes one member.
type Config struct {
	// ID names the member; it must be stable across restarts.
	ID string
	// DataDir holds the log, stable store and snapshots. Empty means
	// everything in memory (dev mode): nothing survives the process.
	DataDir string
	// BindAddr is the TCP address of the raft transport ("127.0.0.1:0"
	// picks a port). Empty means an in-memory transport (single member).
	BindAddr string
	// Advertise is the address the other members dial; empty means
	// BindAddr.
	Advertise string
	// Bootstrap makes the member bootstrap a single-voter cluster when it
	// has no state yet.
	Bootstrap bool
	// Solo marks a member that will always be alone: its timers are short,
	// so it leads right after a start.
	Solo bool
	// SnapshotThreshold is how many log entries trigger a snapshot; zero
	// means raft's default (8192).
	SnapshotThreshold uint64
	// TrailingLogs is how many entries stay in the log after a snapshot,
	// for followers slightly behind; zero means raft's default (10240).
	TrailingLogs uint64
	// SnapshotOnStop makes Shutdown take a snapshot first when entries
	// were applied since the last one: the next start restores it and
	// replays only what it missed while down, instead of everything since
	// the last periodic snapshot (up to SnapshotInterval's worth of
	// entries: seconds at a million people).
	SnapshotOnStop bool
	// TLS, if set, makes the transport mutual TLS: it accepts only servers
	// of the cluster (leaders and candidates are) and dials servers and
	// hosts (a host is a non-voter the leader replicates to).
	TLS *tlsutil.Manager
	// Notify, if set, receives true when this member becomes leader and
	// false when it stops being one (raft's NotifyCh). Raft waits for
	// each send: it must be buffered and read by one owner, always
	// (server.Leadership).
	Notify chan bool
	Logger hclog.Logger
}

// Node is one running member.
type Node struct {
	Raft      *raft.Raft
	id        string
	peers     *peerHealth
	transport raft.Transport
	closers   []func() error
	logs      raft.LogStore
	stable    raft.StableStore
	snaps     raft.SnapshotStore
	stopOnce  sync.Once
	stopErr   error
	// snapshotOnStop is Config.SnapshotOnStop, on disk.
	snapshotOnStop bool
	log            hclog.Logger
}

// ErrNotLeader is returned when a write reaches a member that is not the leader.
var ErrNotLeader = errors.New("not the raft leader")

// New starts a member.
func New(cfg Config, fsm raft.FSM) (*Node, error) {
	if cfg.ID == "" {
		return nil, errors.New("raft: a member needs an id")
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.Logger = log.Named("raft")
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	if cfg.TrailingLogs > 0 {
		rc.TrailingLogs = cfg.TrailingLogs
	}
	// Group commit: entries applied together reach the log in one write
	// (one fsync) and followers in one append, up to 256 at a time. Under
	// a burst (the gateway's queue takes three entries per call) this is
	// what bounds the rate, not the disk's fsyncs per second.
	rc.MaxAppendEntries = 256
	rc.BatchApplyCh = true
	// A snapshot holds the maps' lock for the shards' pointers only and is
	// written off it, so one is checked for every 30 s (raft's default is
	// 120 s): a server that restarts replays at most that much of the log.
	rc.SnapshotInterval = 30 * time.Second
	if cfg.Bootstrap && cfg.Solo {
		// Alone there is nobody to wait for: elect at once at start.
		rc.HeartbeatTimeout = 100 * time.Millisecond
		rc.ElectionTimeout = 100 * time.Millisecond
		rc.LeaderLeaseTimeout = 50 * time.Millisecond
	}
	n := &Node{id: cfg.ID, snapshotOnStop: cfg.SnapshotOnStop && cfg.DataDir != "", log: log}
	if cfg.Notify != nil {
		rc.NotifyCh = cfg.Notify
	}
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.DataDir == "" {
		s := raft.NewInmemStore()
		logs, stable, snaps = s, s, raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(cfg.DataDir, "raft")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("creating raft dir: %w", err)
		}
		bolt, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
		if err != nil {
			return nil, fmt.Errorf("opening raft log: %w", err)
		}
		n.closers = append(n.closers, bolt.Close)
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, log.Named("snapshot"))
		if err != nil {
			n.close()
			return nil, fmt.Errorf("opening snapshot store: %w", err)
		}
		logs, stable, snaps = bolt, bolt, fss
	}
	if cfg.BindAddr == "" {
		_, t := raft.NewInmemTransport(raft.ServerAddress(cfg.ID))
		n.transport = t
	} else {
		adv := cfg.Advertise
		if adv == "" {
			adv = cfg.BindAddr
		}
		addr, err := net.ResolveTCPAddr("tcp", adv)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("resolving raft address %q: %w", adv, err)
		}
		var t *raft.NetworkTransport
		if cfg.TLS != nil {
			t, err = tlsTransport(cfg.BindAddr, addr, cfg.TLS, log.Named("transport"))
		} else {
			t, err = raft.NewTCPTransportWithLogger(cfg.BindAddr, addr, 3, 10*time.Second, log.Named("transport"))
		}
		if err != nil {
			n.close()
			return nil, fmt.Errorf("starting raft transport on %s: %w", cfg.BindAddr, err)
		}
		n.transport = t
		n.closers = append(n.closers, t.Close)
	}
	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("reading raft state: %w", err)
		}
		if !has {
			conf := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: n.transport.LocalAddr()}}}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, n.transport, conf); err != nil {
				n.close()
				return nil, fmt.Errorf("bootstrapping raft: %w", err)
			}
		}
	}
	if cfg.DataDir != "" {
		if err := recoverFromPeersFile(rc, fsm, filepath.Join(cfg.DataDir, "raft"), logs, stable, snaps, n.transport, log); err != nil {
			n.close()
			return nil, err
		}
	}
	n.logs, n.stable, n.snaps = logs, stable, snaps
	r, err := raft.NewRaft(rc, fsm, logs, stable, snaps, n.transport)
	if err != nil {
		n.close()
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	n.Raft = r
	n.peers = newPeerHealth(r)
	return n, nil
}

// IsLeader reports whether this member is the leader now.
func (n *Node) IsLeader() bool { return n.Raft.State() == raft.Leader }

// Leader returns the leader's raft address and id ("" when there is none).
func (n *Node) Leader() (addr, id string) {
	a, i := n.Raft.LeaderWithID()
	return string(a), string(i)
}

// HasState reports whether the member has a log or snapshot already: a
// member that has is part of a cluster and must not bootstrap again.
func (n *Node) HasState() (bool, error) { return raft.HasExistingState(n.logs, n.stable, n.snaps) }

// Snapshot takes a snapshot of the maps now and opens it (the latest one
// taken, if nothing was written since). The caller closes the reader.
func (n *Node) Snapshot() (*raft.SnapshotMeta, io.ReadCloser, error) {
	f := n.Raft.Snapshot()
	err := f.Error()
	if err == nil {
		return f.Open()
	}
	if !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return nil, nil, fmt.Errorf("taking a snapshot: %w", err)
	}
	metas, err := n.snaps.List()
	if err != nil || len(metas) == 0 {
		return nil, nil, fmt.Errorf("no snapshot to open (%v)", err)
	}
	return n.snaps.Open(metas[0].ID)
}

// Bootstrap starts a new cluster of the given members (id → raft address).
// Every member may call it with the same set; raft keeps the first.
func (n *Node) Bootstrap(members map[string]string) error {
	var conf raft.Configuration
	for id, addr := range members {
		conf.Servers = append(conf.Servers, raft.Server{ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	}
	err := n.Raft.BootstrapCluster(conf).Error()
	if errors.Is(err, raft.ErrCantBootstrap) {
		return nil
	}
	return err
}

// Peer is a raft member as the operator sees it.
type Peer struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Voter   bool   `json:"voter"`
	Leader  bool   `json:"leader"`
}

// Peers lists the members of the raft configuration.
func (n *Node) Peers() ([]Peer, error) {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := n.Leader()
	var out []Peer
	for _, s := range f.Configuration().Servers {
		out = append(out, Peer{ID: string(s.ID), Address: string(s.Address), Voter: s.Suffrage == raft.Voter, Leader: string(s.ID) == leader})
	}
	return out, nil
}

// Addr is the transport's address.
func (n *Node) Addr() string { return string(n.transport.LocalAddr()) }

// WaitLeader waits until some member is leader.
func (n *Node) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, _ := n.Raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for a raft leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Barrier waits until every entry committed before it has been applied to
// the FSM: after it, the local maps are as fresh as the log. Leader only.
func (n *Node) Barrier(ctx context.Context) error {
	timeout := 30 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if err := n.Raft.Barrier(timeout).Error(); err != nil {
		return fmt.Errorf("waiting for the log to be applied: %w", err)
	}
	return nil
}

// Apply writes one entry through the log and returns what the FSM returned
// for it (an error value from the FSM is returned as the error).
func (n *Node) Apply(ctx context.Context, entry []byte) (any, error) {
	res, _, err := n.ApplyIndex(ctx, entry)
	return res, err
}

// ApplyIndex is Apply that also returns the entry's log index, so that a
// follower that forwarded the write can wait until its replica has it.
func (n *Node) ApplyIndex(ctx context.Context, entry []byte) (any, uint64, error) {
	timeout := 10 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
		if timeout <= 0 {
			return nil, 0, context.DeadlineExceeded
		}
	}
	f := n.Raft.Apply(entry, timeout)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) {
			return nil, 0, ErrNotLeader
		}
		return nil, 0, fmt.Errorf("applying raft entry: %w", err)
	}
	if err, ok := f.Response().(error); ok {
		return nil, f.Index(), err
	}
	return f.Response(), f.Index(), nil
}

// Shutdown stops the member and closes its stores. Idempotent. Raft stays
// set: a late call gets raft's ErrRaftShutdown (State reports Shutdown),
// never a nil pointer.
func (n *Node) Shutdown() error {
	n.stopOnce.Do(func() {
		if n.Raft != nil {
			if n.peers != nil {
				n.peers.close(n.Raft)
			}
			if n.snapshotOnStop {
				n.snapshotBeforeStop()
			}
			n.stopErr = n.Raft.Shutdown().Error()
		}
		n.close()
	})
	return n.stopErr
}

// snapshotBeforeStop takes a snapshot if entries were applied since the
// last one (Config.SnapshotOnStop). A failure is logged, never kept from
// stopping: the log still holds everything.
func (n *Node) snapshotBeforeStop() {
	last := uint64(0)
	if metas, err := n.snaps.List(); err == nil && len(metas) > 0 {
		last = metas[0].Index
	}
	if n.Raft.AppliedIndex() <= last {
		return
	}
	t0 := time.Now()
	err := n.Raft.Snapshot().Error()
	switch {
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
	case err != nil:
		n.log.Warn("no snapshot before stopping; the next start replays the log since the last one", "error", err)
	default:
		n.log.Info("snapshot taken before stopping", "index", n.Raft.AppliedIndex(), "took", time.Since(t0).Round(time.Millisecond))
	}
}

func (n *Node) close() {
	for i := len(n.closers) - 1; i >= 0; i-- {
		_ = n.closers[i]()
	}
	n.closers = nil
}

// AddVoter makes id a voting member at addr. A voter already known at the
// same address is a no-op; one known at another address (a server that
// came back on a new port) has its address updated in the same change; a
// member of another id at addr (the address's previous owner, gone) is
// removed first. Leader only.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		switch {
		case string(s.ID) == id && string(s.Address) == addr && s.Suffrage == raft.Voter:
			return nil
		case string(s.ID) != id && string(s.Address) == addr:
			if err := n.Raft.RemoveServer(s.ID, 0, timeoutOf(ctx)).Error(); err != nil {
				return notLeader(err)
			}
		}
	}
	return notLeader(n.Raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeoutOf(ctx)).Error())
}

func notLeader(err error) error {
	if errors.Is(err, raft.ErrNotLeader) {
		return ErrNotLeader
	}
	return err
}

// Health is how this member stands in its cluster.
type Health struct {
	// State is raft's: Leader, Follower, Candidate or Shutdown.
	State string `json:"state"`
	// Member is whether the configuration holds this member at its own
	// address; Voter whether it votes there.
	Member bool `json:"member"`
	Voter  bool `json:"voter"`
	// Leader is the leader's id, "" when none is known.
	Leader string `json:"leader"`
	// LastContact is how long ago a follower last heard from the leader
	// (zero on the leader; -1 never).
	LastContact time.Duration `json:"last_contact_ns"`
	// CommitIndex and AppliedIndex say how far the local replica trails
	// what it knows is committed.
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Health reads how this member stands now.
func (n *Node) Health() Health {
	h := Health{State: n.Raft.State().String(), CommitIndex: n.Raft.CommitIndex(), AppliedIndex: n.Raft.AppliedIndex()}
	_, h.Leader = n.Leader()
	if f := n.Raft.GetConfiguration(); f.Error() == nil {
		self := n.transport.LocalAddr()
		for _, s := range f.Configuration().Servers {
			if s.Address == self && (n.id == "" || string(s.ID) == n.id) {
				h.Member, h.Voter = true, s.Suffrage == raft.Voter
			}
		}
	}
	switch last := n.Raft.LastContact(); {
	case n.Raft.State() == raft.Leader:
	case last.IsZero():
		h.LastContact = -1
	default:
		h.LastContact = time.Since(last)
	}
	return h
}

// Healthy reports nil when the member is a voter (or, for a non-voting
// host, a member) at its own address, knows a leader it heard from within
// maxSilence, and has applied what it knows is committed within maxLag
// entries; otherwise an error saying what is wrong.
func (h Health) Healthy(voter bool, maxSilence time.Duration, maxLag uint64) error {
	switch {
	case !h.Member:
		return errors.New("not a raft member at this address")
	case voter && !h.Voter:
		return errors.New("a raft member that does not vote")
	case h.Leader == "":
		return errors.New("no raft leader known")
	case h.LastContact < 0 || h.LastContact > maxSilence:
		return fmt.Errorf("no word from the raft leader for %s", h.LastContact.Round(time.Millisecond))
	case h.CommitIndex > h.AppliedIndex+maxLag:
		return fmt.Errorf("the replica trails the log: applied %d of %d", h.AppliedIndex, h.CommitIndex)
	}
	return nil
}

// AddNonvoter adds a member that replicates the log and never votes: a
// host, which needs the maps but must not weigh on elections. Adding a
// member already known at the same address is a no-op. Leader only.
func (n *Node) AddNonvoter(ctx context.Context, id, addr string) error {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id && string(s.Address) == addr {
			return nil
		}
	}
	err := n.Raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeoutOf(ctx)).Error()
	if errors.Is(err, raft.ErrNotLeader) {
		return ErrNotLeader
	}
	return err
}

// RemoveMember removes a member from the configuration; an unknown id is a
// no-op. Leader only.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	f := n.Raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			err := n.Raft.RemoveServer(s.ID, 0, timeoutOf(ctx)).Error()
			if errors.Is(err, raft.ErrNotLeader) {
				return ErrNotLeader
			}
			return err
		}
	}
	return nil
}

// timeoutOf is what is left of ctx's deadline, 10 s without one.
func timeoutOf(ctx context.Context) time.Duration {
	if d, ok := ctx.Deadline(); ok {
		return max(time.Until(d), time.Millisecond)
	}
	return 10 * time.Second
}
