package lifecycle

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

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A restart loses no session. Going down, the agent parks every person its
// workers hold — the move road with their own worker as destination,
// packages fsynced — and writes a folder recording what it parked and the
// maps as they stood. The folder is written as NAME.tmp, fsynced and renamed:
// its final name proves it is complete; an incomplete one is reported and
// never used. Coming up, the maps return from raft, nobody is woken early,
// and a person's first request wakes them from their package.

// Dir is where the park folders of an agent with dataDir live (its crash
// checkpoint journal lives below it too).
func Dir(dataDir string) string { return filepath.Join(dataDir, "restart") }

// Config is what a Parker is built from. The components are the agent's;
// none may be nil but Idle.
type Config struct {
	// Name is this agent's name, as the maps register it.
	Name string
	// DataDir is the agent's data directory; "" (dev) parks nobody on
	// the way down: nothing would survive the process anyway.
	DataDir string
	// StopTimeout bounds a stop whose context has no deadline.
	StopTimeout time.Duration
	// FreezeTimeout is move.freeze_timeout: the least a freeze is given
	// on the way down.
	FreezeTimeout time.Duration
	// RehomeOnStop moves people to the groups' workers on other hosts
	// before parking whoever is left (rehome.go).
	RehomeOnStop bool

	Maps       *fsm.FSM
	Supervisor *supervisor.Supervisor
	Pool       *host.Pool
	Park       park.Store
	Mover      *move.Mover
	Log        Log
	Leader     Leader
	Router     Router
	// Idle is the idle parker, nil without one: the people's last frames
	// it saw order the stop.
	Idle *IdleParker
	// Drain marks this agent as on its way down and registers it again
	// in the maps, so that no newcomer and no move is sent to its workers.
	Drain func(ctx context.Context) error
	// Checkpoints loads the crash checkpoint journal at start and returns
	// how many people it holds pieces of (nil: none).
	Checkpoints func() (int, error)
	Logger      hclog.Logger
}

// Parker parks every person of this agent's workers on the way down
// (ParkAll), finds what the last stop parked on the way up (Recover) and
// records each wake (Woken). It keeps the people the last stop parked with
// no quorum (Offline) until each wakes.
type Parker struct {
	cfg Config
	log hclog.Logger
	// offline are the people the last stop parked with no quorum.
	offline OfflineParks
}

// New builds a Parker; it does nothing until one of its methods runs.
func New(cfg Config) *Parker {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	p := &Parker{cfg: cfg, log: log}
	p.offline.discard = func(digest string) {
		if cfg.Park != nil {
			_ = cfg.Park.Delete(digest)
		}
	}
	return p
}

// Offline is the people the last stop parked with no quorum, for the pool
// (host.OfflineParks).
func (p *Parker) Offline() *OfflineParks { return &p.offline }

// dir is where park folders live.
func (p *Parker) dir() string { return Dir(p.cfg.DataDir) }

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

