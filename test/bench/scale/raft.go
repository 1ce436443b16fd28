package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/freeport"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/raftnode"
	"github.com/stickyd/stickyd/internal/supervisor"
)

// noWorkers is the supervisor's view of workers: the simulation places
// people itself.
type noWorkers struct{}

func (noWorkers) Ready() []string         { return nil }
func (noWorkers) GroupOf(w string) string { return "default" }
func (noWorkers) Local() []string         { return nil }

// raftResult is what three servers did with the population.
type raftResult struct {
	entries                time.Duration // arrivals: the time they took
	connEntries            int
	connsPerSec            float64
	moves                  int
	moveEntries            int
	movesPerSec            float64
	snapDuringArrivals     time.Duration // a leader snapshot taken mid-arrivals, whole (take + persist)
	snapDuringMoves        time.Duration
	maxApply               time.Duration // longest FSM apply on any server over the run
	maxApplyServer         string
	maxWait                time.Duration // longest an apply waited for the maps' lock
	maxWaitServer          string
	stop                   time.Duration // the follower's stop, its snapshot taken first
	restoredOwn            time.Duration // the restarted follower's start: its own snapshot restored
	catchUpDisk            time.Duration // a follower restarted with its disk
	catchUpEmpty           time.Duration // a follower replaced with an empty disk: a snapshot sent
	catchUpEntriesMissed   uint64
	restartedPeopleOnEmpty int
}

func (r *raftResult) rows(row func(k, v string)) {
	row("raft: new connections through the supervisor and the log (3 servers, on disk, group commit)", fmt.Sprintf("%.0f/s (%d connections in %v)", r.connsPerSec, r.connEntries, r.entries.Round(time.Millisecond)))
	row("raft: people moved (batched road, two entries a batch)", fmt.Sprintf("%.0f/s (%d people, %d entries)", r.movesPerSec, r.moves, r.moveEntries))
	row("raft: a snapshot during the arrivals (take + persist)", ms(r.snapDuringArrivals))
	row("raft: a snapshot during the moves (take + persist)", ms(r.snapDuringMoves))
	row("raft: longest an apply waited for the maps' lock, any server", fmt.Sprintf("%s (%s)", ms(r.maxWait), r.maxWaitServer))
	row("raft: longest apply, wait and work (the process's scheduling included)", fmt.Sprintf("%s (%s)", ms(r.maxApply), r.maxApplyServer))
	row("raft: a follower stopped (a snapshot taken first, as an agent stops)", ms(r.stop))
	row("raft: a follower restarted with its disk: its own snapshot restored", ms(r.restoredOwn))
	row("raft: a follower restarted with its disk caught up (the leader's retry backoff included)", fmt.Sprintf("%s (%d entries behind)", ms(r.catchUpDisk), r.catchUpEntriesMissed))
	row("raft: a follower replaced with an empty disk caught up (snapshot sent)", fmt.Sprintf("%s (%d people)", ms(r.catchUpEmpty), r.restartedPeopleOnEmpty))
}

// timedFSM is the maps with the longest Apply kept.
type timedFSM struct {
	*fsm.FSM
	max atomic.Int64
}

func (t *timedFSM) Apply(l *raft.Log) interface{} {
	t0 := time.Now()
	out := t.FSM.Apply(l)
	if d := int64(time.Since(t0)); d > t.max.Load() {
		t.max.Store(d)
	}
	return out
}

// ApplyBatch keeps raft's batches (BatchApplyCh) going through Apply.
var _ raft.FSM = (*timedFSM)(nil)

type server struct {
	// waited is the longest lock wait of its FSMs before the last start.
	waited time.Duration
	id     string
	addr   string
	dir    string
	fsm    *timedFSM
	node   *raftnode.Node
}

func (s *server) start(log hclog.Logger) error {
	if s.fsm != nil {
		s.waited = max(s.waited, s.fsm.MaxApplyWait())
	}
	s.fsm = &timedFSM{FSM: fsm.New()}
	n, err := raftnode.New(raftnode.Config{ID: s.id, DataDir: s.dir, BindAddr: s.addr, Logger: log, SnapshotOnStop: true}, s.fsm)
	if err != nil {
		return err
	}
	s.node = n
	return nil
}

