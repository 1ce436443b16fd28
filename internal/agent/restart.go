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
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
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
	Time   time.Time            `json:"time"`
	Agent  string               `json:"agent"`
	Parked []placement.UserInfo `json:"parked"`
	Lost   []parkFailure        `json:"lost,omitempty"`
	// Elsewhere lists people this agent thought it held whom the leader
	// had already moved to another agent's worker: not parked here, not
	// lost.
	Elsewhere []string `json:"elsewhere,omitempty"`
	// Offline lists the people parked with no quorum (offline.go): the
	// maps still place them live at Epoch; the restart wakes them from
	// their Package.
	Offline []offlinePark        `json:"offline,omitempty"`
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
	var mine []placement.UserInfo
	for _, u := range a.sup.Users() {
		if local[u.Worker] && u.State != placement.StateMoving {
			mine = append(mine, u)
		}
	}
	users := a.stopOrder(mine)
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
	// freeze_timeout bounds a live move's freeze because the person's
	// other tabs wait on the barrier meanwhile; on the way down nobody
	// waits (the front is closed), and a freeze cut short is work thrown
	// away. So the first round gives each freeze a quarter of the time the
	// stop has left (at least freeze_timeout), and whoever still ran out
	// (a hung worker, a huge page) is tried again with everything left
	// but a margin, fewer at a time, slow people last. A rolled-back
	// freeze left the person home and whole, so a retry is safe.
	stopLeft := a.cfg.StopTimeout()
	if d, ok := ctx.Deadline(); ok {
		stopLeft = time.Until(d)
	}
	const margin = 2 * time.Second // for the manifest and the rename
	freeze := max(duration(a.cfg.Move.FreezeTimeout), stopLeft/4)
	// Nobody waits on these barriers (the front is closed): many people on
	// the road at once, sharing their entries.
	left, parallel := users, 256
	// With no leader for a while (every server stopping at once), the
	// rounds give up and whoever is left is parked offline, below.
	lctx, lcancel := a.withLeader(ctx)
	defer lcancel()
	for round := 1; ; round++ {
		var retry, busy []string
		a.parkSet(lctx, left, parallel, freeze, func(u string, res move.Result, err error) {
			switch {
			case err == nil:
				info, _ := a.sup.User(u)
				m.Parked = append(m.Parked, info)
				m.Workers[res.To]++
			case errors.Is(err, fsm.ErrBusy) && lctx.Err() == nil:
				// The maps this agent read are behind the leader's: the
				// person was moved (a drain, a promotion) or is moving.
				busy = append(busy, u)
			case errors.Is(err, move.ErrRolledBack) && lctx.Err() == nil:
				retry = append(retry, u)
			default:
				m.Lost = append(m.Lost, parkFailure{User: u, Error: err.Error()})
			}
		})
		if len(busy) > 0 {
			// Catch up with the leader, then keep whoever still lives here.
			a.syncReplica(ctx)
			for _, u := range busy {
				if info, ok := a.sup.User(u); ok && local[info.Worker] {
					retry = append(retry, u)
				} else {
					m.Elsewhere = append(m.Elsewhere, u)
				}
			}
		}
		if len(retry) == 0 {
			break
		}
		parallel = max(1, parallel/4)
		if d, ok := ctx.Deadline(); ok {
			freeze = time.Until(d) - margin
		} else {
			freeze *= 2
		}
		if freeze < time.Second || round == 4 {
			for _, u := range retry {
				m.Lost = append(m.Lost, parkFailure{User: u, Error: "the stop's deadline came before their freeze finished"})
			}
			break
		}
		keepOrder(retry, users)
		a.log.Warn("some people could not be parked yet; parking them again with a longer bound", "users", len(retry), "round", round+1, "freeze_timeout", freeze)
		left = retry
	}
	if len(m.Lost) > 0 && context.Cause(lctx) == errNoQuorum && !a.hasLeader() {
		names := make([]string, len(m.Lost))
		for i, l := range m.Lost {
			names[i] = l.User
		}
		a.log.Warn("no raft leader: the other servers are gone; parking the people left without the maps", "users", len(names))
		var lost []parkFailure
		m.Offline, lost = a.parkOffline(ctx, names, max(freeze, time.Second))
		m.Lost = lost
	}
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
	a.log.Info("parked everyone", "parked", len(m.Parked), "offline", len(m.Offline), "elsewhere", len(m.Elsewhere), "lost", len(m.Lost), "folder", final)
	if len(m.Lost) > 0 {
		return fmt.Errorf("%d of %d people could not be parked (see %s)", len(m.Lost), len(users), final)
	}
	return nil
}

