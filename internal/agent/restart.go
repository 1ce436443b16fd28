package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
)

// A restart loses no session. Going down, the agent parks every person its
// workers hold — the move road with their own worker as destination,
// packages fsynced — and writes a folder recording what it parked and the
// maps as they stood. The folder is written as NAME.tmp, fsynced and renamed:
// its final name proves it is complete; an incomplete one is reported and
// never used. Coming up, the maps return from raft, nobody is woken early,
// and a person's first request wakes them from their package.

// restartDir is where park folders live.
func (a *Agent) restartDir() string { return filepath.Join(a.cfg.DataDir, "restart") }

// parkManifest is a park folder's record.
type parkManifest struct {
	Time    time.Time            `json:"time"`
	Agent   string               `json:"agent"`
	Parked  []placement.UserInfo `json:"parked"`
	Lost    []parkFailure        `json:"lost,omitempty"`
	Maps    []placement.UserInfo `json:"maps"`
	Workers map[string]int       `json:"workers"`
}

type parkFailure struct {
	User  string `json:"user"`
	Error string `json:"error"`
}

// ParkProgress, if set, is told of each person parked while going down.
type ParkProgress func(done, total int)

// parkAll parks every person whose home is a worker of this agent.
func (a *Agent) parkAll(ctx context.Context) error {
	if a.cfg.DataDir == "" || !a.started {
		// Dev: nothing would survive the process anyway. Not started: the
		// workers never took anyone.
		return nil
	}
	local := map[string]bool{}
	for _, w := range a.pool.Workers() {
		local[w.ID] = true
	}
	var users []string
	for _, u := range a.sup.Users() {
		if local[u.Worker] && u.State != placement.StateMoving {
			users = append(users, u.User)
		}
	}
	sort.Strings(users)
	if a.cfg.RehomesOnStop() {
		a.startDraining(ctx)
		users = a.rehome(ctx, users)
	}
	// Parking keeps workers busy on purpose: no killing for silence now,
	// and no checkpoints (the packages are the truth).
	a.pool.PauseProbes()
	a.pool.PauseCheckpoints()
	name := fmt.Sprintf("park-%s", time.Now().UTC().Format("20060102T150405.000000000Z"))
	tmp := filepath.Join(a.restartDir(), name+".tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("creating park folder: %w", err)
	}
	a.log.Info("parking everyone before stopping", "users", len(users), "folder", tmp)
	m := parkManifest{Time: time.Now().UTC(), Agent: a.cfg.Name, Workers: map[string]int{}}
	var (
		mu sync.Mutex
		wg sync.WaitGroup
		// Raft batches concurrent writes into one fsync, and packages are
		// flushed once at the end: many moves at a time is cheap.
		sem = make(chan struct{}, 64)
	)
	for _, u := range users {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := a.mover.Park(ctx, u)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				m.Lost = append(m.Lost, parkFailure{User: u, Error: err.Error()})
				return
			}
			info, _ := a.sup.User(u)
			m.Parked = append(m.Parked, info)
			m.Workers[res.To]++
		}()
	}
	wg.Wait()
	if err := a.park.Sync(); err != nil {
		return err
	}
	m.Maps = a.sup.Users()
	sort.Slice(m.Parked, func(i, j int) bool { return m.Parked[i].User < m.Parked[j].User })
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := park.WriteSynced(filepath.Join(tmp, "manifest.json"), b); err != nil {
		return fmt.Errorf("writing park manifest: %w", err)
	}
	if err := park.SyncDir(tmp); err != nil {
		return err
	}
	final := filepath.Join(a.restartDir(), name)
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("naming the park folder: %w", err)
	}
	if err := park.SyncDir(a.restartDir()); err != nil {
		return err
	}
	a.log.Info("parked everyone", "parked", len(m.Parked), "lost", len(m.Lost), "folder", final)
	if len(m.Lost) > 0 {
		return fmt.Errorf("%d of %d people could not be parked (see %s)", len(m.Lost), len(users), final)
	}
	return nil
}

// RestartReport says what the agent found of its last stop.
type RestartReport struct {
	// Folder is the newest complete park folder, if any.
	Folder string `json:"folder,omitempty"`
	// Parked is how many people it recorded as parked, and Missing how many
	// of their packages are not in the park store (or fail their checksum).
	Parked  int `json:"parked"`
	Missing int `json:"missing"`
	// Incomplete lists park folders that never got their final name: the
	// agent died while parking. They are ignored.
	Incomplete []string `json:"incomplete,omitempty"`
	// AbortedMoves lists people who were between homes when the agent
	// stopped; their move was rolled back.
	AbortedMoves []string `json:"aborted_moves,omitempty"`
	// Checkpointed is how many people the crash checkpoint journal holds
	// pieces of (those the maps still place on this agent's workers): who
	// was not parked wakes from them (docs/checkpoints.md).
	Checkpointed int `json:"checkpointed,omitempty"`
}

// recover runs at start, once raft has restored the maps.
func (a *Agent) recover(ctx context.Context) (RestartReport, error) {
	var rep RestartReport
	// The crash checkpoints first: the people who were not parked (the
	// agent crashed) wake from them, the others' pieces are dropped.
	n, err := a.startCheckpoints()
	if err != nil {
		return rep, err
	}
	rep.Checkpointed = n
	if a.cfg.DataDir == "" {
		return rep, nil
	}
	entries, err := os.ReadDir(a.restartDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("reading park folders: %w", err)
	}
	var complete []string
	for _, e := range entries {
		switch {
		case !e.IsDir():
		case strings.HasSuffix(e.Name(), ".tmp"):
			rep.Incomplete = append(rep.Incomplete, e.Name())
			a.log.Warn("ignoring an incomplete park folder: the agent stopped while parking", "folder", e.Name())
		case strings.HasPrefix(e.Name(), "park-"):
			complete = append(complete, e.Name())
		}
	}
	sort.Strings(complete)
	if len(complete) > 0 {
		rep.Folder = complete[len(complete)-1]
		b, err := os.ReadFile(filepath.Join(a.restartDir(), rep.Folder, "manifest.json"))
		var m parkManifest
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			a.log.Warn("reading the last park folder", "folder", rep.Folder, "error", err)
		}
		for _, u := range m.Parked {
			rep.Parked++
			// Presence only: the wake checks each package's digest when it
			// reads it, so the front need not wait for every checksum.
			if !a.park.Has(u.Package) {
				rep.Missing++
				a.log.Warn("a parked package is missing; the person's pages will restart clean", "user", u.User, "package", u.Package)
			}
		}
	}
	a.log.Info("restart", "park_folder", rep.Folder, "parked", rep.Parked, "missing", rep.Missing,
		"incomplete_folders", len(rep.Incomplete), "aborted_moves", len(rep.AbortedMoves), "checkpointed", rep.Checkpointed)
	return rep, nil
}
