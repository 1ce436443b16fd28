package agent

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/placement"
)

// Crash checkpoints (docs/checkpoints.md): every group's workers checkpoint
// the pages changed since their last checkpoint every checkpoint_interval;
// the pieces are parked in the agent's park store and indexed by the host
// (host.CheckpointIndex). The index is journaled beside the park folders
// (data_dir/restart/checkpoints/<worker>.json), so that even an agent that
// crashed wakes its people from their checkpoints when it comes back; the
// maps decide whose pieces are still worth keeping.

// DefaultCheckpointInterval is a group's checkpoint_interval when it sets
// none (and a catalog group's).
const DefaultCheckpointInterval = 5 * time.Second

// minCheckpointInterval is the shortest interval accepted.
const minCheckpointInterval = 100 * time.Millisecond

// parseCheckpointInterval reads a checkpoint_interval: "" is the default,
// "off" or a zero duration is never.
func parseCheckpointInterval(s string) (time.Duration, error) {
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

// checkpointInterval is how often the workers of group checkpoint here.
func (a *Agent) checkpointInterval(group string) time.Duration {
	if g, _ := a.cfg.group(group); g != nil {
		d, _ := parseCheckpointInterval(g.CheckpointInterval) // checked by Finish
		return d
	}
	return DefaultCheckpointInterval
}

// startCheckpoints gives the pool its checkpoint index, loaded from the
// journal: it returns how many people it holds pieces of. It runs once the
// maps are restored and before the workers start.
func (a *Agent) startCheckpoints() (int, error) {
	var journal host.CheckpointJournal
	if a.cfg.DataDir != "" {
		journal = &fileJournal{dir: filepath.Join(a.restartDir(), "checkpoints")}
	}
	x := host.NewCheckpointIndex(host.CheckpointConfig{Store: a.park, Journal: journal, Keep: a.keepCheckpoint,
		Logger: a.log.Named("checkpoint"), Registry: a.registry})
	a.pool.Checkpoints = x
	if a.cfg.DataDir == "" {
		return x.Load()
	}
	// Behind the start: a frame that needs a checkpoint waits for it.
	start := time.Now()
	x.LoadAsync(a.catchUpMaps, func(n int, err error) {
		if err != nil {
			a.log.Error("loading the crash checkpoint journal: people not parked restart clean", "error", err)
			return
		}
		a.checkpointed.Store(int64(n))
		a.log.Info("crash checkpoints loaded", "people", n, "took", time.Since(start).Round(time.Millisecond))
	})
	return 0, nil
}

// catchUpMaps waits (at most 30 s) until the local replica has applied
// every entry of the log as it stood at start: which checkpoints are kept
// is read from the maps, and after a crash the entries since the last
// snapshot (the people's logins and moves) are replayed behind the start.
func (a *Agent) catchUpMaps() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if a.raft.IsLeader() {
		if err := a.raft.Barrier(ctx); err != nil {
			a.log.Warn("waiting for the maps before loading the checkpoints", "error", err)
		}
		return
	}
	last := a.raft.Raft.LastIndex()
	for a.fsm.Index() < last && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
}

// Checkpoints is the index of this agent's workers' crash checkpoints.
func (a *Agent) Checkpoints() *host.CheckpointIndex {
	x, _ := a.pool.Checkpoints.(*host.CheckpointIndex)
	return x
}

// keepCheckpoint says whether a person's pieces of epoch on worker still
// stand for their state: the maps have them live there, or moving from
// there, and the pieces were taken since they arrived (a move that rolls
// back raises the epoch but leaves them home, with the same state: a
// stop whose park of them failed wakes them from these). A parked person
// wakes from their package.
func (a *Agent) keepCheckpoint(worker, user string, epoch uint64) bool {
	u, ok := a.fsm.User(user)
	if !ok || u.Worker != worker {
		return false
	}
	_, since, _ := a.fsm.ArrivedAt(user)
	switch u.State {
	case placement.StateLive:
		return since <= epoch && epoch <= u.Epoch
	case placement.StateMoving:
		return since <= epoch && epoch < u.Epoch
	}
	return false
}

// fileJournal keeps one file per worker. A file is written to a temporary
// name and renamed, so it is whole or absent; it is not fsynced (nor are
// the pieces it names): it survives the agent's crash, not the machine's.
type fileJournal struct{ dir string }

var _ host.CheckpointJournal = (*fileJournal)(nil)

func (j *fileJournal) path(worker string) string {
	return filepath.Join(j.dir, url.PathEscape(worker)+".json")
}

// Save implements host.CheckpointJournal.
func (j *fileJournal) Save(worker string, record []byte) error {
	if record == nil {
		if err := os.Remove(j.path(worker)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the checkpoint record of %s: %w", worker, err)
		}
		return nil
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("creating the checkpoint journal: %w", err)
	}
	f, err := os.CreateTemp(j.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(record); err != nil {
		f.Close()
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	if err := os.Rename(tmp, j.path(worker)); err != nil {
		return fmt.Errorf("naming the checkpoint record of %s: %w", worker, err)
	}
	return nil
}

// Load implements host.CheckpointJournal.
func (j *fileJournal) Load() (map[string][]byte, error) {
	entries, err := os.ReadDir(j.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint journal: %w", err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.Remove(filepath.Join(j.dir, e.Name())) // a write the crash cut short
			continue
		}
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if e.IsDir() || !ok {
			continue
		}
		worker, err := url.PathUnescape(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(j.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading the checkpoint record of %s: %w", worker, err)
		}
		out[worker] = b
	}
	return out, nil
}