func measureRaft(ctx context.Context, o options, dir string, stderr io.Writer) (raftResult, error) {
	var r raftResult
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Error, Output: stderr})
	ports, err := freeport.Take(3)
	if err != nil {
		return r, err
	}
	servers := make([]*server, 3)
	members := map[string]string{}
	for i := range servers {
		s := &server{id: fmt.Sprintf("s%d", i+1), addr: fmt.Sprintf("127.0.0.1:%d", ports[i]), dir: filepath.Join(dir, fmt.Sprintf("s%d", i+1))}
		servers[i] = s
		members[s.id] = s.addr
		if err := s.start(logger); err != nil {
			return r, err
		}
	}
	defer func() {
		for _, s := range servers {
			s.node.Shutdown()
		}
	}()
	for _, s := range servers {
		if err := s.node.Bootstrap(members); err != nil {
			return r, err
		}
	}
	leader, err := waitLeader(ctx, servers)
	if err != nil {
		return r, err
	}
	log := &clusterLog{servers: servers}
	apply := func(typ fsm.MessageType, body any) (any, error) {
		b, err := fsm.Encode(typ, body)
		if err != nil {
			return nil, err
		}
		return log.Apply(ctx, b)
	}
	// The hosts register their workers.
	for h := range o.hosts {
		ws := map[string]string{}
		for w := range o.workers {
			ws[workerName(h, w)] = "default"
		}
		if _, err := apply(fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: fmt.Sprintf("h%03d", h), Workers: ws}); err != nil {
			return r, fmt.Errorf("registering host %d: %w", h, err)
		}
	}

	// Arrivals: every writer a front binding a new connection through the
	// supervisor, as the front does.
	sup := supervisor.New(leader.fsm.FSM, log, noWorkers{}, nil)
	var next atomic.Int64
	total := int64(o.people * o.conns)
	snapAt := total / 2
	var snapErr error
	var snapWG sync.WaitGroup
	start := time.Now()
	err = parallel(o.writers, func() error {
		for {
			n := next.Add(1) - 1
			if n >= total {
				return nil
			}
			if n == snapAt {
				snapWG.Add(1)
				go func() {
					defer snapWG.Done()
					t0 := time.Now()
					snapErr = leader.node.Raft.Snapshot().Error()
					r.snapDuringArrivals = time.Since(t0)
				}()
			}
			i, c := int(n)/o.conns, int(n)%o.conns
			w := workerName(i%o.hosts, (i/o.hosts)%o.workers)
			// The front's road: the supervisor writes the connections
			// named together in one entry (group commit).
			if _, err := sup.Connect(ctx, connName(i, c), personName(i), w); err != nil {
				return fmt.Errorf("connecting %s: %w", personName(i), err)
			}
			if n%100_000 == 0 && n > 0 {
				fmt.Fprintf(stderr, "raft: %d connections (%.0f/s)\n", n, float64(n)/time.Since(start).Seconds())
			}
		}
	})
	r.entries = time.Since(start)
	snapWG.Wait()
	if err != nil {
		return r, err
	}
	if snapErr != nil {
		return r, fmt.Errorf("snapshot during the arrivals: %w", snapErr)
	}
	r.connEntries = int(total)
	r.connsPerSec = float64(total) / r.entries.Seconds()
	fmt.Fprintf(stderr, "raft: %d connections in %v (%.0f/s), snapshot %v\n", total, r.entries.Round(time.Millisecond), r.connsPerSec, r.snapDuringArrivals.Round(time.Millisecond))

	// A follower goes down; the moves go on without it.
	leader = log.leader()
	down := servers[0]
	if down == leader {
		down = servers[1]
	}
	downIndex := down.fsm.Index()
	// Stopped as an agent stops it: a snapshot first (SnapshotOnStop).
	t0 := time.Now()
	if err := down.node.Shutdown(); err != nil {
		return r, err
	}
	r.stop = time.Since(t0)
	fmt.Fprintf(stderr, "raft: %s stopped at index %d in %v (a snapshot first)\n", down.id, downIndex, r.stop.Round(time.Millisecond))

	retried := &log.retried
	// Moves: every writer a mover taking a batch of people to another
	// host's worker, begin and commit entries.
	batches := (o.moves + o.batch - 1) / o.batch
	var nextBatch atomic.Int64
	var moved, entries atomic.Int64
	snapBatch := int64(batches / 2)
	start = time.Now()
	err = parallel(min(o.writers, batches), func() error {
		for {
			b := nextBatch.Add(1) - 1
			if b >= int64(batches) {
				return nil
			}
			if b == snapBatch {
				snapWG.Add(1)
				go func() {
					defer snapWG.Done()
					t0 := time.Now()
					snapErr = leader.node.Raft.Snapshot().Error()
					r.snapDuringMoves = time.Since(t0)
				}()
			}
			var begin fsm.MoveBatchRequest
			for k := int(b) * o.batch; k < min(int(b+1)*o.batch, o.moves); k++ {
				i := int((int64(k) * 7919) % int64(o.people))
				u, ok := log.leader().fsm.User(personName(i))
				if !ok {
					return fmt.Errorf("%s is not in the maps", personName(i))
				}
				to := workerName((i+1)%o.hosts, (i/o.hosts+1)%o.workers)
				begin.Begin = append(begin.Begin, fsm.MoveBeginRequest{User: u.User, From: u.Worker, To: to, Epoch: u.Epoch})
			}
			out, err := apply(fsm.MoveBatchRequestType, begin)
			if err != nil {
				return fmt.Errorf("raising barriers: %w", err)
			}
			var commit fsm.MoveBatchRequest
			for j, p := range out.(fsm.MoveBatchResult).Begin {
				if err := p.Err(); err != nil {
					if errors.Is(err, fsm.ErrBusy) && retried.Load() > 0 {
						continue // a begin written twice across a leader change
					}
					return fmt.Errorf("raising %s's barrier: %w", begin.Begin[j].User, err)
				}
				commit.Commit = append(commit.Commit, fsm.MoveCommitRequest{User: p.User.User, To: begin.Begin[j].To, Epoch: p.User.Epoch, Package: "sha256:bench"})
			}
			out, err = apply(fsm.MoveBatchRequestType, commit)
			if err != nil {
				return fmt.Errorf("reassigning: %w", err)
			}
			for j, p := range out.(fsm.MoveBatchResult).Commit {
				if err := p.Err(); err != nil {
					return fmt.Errorf("reassigning %s: %w", commit.Commit[j].User, err)
				}
			}
			moved.Add(int64(len(commit.Commit)))
			entries.Add(2)
		}
	})
	moveTime := time.Since(start)
	snapWG.Wait()
	if err != nil {
		return r, err
	}
	if snapErr != nil {
		return r, fmt.Errorf("snapshot during the moves: %w", snapErr)
	}
	r.moves, r.moveEntries = int(moved.Load()), int(entries.Load())
	r.movesPerSec = float64(r.moves) / moveTime.Seconds()
	fmt.Fprintf(stderr, "raft: %d people moved in %v (%.0f/s)\n", r.moves, moveTime.Round(time.Millisecond), r.movesPerSec)

	// The follower comes back with its disk: it restores its own latest
	// snapshot and takes the entries it missed.
	leader = log.leader()
	if err := leader.node.Barrier(ctx); err != nil {
		return r, err
	}
	target := leader.fsm.Index()
	r.catchUpEntriesMissed = target - downIndex
	t0 = time.Now()
	if err := down.start(logger); err != nil {
		return r, fmt.Errorf("restarting %s: %w", down.id, err)
	}
	// raft restores the member's own latest snapshot as it starts; the
	// rest is the leader's: its next try to reach the member (raft backs
	// off up to 10 s the longer a member stays unreachable) and the
	// entries missed.
	r.restoredOwn = time.Since(t0)
	if err := waitIndex(ctx, down, target); err != nil {
		return r, err
	}
	r.catchUpDisk = time.Since(t0)
	fmt.Fprintf(stderr, "raft: %s restarted with its disk: its snapshot restored in %v, caught up in %v\n", down.id, r.restoredOwn.Round(time.Millisecond), r.catchUpDisk.Round(time.Millisecond))

	// Replaced with an empty disk: the leader sends it the snapshot.
	if err := down.node.Shutdown(); err != nil {
		return r, err
	}
	if err := os.RemoveAll(down.dir); err != nil {
		return r, err
	}
	t0 = time.Now()
	if err := down.start(logger); err != nil {
		return r, fmt.Errorf("starting %s empty: %w", down.id, err)
	}
	if err := waitIndex(ctx, down, target); err != nil {
		return r, err
	}
	r.catchUpEmpty = time.Since(t0)
	_, r.restartedPeopleOnEmpty = down.fsm.Counts()
	if r.restartedPeopleOnEmpty != o.people {
		return r, fmt.Errorf("the replaced follower holds %d people, want %d", r.restartedPeopleOnEmpty, o.people)
	}
	fmt.Fprintf(stderr, "raft: %s replaced empty, caught up in %v\n", down.id, r.catchUpEmpty.Round(time.Millisecond))
	for _, s := range servers {
		if d := time.Duration(s.fsm.max.Load()); d > r.maxApply {
			r.maxApply, r.maxApplyServer = d, s.id
		}
		if d := max(s.waited, s.fsm.MaxApplyWait()); d > r.maxWait {
			r.maxWait, r.maxWaitServer = d, s.id
		}
	}
	return r, nil
}

