package host

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// Crash checkpoints at an agent's start (docs/checkpoints.md): every
// group's workers checkpoint the pages changed since their last checkpoint
// every checkpoint_interval; the pieces are parked in the agent's park
// store and indexed by the CheckpointIndex. The index is journaled beside
// the park folders (FileJournal), so that even an agent that crashed wakes
// its people from their checkpoints when it comes back; the maps decide
// whose pieces are still worth keeping (keepCheckpoint).

// DefaultCheckpointInterval is a group's checkpoint_interval when it sets
// none (and a catalog group's).
const DefaultCheckpointInterval = 5 * time.Second

// minCheckpointInterval is the shortest interval accepted.
const minCheckpointInterval = 100 * time.Millisecond

// ParseCheckpointInterval reads a checkpoint_interval: "" is the default,
// "off" or a zero duration is never (0).
func ParseCheckpointInterval(s string) (time.Duration, error) {
	switch s {
	case "":
		return DefaultCheckpointInterval, nil
	case "off", "0":
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || (d > 0 && d < minCheckpointInterval) {
		return 0, fmt.Errorf("checkpoint_interval %q: want a duration of at least %v like \"5s\", or \"off\"", s, minCheckpointInterval)
	}
	return d, nil
}

// Replica is this agent's raft member as the checkpoints' load waits for
// its replica of the maps to catch up with the log.
type Replica interface {
	IsLeader() bool
	// Barrier waits until every entry before it is applied (leader only).
	Barrier(ctx context.Context) error
	// LastIndex is the index of the last entry in the local log.
	LastIndex() uint64
}

// CheckpointStartConfig is what LoadCheckpoints is given.
type CheckpointStartConfig struct {
	// Store is where the pieces are parked (the agent's park store).
	Store CheckpointStore
	// JournalDir keeps the journal (FileJournal); "" keeps none (an agent
	// without a data directory): the index then starts empty, at once.
	JournalDir string
	// Maps say whose pieces still stand for them (keepCheckpoint).
	Maps *fsm.FSM
	// Raft is waited for before the journal is read (catchUpMaps).
	Raft Replica
	// Loaded, if set, is told how many people the journal held pieces of,
	// once the load behind the start ends well.
	Loaded   func(people int)
	Logger   hclog.Logger
	Registry prometheus.Registerer
}

// LoadCheckpoints returns the crash checkpoint index of the pool, loaded
// from the journal, and how many people it holds pieces of. It runs once
// the maps are restored and before the workers start. With a journal the
// load runs behind the start (a frame that needs a checkpoint waits for
// it) and the count is 0: Loaded is told it later.
func LoadCheckpoints(cfg CheckpointStartConfig) (*CheckpointIndex, int, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	var journal CheckpointJournal
	if cfg.JournalDir != "" {
		journal = NewFileJournal(cfg.JournalDir)
	}
	keep := func(worker, user string, epoch uint64) bool { return keepCheckpoint(cfg.Maps, worker, user, epoch) }
	x := NewCheckpointIndex(CheckpointConfig{Store: cfg.Store, Journal: journal, Keep: keep,
		Logger: cfg.Logger.Named("checkpoint"), Registry: cfg.Registry})
	if cfg.JournalDir == "" {
		n, err := x.Load()
		return x, n, err
	}
	// Behind the start: a frame that needs a checkpoint waits for it.
	start := time.Now()
	x.LoadAsync(func() { catchUpMaps(cfg.Raft, cfg.Maps, cfg.Logger) }, func(n int, err error) {
		if err != nil {
			cfg.Logger.Error("loading the crash checkpoint journal: people not parked restart clean", "error", err)
			return
		}
		if cfg.Loaded != nil {
			cfg.Loaded(n)
		}
		cfg.Logger.Info("crash checkpoints loaded", "people", n, "took", time.Since(start).Round(time.Millisecond))
	})
	return x, 0, nil
}

// catchUpMaps waits (at most 30 s) until the local replica has applied
// every entry of the log as it stood at start: which checkpoints are kept
// is read from the maps, and after a crash the entries since the last
// snapshot (the people's logins and moves) are replayed behind the start.
func catchUpMaps(r Replica, maps *fsm.FSM, log hclog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if r.IsLeader() {
		if err := r.Barrier(ctx); err != nil {
			log.Warn("waiting for the maps before loading the checkpoints", "error", err)
		}
		return
	}
	last := r.LastIndex()
	for maps.Index() < last && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// keepCheckpoint says whether a person's pieces of epoch on worker still
// stand for their state: the maps have them live there, or moving from
// there, and the pieces were taken since they arrived (a move that rolls
// back raises the epoch but leaves them home, with the same state: a
// stop whose park of them failed wakes them from these). A parked person
// wakes from their package.
func keepCheckpoint(maps *fsm.FSM, worker, user string, epoch uint64) bool {
	u, ok := maps.User(user)
	if !ok || u.Worker != worker {
		return false
	}
	_, since, _ := maps.ArrivedAt(user)
	switch u.State {
	case placement.StateLive:
		return since <= epoch && epoch <= u.Epoch
	case placement.StateMoving:
		return since <= epoch && epoch < u.Epoch
	}
	return false
}
