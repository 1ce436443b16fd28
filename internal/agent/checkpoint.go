package agent

import (
	"path/filepath"
	"time"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// Crash checkpoints (docs/checkpoints.md) are the host's
// (host.LoadCheckpoints, host.CheckpointIndex, host.FileJournal); the agent
// reads each group's checkpoint_interval and gives the pool its index.

// checkpointInterval is how often the workers of group checkpoint here.
func (a *Agent) checkpointInterval(group string) time.Duration {
	if g, _ := a.cfg.group(group); g != nil {
		d, _ := host.ParseCheckpointInterval(g.CheckpointInterval) // checked by Finish
		return d
	}
	return host.DefaultCheckpointInterval
}

// startCheckpoints gives the pool its checkpoint index, loaded from the
// journal (data_dir/restart/checkpoints): it returns how many people it
// holds pieces of. It runs once the maps are restored and before the
// workers start.
func (a *Agent) startCheckpoints() (int, error) {
	cfg := host.CheckpointStartConfig{Store: a.park, Maps: a.fsm, Raft: replica{a.raft},
		Loaded: func(n int) { a.checkpointed.Store(int64(n)) }, Logger: a.log, Registry: a.registry}
	if a.cfg.DataDir != "" {
		cfg.JournalDir = filepath.Join(a.restartDir(), "checkpoints")
	}
	x, n, err := host.LoadCheckpoints(cfg)
	a.pool.Checkpoints = x
	return n, err
}

// Checkpoints is the index of this agent's workers' crash checkpoints.
func (a *Agent) Checkpoints() *host.CheckpointIndex {
	x, _ := a.pool.Checkpoints.(*host.CheckpointIndex)
	return x
}

// replica is the raft member as host.LoadCheckpoints waits for it.
type replica struct{ *raftnode.Node }

func (r replica) LastIndex() uint64 { return r.Raft.LastIndex() }