// parkSet parks users as one set on the road (parallel at a time, each
// freeze bounded by freeze), and tells done of each outcome (one at a
// time).
func (a *Agent) parkSet(ctx context.Context, users []string, parallel int, freeze time.Duration, done func(string, move.Result, error)) {
	reqs := make([]move.Request, len(users))
	for i, u := range users {
		reqs[i] = move.Request{User: u}
	}
	a.mover.MoveSet(ctx, reqs, move.Options{Reason: "park", Park: true, Freeze: freeze, Parallel: parallel}, func(r move.Result, err error) {
		done(r.User, r, err)
	})
}

// syncReplica waits (at most 5 s) until this agent's replica of the maps
// has every write the leader had acknowledged: an empty batch of moves
// changes nothing, and writing it through the leader waits for the local
// replica to apply it.
func (a *Agent) syncReplica(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	entry, err := fsm.Encode(fsm.MoveBatchRequestType, fsm.MoveBatchRequest{})
	if err != nil {
		return
	}
	if _, err := a.cluster.Apply(ctx, entry); err != nil {
		a.log.Warn("could not catch up with the leader's maps", "error", err)
	}
}

// RestartReport says what the agent found of its last stop.
type RestartReport struct {
	// Folder is the newest complete park folder, if any.
	Folder string `json:"folder,omitempty"`
	// Parked is how many people it recorded as parked, and Missing how many
	// of their packages are not in the park store (or fail their checksum).
	Parked  int `json:"parked"`
	Missing int `json:"missing"`
	// Offline is how many it parked with no quorum (the maps still place
	// them live; their first frame wakes them from their package).
	Offline int `json:"offline,omitempty"`
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
	start := time.Now()
	// The crash checkpoints first: the people who were not parked (the
	// agent crashed) wake from them, the others' pieces are dropped.
	n, err := a.startCheckpoints()
	if err != nil {
		return rep, err
	}
	rep.Checkpointed = n
	tookCheckpoints := time.Since(start)
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
		// Only who was parked on what: the maps as they stood are for the
		// operator's eyes.
		var m struct {
			Parked []struct {
				User    string `json:"user"`
				Package string `json:"package"`
			} `json:"parked"`
			Offline []offlinePark `json:"offline"`
		}
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
		for _, o := range m.Offline {
			rep.Offline++
			if !a.park.Has(o.Package) {
				rep.Missing++
				a.log.Warn("a package parked with no quorum is missing; the person wakes from their checkpoint", "user", o.User, "package", o.Package)
				continue
			}
			a.offline.add(o)
		}
	}
	a.log.Info("restart", "park_folder", rep.Folder, "parked", rep.Parked, "missing", rep.Missing,
		"incomplete_folders", len(rep.Incomplete), "aborted_moves", len(rep.AbortedMoves), "checkpointed", rep.Checkpointed,
		"took", time.Since(start).Round(time.Millisecond), "checkpoints_took", tookCheckpoints.Round(time.Millisecond))
	return rep, nil
}

// stopOrder is the order a stop parks people in: whoever matters most
// first, so that a stop short of time loses the least (never by name).
// Live people before parked ones (a parked person's package is on disk
// already: parking them costs nothing but a line of the manifest), people
// who logged in before anonymous visitors, and among those the most
// recently active first (the worker's probes, else the maps' last seen).
func (a *Agent) stopOrder(people []placement.UserInfo) []string {
	active := func(u placement.UserInfo) time.Time {
		at := time.Unix(u.Seen, 0)
		if a.idle != nil {
			if m, ok := a.idle.lastFrame(u.User); ok && m.After(at) {
				at = m
			}
		}
		return at
	}
	type ranked struct {
		user      string
		parked    bool
		anonymous bool
		at        time.Time
	}
	rs := make([]ranked, len(people))
	for i, u := range people {
		rs[i] = ranked{user: u.User, parked: u.State == placement.StateParked,
			anonymous: strings.HasPrefix(u.User, protocol.AnonymousPrefix), at: active(u)}
	}
	sort.SliceStable(rs, func(i, j int) bool {
		x, y := rs[i], rs[j]
		switch {
		case x.parked != y.parked:
			return !x.parked
		case x.anonymous != y.anonymous:
			return !x.anonymous
		}
		return x.at.After(y.at)
	})
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.user
	}
	return out
}

// keepOrder sorts some (a subset of order) in order's order: the people a
// round could not park go again in the stop's order, never by name.
func keepOrder(some, order []string) {
	at := make(map[string]int, len(order))
	for i, u := range order {
		at[u] = i
	}
	sort.SliceStable(some, func(i, j int) bool { return at[some[i]] < at[some[j]] })
}