// clusterLog writes through whoever leads, waiting out an election as the
// agent's forwarding log does: a write is tried again on the new leader
// (connections and moves are recognised when written twice).
type clusterLog struct {
	servers []*server
	retried atomic.Int64
}

func (l *clusterLog) leader() *server {
	for {
		for _, s := range l.servers {
			if s.node != nil && s.node.Raft.State() == raft.Leader {
				return s
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (l *clusterLog) Apply(ctx context.Context, entry []byte) (any, error) {
	for try := 0; ; try++ {
		res, err := l.leader().node.Apply(ctx, entry)
		if !errors.Is(err, raftnode.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) || try == 100 {
			return res, err
		}
		l.retried.Add(1)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}

// parallel runs n copies of fn and returns the first error.
func parallel(n int, fn func() error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil {
				once.Do(func() { first = err })
			}
		}()
	}
	wg.Wait()
	return first
}

func waitLeader(ctx context.Context, servers []*server) (*server, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, s := range servers {
			if s.node.IsLeader() {
				return s, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil, errors.New("no raft leader in 30 s")
}

// waitIndex waits until s has applied index.
func waitIndex(ctx context.Context, s *server, index uint64) error {
	deadline := time.Now().Add(5 * time.Minute)
	for s.fsm.Index() < index {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s applied %d of %d in 5 minutes", s.id, s.fsm.Index(), index)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}