// ParkAll parks every person whose home is a worker of this agent. The
// agent calls it once, from its workers' stop, and only if it started:
// before, the workers never took anyone.
func (p *Parker) ParkAll(ctx context.Context) error {
	if p.cfg.DataDir == "" {
		// Dev: nothing would survive the process anyway.
		return nil
	}
	local := map[string]bool{}
	for _, w := range p.cfg.Pool.Workers() {
		local[w.ID] = true
	}
	var mine []placement.UserInfo
	for _, u := range p.cfg.Supervisor.Users() {
		if local[u.Worker] && u.State != placement.StateMoving {
			mine = append(mine, u)
		}
	}
	users := p.stopOrder(mine)
	if p.cfg.RehomeOnStop {
		p.startDraining(ctx)
		users = p.rehome(ctx, users)
	}
	// Parking keeps workers busy on purpose: no killing for silence now,
	// and no checkpoints (the packages are the truth).
	p.cfg.Pool.PauseProbes()
	p.cfg.Pool.PauseCheckpoints()
	name := fmt.Sprintf("park-%s", time.Now().UTC().Format("20060102T150405.000000000Z"))
	tmp := filepath.Join(p.dir(), name+".tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("creating park folder: %w", err)
	}
	p.log.Info("parking everyone before stopping", "users", len(users), "folder", tmp)
	m := parkManifest{Time: time.Now().UTC(), Agent: p.cfg.Name, Workers: map[string]int{}}
	// freeze_timeout bounds a live move's freeze because the person's
	// other tabs wait on the barrier meanwhile; on the way down nobody
	// waits (the front is closed), and a freeze cut short is work thrown
	// away. So the first round gives each freeze a quarter of the time the
	// stop has left (at least freeze_timeout), and whoever still ran out
	// (a hung worker, a huge page) is tried again with everything left
	// but a margin, fewer at a time, slow people last. A rolled-back
	// freeze left the person home and whole, so a retry is safe.
	stopLeft := p.cfg.StopTimeout
	if d, ok := ctx.Deadline(); ok {
		stopLeft = time.Until(d)
	}
	const margin = 2 * time.Second // for the manifest and the rename
	freeze := max(p.cfg.FreezeTimeout, stopLeft/4)
	// Nobody waits on these barriers (the front is closed): many people on
	// the road at once, sharing their entries.
	left, parallel := users, 256
	// With no leader for a while (every server stopping at once), the
	// rounds give up and whoever is left is parked offline, below.
	lctx, lcancel := p.withLeader(ctx)
	defer lcancel()
	for round := 1; ; round++ {
		var retry, busy []string
		p.parkSet(lctx, left, parallel, freeze, func(u string, res move.Result, err error) {
			switch {
			case err == nil:
				info, _ := p.cfg.Supervisor.User(u)
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
			p.syncReplica(ctx)
			for _, u := range busy {
				if info, ok := p.cfg.Supervisor.User(u); ok && local[info.Worker] {
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
		p.log.Warn("some people could not be parked yet; parking them again with a longer bound", "users", len(retry), "round", round+1, "freeze_timeout", freeze)
		left = retry
	}
	if len(m.Lost) > 0 && context.Cause(lctx) == errNoQuorum && !p.hasLeader() {
		names := make([]string, len(m.Lost))
		for i, l := range m.Lost {
			names[i] = l.User
		}
		p.log.Warn("no raft leader: the other servers are gone; parking the people left without the maps", "users", len(names))
		var lost []parkFailure
		m.Offline, lost = p.parkOffline(ctx, names, max(freeze, time.Second))
		m.Lost = lost
	}
	if err := p.cfg.Park.Sync(); err != nil {
		return err
	}
	m.Maps = p.cfg.Supervisor.Users()
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
	final := filepath.Join(p.dir(), name)
	if err := os.Rename(tmp, final); err != nil {
		return fmt.Errorf("naming the park folder: %w", err)
	}
	if err := park.SyncDir(p.dir()); err != nil {
		return err
	}
	p.log.Info("parked everyone", "parked", len(m.Parked), "offline", len(m.Offline), "elsewhere", len(m.Elsewhere), "lost", len(m.Lost), "folder", final)
	if len(m.Lost) > 0 {
		return fmt.Errorf("%d of %d people could not be parked (see %s)", len(m.Lost), len(users), final)
	}
	return nil
}

// parkSet parks users as one set on the road (parallel at a time, each
// freeze bounded by freeze), and tells done of each outcome (one at a
// time).
func (p *Parker) parkSet(ctx context.Context, users []string, parallel int, freeze time.Duration, done func(string, move.Result, error)) {
	reqs := make([]move.Request, len(users))
	for i, u := range users {
		reqs[i] = move.Request{User: u}
	}
	p.cfg.Mover.MoveSet(ctx, reqs, move.Options{Reason: "park", Park: true, Freeze: freeze, Parallel: parallel}, func(r move.Result, err error) {
		done(r.User, r, err)
	})
}

// syncReplica waits (at most 5 s) until this agent's replica of the maps
// has every write the leader had acknowledged: an empty batch of moves
// changes nothing, and writing it through the leader waits for the local
// replica to apply it.
func (p *Parker) syncReplica(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	entry, err := fsm.Encode(fsm.MoveBatchRequestType, fsm.MoveBatchRequest{})
	if err != nil {
		return
	}
	if _, err := p.cfg.Log.Apply(ctx, entry); err != nil {
		p.log.Warn("could not catch up with the leader's maps", "error", err)
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

// Recover runs at start, once raft has restored the maps and before the
// workers start: it loads the crash checkpoints, reads the newest complete
// park folder and keeps the people it parked with no quorum (Offline).
// AbortedMoves is the caller's to fill.
func (p *Parker) Recover(ctx context.Context) (RestartReport, error) {
	var rep RestartReport
	start := time.Now()
	// The crash checkpoints first: the people who were not parked (the
	// agent crashed) wake from them, the others' pieces are dropped.
	if p.cfg.Checkpoints != nil {
		n, err := p.cfg.Checkpoints()
		if err != nil {
			return rep, err
		}
		rep.Checkpointed = n
	}
	tookCheckpoints := time.Since(start)
	if p.cfg.DataDir == "" {
		return rep, nil
	}
	entries, err := os.ReadDir(p.dir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return rep, fmt.Errorf("reading park folders: %w", err)
	}
	var complete []string
	for _, e := range entries {
		switch {
		case !e.IsDir():
		case strings.HasSuffix(e.Name(), ".tmp"):
			rep.Incomplete = append(rep.Incomplete, e.Name())
			p.log.Warn("ignoring an incomplete park folder: the agent stopped while parking", "folder", e.Name())
		case strings.HasPrefix(e.Name(), "park-"):
			complete = append(complete, e.Name())
		}
	}
	sort.Strings(complete)
	if len(complete) > 0 {
		rep.Folder = complete[len(complete)-1]
		b, err := os.ReadFile(filepath.Join(p.dir(), rep.Folder, "manifest.json"))
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
			p.log.Warn("reading the last park folder", "folder", rep.Folder, "error", err)
		}
		for _, u := range m.Parked {
			rep.Parked++
			if info, ok := p.placement(u.User); !ok || info.Package != u.Package {
				// Woken since that stop (the package went with the wake),
				// or forgotten: the folder is older than the maps.
				continue
			}
			// Presence only: the wake checks each package's digest when it
			// reads it, so the front need not wait for every checksum.
			if !p.cfg.Park.Has(u.Package) {
				rep.Missing++
				p.log.Warn("a parked package is missing; the person wakes from their crash checkpoint if they have one, else their pages restart clean",
					"user", u.User, "package", u.Package)
			}
		}
		for _, o := range m.Offline {
			rep.Offline++
			if !p.cfg.Park.Has(o.Package) {
				rep.Missing++
				p.log.Warn("a package parked with no quorum is missing; the person wakes from their checkpoint", "user", o.User, "package", o.Package)
				continue
			}
			p.offline.add(o)
		}
	}
	p.log.Info("restart", "park_folder", rep.Folder, "parked", rep.Parked, "missing", rep.Missing,
		"incomplete_folders", len(rep.Incomplete), "aborted_moves", len(rep.AbortedMoves), "checkpointed", rep.Checkpointed,
		"took", time.Since(start).Round(time.Millisecond), "checkpoints_took", tookCheckpoints.Round(time.Millisecond))
	return rep, nil
}

// placement is user's placement in the maps (none without a supervisor:
// a test's parker).
func (p *Parker) placement(user string) (placement.UserInfo, bool) {
	if p.cfg.Supervisor == nil {
		return placement.UserInfo{}, false
	}
	return p.cfg.Supervisor.User(user)
}

// Woken records a wake in the maps and drops the package it came from
// (host.Pool's Woken): base, if any, is the precopy the package was made
// against.
func (p *Parker) Woken(user, digest, base string) {
	p.offline.drop(user) // woken from a newer package than the one parked offline
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.cfg.Supervisor.Woken(ctx, user, digest); err != nil {
		p.log.Warn("recording a wake", "user", user, "error", err)
		return
	}
	if u, ok := p.cfg.Supervisor.User(user); !ok || u.Package != digest {
		_ = p.cfg.Park.Delete(digest)
	}
	if base != "" {
		_ = p.cfg.Park.Delete(base) // a precopy: nothing else names it
	}
}

// stopOrder is the order a stop parks people in: whoever matters most
// first, so that a stop short of time loses the least (never by name).
// Live people before parked ones (a parked person's package is on disk
// already: parking them costs nothing but a line of the manifest), people
// who logged in before anonymous visitors, and among those the most
// recently active first (the worker's probes, else the maps' last seen).
func (p *Parker) stopOrder(people []placement.UserInfo) []string {
	active := func(u placement.UserInfo) time.Time {
		at := time.Unix(u.Seen, 0)
		if p.cfg.Idle != nil {
			if m, ok := p.cfg.Idle.lastFrame(u.User); ok && m.After(at) {
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
