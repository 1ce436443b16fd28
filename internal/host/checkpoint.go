package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Crash checkpoints (docs/checkpoints.md): every interval the pool asks each
// worker that can for what changed since the last ask; the answer's pieces
// (one per changed page or connection) are parked, and the Checkpoints
// index keeps the latest digest of each. When a worker dies, the people it
// held wake on its replacement from their pieces, before their next frame.

// Checkpoints keeps the crash checkpoints of this host's workers. The pool
// calls it from one goroutine per worker at a time for Record; the other
// methods may be called concurrently.
type Checkpoints interface {
	// Record parks an answer's pieces, taken on the worker's incarnation,
	// as the latest of their pages and connections, and drops its gone
	// keys (superseded packages are deleted).
	Record(worker string, incarnation int, c *protocol.Checkpointed) error
	// RoundDone is told how long a round of asks took, and how it failed.
	RoundDone(worker string, took time.Duration, err error)
	// Restorable lists the people holding pieces of worker taken by an
	// incarnation before incarnation: those the new one wakes from them.
	Restorable(worker string, incarnation int) []string
	// Restore assembles user's pieces of epoch on worker into an encoded
	// UserPackage. It returns nil when there are none of that epoch (older
	// ones are dropped: the person moved since). generation counts the
	// person's checkpoint wakes on the worker, this one included.
	Restore(worker, user string, epoch uint64) (pkg []byte, generation uint32, err error)
	// Resend returns, once, the pieces of worker to ask for whole at its
	// next round (Checkpoint.full).
	Resend(worker string) []*protocol.CheckpointKey
	// Restored is told how a checkpoint wake went.
	Restored(worker, user string, err error)
	// Forget drops user's pieces on worker older than epoch, or all of them
	// when epoch is 0 (the person moved away, or woke from a package).
	Forget(worker, user string, epoch uint64)
	// ForgetWorker drops every piece of a worker retired for good.
	ForgetWorker(worker string)
}

// CheckpointStore is where pieces are parked (a park.Store).
type CheckpointStore interface {
	Put(b []byte, sync bool) (string, error)
	Get(digest string) ([]byte, error)
	Delete(digest string) error
}

// CheckpointJournal keeps the index across restarts of the agent: one
// record per worker, replaced whole.
type CheckpointJournal interface {
	// Save replaces the worker's record; nil removes it.
	Save(worker string, record []byte) error
	// Load returns every worker's record.
	Load() (map[string][]byte, error)
}

// CheckpointConfig configures a CheckpointIndex.
type CheckpointConfig struct {
	Store CheckpointStore
	// Journal, if set, keeps the index across agent restarts.
	Journal CheckpointJournal
	// Keep, if set, says whether a person's pieces of epoch on worker are
	// still worth keeping (the maps say they live there, at that epoch);
	// the index asks at load, and of a worker's people at its new
	// incarnations and rounds.
	Keep     func(worker, user string, epoch uint64) bool
	Logger   hclog.Logger
	Registry prometheus.Registerer
}

// CheckpointIndex is the Checkpoints of an agent: worker → person → page →
// latest piece, in memory, journaled when a Journal is set.
type CheckpointIndex struct {
	cfg CheckpointConfig
	log hclog.Logger

	mu      sync.Mutex // guards workers, refs and commits
	workers map[string]map[string]*ckPerson
	// refs counts the pieces naming each digest: one package may stand for
	// two keys (a person who moved between two workers of this host with
	// an unchanged page), and is deleted only when the last one goes.
	refs map[string]int
	// commits orders each worker's journal writes (journal).
	commits map[string]*ckCommit
	// loading, when set, is closed once LoadAsync's load ends: every use
	// of the index waits for it.
	loading chan struct{}
	// soon holds, per worker, the digests forgotten people's pieces leave
	// to delete once the journal no longer names them, and the timer of
	// that write (forgetSoon).
	soon map[string]*ckSoon
	// full holds, per worker, the pieces to ask for whole at its next
	// round (an increment the index could not keep).
	full map[string][]*protocol.CheckpointKey

	rounds   *prometheus.CounterVec
	duration prometheus.Histogram
	pieces   prometheus.Counter
	bytes    prometheus.Counter
	stored   prometheus.Gauge
	restores *prometheus.CounterVec
}

var _ Checkpoints = (*CheckpointIndex)(nil)

// ckPerson is a person's pieces on one worker, all of one epoch.
type ckPerson struct {
	Epoch      uint64   `json:"epoch"`
	Generation uint32   `json:"generation,omitempty"`
	Pieces     ckPieces `json:"pieces"`
}

// ckPiece is the latest piece of one page ("conn\x00page") or connection
// ("conn\x00").
type ckPiece struct {
	Conn   string `json:"conn"`
	Page   string `json:"page,omitempty"`
	Digest string `json:"digest"`
	Size   int    `json:"size"`
	// Chain is the chain the piece starts (CheckpointPiece.chain), Incs
	// the increments parked on it since, in order.
	Chain uint64  `json:"chain,omitempty"`
	Incs  []ckInc `json:"incs,omitempty"`
	// Incarnation took it; 0 for pieces loaded from the journal (taken
	// before this agent started).
	Incarnation int `json:"-"`
}

// ckInc is one increment of a page's piece.
type ckInc struct {
	Digest string `json:"digest"`
	Size   int    `json:"size"`
}

// digests calls fn with the digest and size of the piece and of each of
// its increments.
func (pc *ckPiece) digests(fn func(digest string, size int)) {
	fn(pc.Digest, pc.Size)
	for _, in := range pc.Incs {
		fn(in.Digest, in.Size)
	}
}

// size is what the piece and its increments hold.
func (pc *ckPiece) size() int {
	n := 0
	pc.digests(func(_ string, size int) { n += size })
	return n
}

func pieceKey(conn, page string) string { return conn + "\x00" + page }

// ckPieces are a person's pieces, a page or two each: a slice, searched,
// costs a pointer a piece where a map cost a few hundred bytes a person.
// The journal writes them as an object keyed by pieceKey, as it always did.
type ckPieces []*ckPiece

// get returns the piece of (conn, page), or nil.
func (ps ckPieces) get(conn, page string) *ckPiece {
	for _, pc := range ps {
		if pc.Conn == conn && pc.Page == page {
			return pc
		}
	}
	return nil
}

// remove takes the piece of (conn, page) out and returns it, or nil.
func (ps *ckPieces) remove(conn, page string) *ckPiece {
	for i, pc := range *ps {
		if pc.Conn == conn && pc.Page == page {
			*ps = slices.Delete(*ps, i, i+1)
			return pc
		}
	}
	return nil
}

func (ps ckPieces) MarshalJSON() ([]byte, error) {
	m := make(map[string]*ckPiece, len(ps))
	for _, pc := range ps {
		m[pieceKey(pc.Conn, pc.Page)] = pc
	}
	return json.Marshal(m)
}

func (ps *ckPieces) UnmarshalJSON(b []byte) error {
	var m map[string]*ckPiece
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	keys := slices.Sorted(maps.Keys(m))
	out := make(ckPieces, 0, len(m))
	for _, k := range keys {
		if pc := m[k]; pc != nil {
			out = append(out, pc)
		}
	}
	*ps = out
	return nil
}

// checkpointFormat is the UserPackage format the SDK reads (its
// packageFormat): an assembled checkpoint is written in it.
const checkpointFormat = 1

// NewCheckpointIndex returns an empty index; Load fills it from the journal.
func NewCheckpointIndex(cfg CheckpointConfig) *CheckpointIndex {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	x := &CheckpointIndex{cfg: cfg, log: log, workers: map[string]map[string]*ckPerson{}, refs: map[string]int{},
		commits: map[string]*ckCommit{}, soon: map[string]*ckSoon{}, full: map[string][]*protocol.CheckpointKey{}}
	x.rounds = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_checkpoint_rounds_total",
		Help: "Checkpoint rounds of this host's workers, by outcome (ok, failed).",
	}, []string{"outcome"})
	x.duration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stickyd_checkpoint_round_duration_seconds",
		Help:    "Time of a checkpoint round: from the first ask to the last piece parked.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
	})
	x.pieces = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_checkpoint_pieces_total",
		Help: "Pages and connections checkpointed (each a piece parked).",
	})
	x.bytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_checkpoint_bytes_total",
		Help: "Bytes of the checkpoint pieces parked.",
	})
	x.stored = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stickyd_checkpoint_stored_bytes",
		Help: "Bytes of the latest checkpoint pieces held (the superseded ones are deleted).",
	})
	x.restores = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_checkpoint_restores_total",
		Help: "People woken from their checkpoint after their worker died, by outcome (restored, failed).",
	}, []string{"outcome"})
	if cfg.Registry != nil {
		cfg.Registry.MustRegister(x.rounds, x.duration, x.pieces, x.bytes, x.stored, x.restores)
	}
	return x
}

// LoadAsync loads the journal behind the caller, who goes on at once:
// every other use of the index waits until it is loaded. After a stop that
// parked everyone, nobody needs a checkpoint to wake (their packages are
// the truth), so the front need not wait for the journal; done, if set, is
// told Load's outcome. ready, if set, runs first (the agent waits for its
// maps to be replayed: Keep reads them). Call it before the index is used.
func (x *CheckpointIndex) LoadAsync(ready func(), done func(people int, err error)) {
	x.loading = make(chan struct{})
	go func() {
		if ready != nil {
			ready() // the maps Keep reads are whole
		}
		n, err := x.load()
		close(x.loading)
		if done != nil {
			done(n, err)
		}
	}()
}

func (x *CheckpointIndex) waitLoaded() {
	if x.loading != nil {
		<-x.loading
	}
}

// Load reads the journal (see load).
func (x *CheckpointIndex) Load() (people int, err error) { return x.load() }

// load reads the journal: every piece in it counts as taken before any
// incarnation of this agent's workers. People the Keep function disowns
// are dropped, with their packages.
func (x *CheckpointIndex) load() (people int, err error) {
	if x.cfg.Journal == nil {
		return 0, nil
	}
	records, err := x.cfg.Journal.Load()
	if err != nil {
		return 0, fmt.Errorf("loading the checkpoint index: %w", err)
	}
	var drop []string
	x.mu.Lock()
	for worker, b := range records {
		var users map[string]*ckPerson
		if err := json.Unmarshal(b, &users); err != nil {
			x.log.Warn("ignoring a damaged checkpoint record: its people restart clean after a crash", "worker", worker, "error", err)
			continue
		}
		for user, u := range users {
			if x.cfg.Keep != nil && !x.cfg.Keep(worker, user, u.Epoch) {
				for _, pc := range u.Pieces {
					pc.digests(func(d string, _ int) { drop = append(drop, d) })
				}
				delete(users, user)
				continue
			}
			for _, pc := range u.Pieces {
				pc.digests(func(d string, size int) {
					x.refs[d]++
					x.stored.Add(float64(size))
				})
			}
			people++
		}
		x.workers[worker] = users
	}
	drop = x.unreferencedLocked(drop)
	x.mu.Unlock()
	for worker := range records {
		x.journal(worker)
	}
	// The journal no longer names them: their files go behind the start
	// (after a stop that parked everyone, that is everyone's pieces, one
	// file each), unless something named them again meanwhile.
	go func() {
		x.mu.Lock()
		keep := drop[:0]
		for _, d := range drop {
			if x.refs[d] <= 0 {
				keep = append(keep, d)
			}
		}
		x.mu.Unlock()
		x.deleteAll(keep)
	}()
	return people, nil
}

// Record implements Checkpoints.
func (x *CheckpointIndex) Record(worker string, incarnation int, c *protocol.Checkpointed) error {
	x.waitLoaded()
	// Park first, outside the lock: the index names only what is stored.
	digests := make([]string, len(c.Pieces))
	var errs []error
	for i, pc := range c.Pieces {
		d, err := x.cfg.Store.Put(pc.Package, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("parking the checkpoint of page %q of %q: %w", pc.Page, pc.User, err))
			continue
		}
		digests[i] = d
		x.pieces.Inc()
		x.bytes.Add(float64(len(pc.Package)))
	}
	var drop []string
	x.mu.Lock()
	users := x.workers[worker]
	if users == nil {
		users = map[string]*ckPerson{}
		x.workers[worker] = users
	}
	for _, g := range c.Gone {
		if u := users[g.User]; u != nil {
			drop = x.dropPieceLocked(u, g.Conn, g.Page, drop)
			if len(u.Pieces) == 0 {
				delete(users, g.User)
			}
		}
	}
	for i, pc := range c.Pieces {
		d := digests[i]
		if d == "" {
			// Not parked: whatever the worker sends next of this page
			// would build on what the index does not hold.
			x.askFullLocked(worker, pc)
			continue
		}
		u := users[pc.User]
		if u == nil {
			u = &ckPerson{Epoch: pc.Epoch}
			users[pc.User] = u
		}
		if pc.Epoch < u.Epoch {
			// Older than what the index holds (cannot happen in order):
			// not kept.
			drop = append(drop, d)
			continue
		}
		if pc.Epoch > u.Epoch {
			// The person moved and came back, or a move rolled back: the
			// worker sends everything again under the new epoch.
			drop = x.dropAllLocked(u, drop)
			u.Epoch = pc.Epoch
		}
		if pc.Link > 0 {
			// An increment: kept only on the piece it follows.
			old := u.Pieces.get(pc.Conn, pc.Page)
			if old == nil || old.Chain == 0 || old.Chain != pc.Chain || len(old.Incs)+1 != int(pc.Link) {
				drop = append(drop, d)
				x.askFullLocked(worker, pc)
				continue
			}
			old.Incs = append(old.Incs, ckInc{Digest: d, Size: len(pc.Package)})
			old.Incarnation = incarnation
			x.refs[d]++
			x.stored.Add(float64(len(pc.Package)))
			continue
		}
		drop = x.dropPieceLocked(u, pc.Conn, pc.Page, drop)
		u.Pieces = append(u.Pieces, &ckPiece{Conn: pc.Conn, Page: pc.Page, Digest: d, Size: len(pc.Package), Chain: pc.Chain, Incarnation: incarnation})
		x.refs[d]++
		x.stored.Add(float64(len(pc.Package)))
	}
	if len(users) == 0 {
		delete(x.workers, worker)
	}
	drop = x.unreferencedLocked(drop)
	x.mu.Unlock()
	if len(c.Pieces) > 0 || len(c.Gone) > 0 {
		x.journal(worker)
	}
	// Deleted once the journal no longer names them.
	x.deleteAll(drop)
	return errors.Join(errs...)
}

// dropPieceLocked removes a piece from u, adding its digest to drop.
func (x *CheckpointIndex) dropPieceLocked(u *ckPerson, conn, page string, drop []string) []string {
	old := u.Pieces.remove(conn, page)
	if old == nil {
		return drop
	}
	return x.dropDigestsLocked(old, drop)
}

// dropAllLocked removes every piece of u, adding their digests to drop.
func (x *CheckpointIndex) dropAllLocked(u *ckPerson, drop []string) []string {
	for _, pc := range u.Pieces {
		drop = x.dropDigestsLocked(pc, drop)
	}
	u.Pieces = nil
	return drop
}

// dropDigestsLocked unreferences a removed piece's digests, adding them
// to drop.
func (x *CheckpointIndex) dropDigestsLocked(old *ckPiece, drop []string) []string {
	old.digests(func(d string, size int) {
		x.refs[d]--
		x.stored.Sub(float64(size))
		drop = append(drop, d)
	})
	return drop
}

// askFullLocked notes that pc's page is to be asked for whole.
func (x *CheckpointIndex) askFullLocked(worker string, pc *protocol.CheckpointPiece) {
	x.full[worker] = append(x.full[worker], &protocol.CheckpointKey{User: pc.User, Conn: pc.Conn, Page: pc.Page})
}

// Resend implements Checkpoints.
func (x *CheckpointIndex) Resend(worker string) []*protocol.CheckpointKey {
	x.waitLoaded()
	x.mu.Lock()
	defer x.mu.Unlock()
	keys := x.full[worker]
	delete(x.full, worker)
	return keys
}

// unreferencedLocked keeps, of digests, those no piece names any more.
func (x *CheckpointIndex) unreferencedLocked(digests []string) []string {
	out := digests[:0]
	seen := map[string]bool{}
	for _, d := range digests {
		if x.refs[d] <= 0 && !seen[d] {
			delete(x.refs, d)
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}

func (x *CheckpointIndex) deleteAll(digests []string) {
	for _, d := range digests {
		if err := x.cfg.Store.Delete(d); err != nil {
			x.log.Warn("deleting a superseded checkpoint", "package", d, "error", err)
		}
	}
}

// journal returns once the journal holds worker's record as it was when
// journal was called, or newer. Callers at the same time share one write
// (a group commit): a burst of wakes after a crash costs a few writes, not
// one each.
func (x *CheckpointIndex) journal(worker string) {
	if x.cfg.Journal == nil {
		return
	}
	x.mu.Lock()
	c := x.commits[worker]
	if c == nil {
		c = &ckCommit{}
		c.cond = sync.NewCond(&c.mu)
		x.commits[worker] = c
	}
	x.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked++
	mine := c.asked
	for c.done < mine {
		if c.writing {
			c.cond.Wait()
			continue
		}
		// Write everything asked so far: the record is read after each
		// of those changes was made.
		c.writing = true
		upto := c.asked
		c.mu.Unlock()
		x.mu.Lock()
		var record []byte
		var err error
		if users := x.workers[worker]; len(users) > 0 {
			record, err = json.Marshal(users)
		}
		x.mu.Unlock()
		if err == nil {
			err = x.cfg.Journal.Save(worker, record)
		}
		if err != nil {
			x.log.Warn("journaling the checkpoint index: after an agent crash its people may restart clean", "worker", worker, "error", err)
		}
		c.mu.Lock()
		c.writing = false
		c.done = max(c.done, upto)
		c.cond.Broadcast()
	}
}

// ckCommit orders the journal writes of one worker.
type ckCommit struct {
	mu      sync.Mutex // guards all below
	cond    *sync.Cond
	asked   uint64 // journal calls so far
	done    uint64 // calls whose changes are written
	writing bool
}

// RoundDone implements Checkpoints.
func (x *CheckpointIndex) RoundDone(worker string, took time.Duration, err error) {
	if err != nil {
		x.rounds.WithLabelValues("failed").Inc()
		return
	}
	x.rounds.WithLabelValues("ok").Inc()
	x.duration.Observe(took.Seconds())
}

// Restorable implements Checkpoints.
func (x *CheckpointIndex) Restorable(worker string, incarnation int) []string {
	x.waitLoaded()
	x.prune(worker)
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for user, u := range x.workers[worker] {
		for _, pc := range u.Pieces {
			if pc.Incarnation < incarnation {
				out = append(out, user)
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

// prune drops the people of worker that Keep disowns.
func (x *CheckpointIndex) prune(worker string) {
	if x.cfg.Keep == nil {
		return
	}
	x.mu.Lock()
	var gone []string
	for user, u := range x.workers[worker] {
		if !x.cfg.Keep(worker, user, u.Epoch) {
			gone = append(gone, user)
		}
	}
	x.mu.Unlock()
	for _, user := range gone {
		x.Forget(worker, user, 0)
	}
}

// Restore implements Checkpoints.
func (x *CheckpointIndex) Restore(worker, user string, epoch uint64) ([]byte, uint32, error) {
	x.waitLoaded()
	x.mu.Lock()
	u := x.workers[worker][user]
	if u == nil || u.Epoch > epoch {
		x.mu.Unlock()
		return nil, 0, nil
	}
	if u.Epoch < epoch {
		x.mu.Unlock()
		x.Forget(worker, user, epoch)
		return nil, 0, nil
	}
	u.Generation++
	gen := u.Generation
	pieces := make([]ckPiece, 0, len(u.Pieces))
	for _, pc := range u.Pieces {
		pieces = append(pieces, *pc)
	}
	x.mu.Unlock()
	// The generation is journaled before the wake: a second crash, even of
	// the agent, numbers the pages above this wake's.
	x.journal(worker)
	sort.Slice(pieces, func(i, j int) bool {
		if pieces[i].Conn != pieces[j].Conn {
			return pieces[i].Conn < pieces[j].Conn
		}
		return pieces[i].Page < pieces[j].Page
	})
	pkg := &protocol.UserPackage{Format: checkpointFormat, User: user, Epoch: epoch}
	conns := map[string]*protocol.ConnPackage{}
	var errs []error
	for _, pc := range pieces {
		b, err := x.cfg.Store.Get(pc.Digest)
		if err == nil {
			var cp protocol.ConnPackage
			if err = proto.Unmarshal(b, &cp); err == nil {
				if ierr := x.applyIncs(&cp, pc.Incs); ierr != nil {
					// The page wakes as its last increment that reads.
					errs = append(errs, fmt.Errorf("the checkpoint of page %q of %q: %w", pc.Page, user, ierr))
				}
				c := conns[cp.Name]
				if c == nil {
					c = &protocol.ConnPackage{Name: cp.Name, User: cp.User}
					conns[cp.Name] = c
					pkg.Conns = append(pkg.Conns, c)
				}
				if pc.Page == "" {
					c.User, c.Values = cp.User, cp.Values
				}
				c.Pages = append(c.Pages, cp.Pages...)
				continue
			}
		}
		// That page (or connection) is lost; the others wake.
		errs = append(errs, fmt.Errorf("reading the checkpoint of page %q of %q: %w", pc.Page, user, err))
	}
	b, err := proto.Marshal(pkg)
	if err != nil {
		return nil, 0, fmt.Errorf("assembling the checkpoint of %q: %w", user, err)
	}
	return b, gen, errors.Join(errs...)
}

// applyIncs appends the writes of a page's increments, in order, to the
// journal of its page in cp (replayed on its tree at the wake), and takes
// the page's other fields from the last. It stops at the first increment
// that cannot be read: the page is then as it was at the one before.
func (x *CheckpointIndex) applyIncs(cp *protocol.ConnPackage, incs []ckInc) error {
	if len(incs) == 0 {
		return nil
	}
	if len(cp.Pages) != 1 {
		return fmt.Errorf("a piece with increments holds %d pages", len(cp.Pages))
	}
	page := cp.Pages[0]
	for i, in := range incs {
		b, err := x.cfg.Store.Get(in.Digest)
		var ic protocol.ConnPackage
		if err == nil {
			err = proto.Unmarshal(b, &ic)
		}
		if err == nil && (len(ic.Pages) != 1 || ic.Pages[0].Id != page.Id || len(ic.Pages[0].Tree) > 0) {
			err = errors.New("not an increment of the page")
		}
		if err != nil {
			return fmt.Errorf("reading increment %d of %d: %w", i+1, len(incs), err)
		}
		ip := ic.Pages[0]
		page.Journal = append(page.Journal, ip.Journal...)
		page.Kind, page.Schema, page.Seq, page.Floor = ip.Kind, ip.Schema, ip.Seq, ip.Floor
		// An increment carries the page's whole message memory (each
		// piece does): the latest is what a resend after the crash finds.
		page.Tables, page.Marks, page.Answered = ip.Tables, ip.Marks, ip.Answered
	}
	return nil
}

// Restored implements Checkpoints.
func (x *CheckpointIndex) Restored(worker, user string, err error) {
	x.waitLoaded()
	if err != nil {
		x.restores.WithLabelValues("failed").Inc()
		return
	}
	x.restores.WithLabelValues("restored").Inc()
}

// Forget implements Checkpoints.
func (x *CheckpointIndex) Forget(worker, user string, epoch uint64) {
	x.waitLoaded()
	x.mu.Lock()
	u := x.workers[worker][user]
	if u == nil || (epoch != 0 && u.Epoch >= epoch) {
		x.mu.Unlock()
		return
	}
	var drop []string
	drop = x.dropAllLocked(u, drop)
	delete(x.workers[worker], user)
	if len(x.workers[worker]) == 0 {
		delete(x.workers, worker)
	}
	drop = x.unreferencedLocked(drop)
	x.forgetSoonLocked(worker, drop)
	x.mu.Unlock()
}

// forgetDelay is how long the journal write of a forgotten person waits,
// shared by every person forgotten on the worker meanwhile: a set of
// people moving away costs one write of the worker's record, not one
// each. Should the agent crash before it, the journal still names pieces
// of people who live elsewhere by then, and the restart drops them (it
// keeps only those the maps place on the worker at their epoch).
const forgetDelay = time.Second

// ckSoon is a worker's pending journal write for forgotten people.
type ckSoon struct {
	drop  []string
	timer *time.Timer
}

func (x *CheckpointIndex) forgetSoonLocked(worker string, drop []string) {
	s := x.soon[worker]
	if s == nil {
		s = &ckSoon{}
		x.soon[worker] = s
		s.timer = time.AfterFunc(forgetDelay, func() { x.forgotten(worker) })
	}
	s.drop = append(s.drop, drop...)
}

// forgotten writes worker's record without the people forgotten since the
// last, then deletes their pieces that nothing names again meanwhile.
func (x *CheckpointIndex) forgotten(worker string) {
	x.mu.Lock()
	s := x.soon[worker]
	delete(x.soon, worker)
	x.mu.Unlock()
	if s == nil {
		return
	}
	x.journal(worker)
	x.mu.Lock()
	drop := s.drop[:0]
	for _, d := range s.drop {
		if x.refs[d] <= 0 {
			drop = append(drop, d)
		}
	}
	x.mu.Unlock()
	x.deleteAll(drop)
}

// Flush writes now the journal records that wait (forgetDelay).
func (x *CheckpointIndex) Flush() {
	x.waitLoaded()
	x.mu.Lock()
	var workers []string
	for w, s := range x.soon {
		if s.timer.Stop() {
			workers = append(workers, w)
		}
	}
	x.mu.Unlock()
	for _, w := range workers {
		x.forgotten(w)
	}
}

// ForgetWorker implements Checkpoints.
func (x *CheckpointIndex) ForgetWorker(worker string) {
	x.waitLoaded()
	x.mu.Lock()
	var drop []string
	for _, u := range x.workers[worker] {
		drop = x.dropAllLocked(u, drop)
	}
	had := x.workers[worker] != nil
	delete(x.workers, worker)
	delete(x.full, worker)
	drop = x.unreferencedLocked(drop)
	x.mu.Unlock()
	if had {
		x.journal(worker)
	}
	x.deleteAll(drop)
}

// CheckpointedPage is one page's latest piece, as Pages reports it.
type CheckpointedPage struct {
	Conn   string `json:"conn"`
	Page   string `json:"page,omitempty"`
	Epoch  uint64 `json:"epoch"`
	Digest string `json:"digest"`
	// Size counts the piece and its increments; Increments how many of
	// those follow the piece.
	Size       int `json:"size"`
	Increments int `json:"increments,omitempty"`
}

// Pages lists user's latest pieces on worker (a connection's own with an
// empty Page), sorted: what the person would wake with after a crash.
func (x *CheckpointIndex) Pages(worker, user string) []CheckpointedPage {
	x.waitLoaded()
	x.mu.Lock()
	defer x.mu.Unlock()
	u := x.workers[worker][user]
	if u == nil {
		return nil
	}
	out := make([]CheckpointedPage, 0, len(u.Pieces))
	for _, pc := range u.Pieces {
		out = append(out, CheckpointedPage{Conn: pc.Conn, Page: pc.Page, Epoch: u.Epoch, Digest: pc.Digest, Size: pc.size(), Increments: len(pc.Incs)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Conn != out[j].Conn {
			return out[i].Conn < out[j].Conn
		}
		return out[i].Page < out[j].Page
	})
	return out
}

// Bounds of a checkpoint round.
const (
	// checkpointMaxBytes bounds one answer; a round asks again while the
	// worker says more, at most checkpointAsks times.
	checkpointMaxBytes = 64 << 20
	checkpointAsks     = 64
	// checkpointAskTimeout bounds one ask (the worker bounds its own
	// answer to seconds; this only catches a worker gone mute).
	checkpointAskTimeout = time.Minute
)

// checkpointLoop runs the worker's checkpoint rounds every interval until
// stop closes or the worker's channel ends.
func (s *slot) checkpointLoop(ctx context.Context, peer *channel.Peer, incarnation int, every time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-stop:
			return
		case <-peer.Done():
			return
		case <-ctx.Done():
			return
		}
		if s.pool.checkpointsOff.Load() {
			continue
		}
		if err := s.checkpointRound(ctx, peer, incarnation); errors.Is(err, ErrNoCheckpoints) {
			s.log.Warn("the worker answered a checkpoint request with a refusal; not asking it again", "error", err)
			return
		} else if err != nil && peer.Err() == nil && ctx.Err() == nil {
			// (A round the stop cut short is no news: the stop parks.)
			s.log.Warn("checkpoint round", "error", err)
		}
	}
}

// checkpointRound asks the worker for what changed until it has said all,
// parking each answer's pieces as it comes.
func (s *slot) checkpointRound(ctx context.Context, peer *channel.Peer, incarnation int) error {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	ck := s.pool.Checkpoints
	began := time.Now()
	var pieces, bytes int64
	var recordErr error
	for ask := 1; ; ask++ {
		actx, cancel := context.WithTimeout(ctx, checkpointAskTimeout)
		env, err := peer.Call(actx, &protocol.Envelope{Body: &protocol.Envelope_Checkpoint{Checkpoint: &protocol.Checkpoint{MaxBytes: checkpointMaxBytes, Full: ck.Resend(s.id)}}})
		cancel()
		var re *channel.RemoteError
		switch {
		case errors.As(err, &re) && re.Code == protocol.Error_BAD_REQUEST:
			return fmt.Errorf("%w: %s", ErrNoCheckpoints, re.Message)
		case err != nil:
			err = fmt.Errorf("asking worker %s for a checkpoint: %w", s.id, err)
			ck.RoundDone(s.id, time.Since(began), err)
			return err
		case env.GetCheckpointed() == nil:
			return fmt.Errorf("%w: it answered with %T", ErrNoCheckpoints, env.Body)
		}
		c := env.GetCheckpointed()
		if err := ck.Record(s.id, incarnation, c); err != nil {
			recordErr = errors.Join(recordErr, err)
		}
		for _, pc := range c.Pieces {
			pieces++
			bytes += int64(len(pc.Package))
		}
		if !c.More || ask >= checkpointAsks || s.pool.checkpointsOff.Load() {
			// A stop paused checkpoints (its packages are the truth): the
			// round in progress ends with the chunk it has.
			break
		}
	}
	ck.RoundDone(s.id, time.Since(began), recordErr)
	s.mu.Lock()
	s.info.CheckpointRounds++
	s.info.CheckpointPieces += pieces
	s.info.CheckpointBytes += bytes
	if recordErr == nil {
		s.info.LastCheckpoint = began
	}
	s.mu.Unlock()
	return recordErr
}

// Checkpoint runs a checkpoint round of a worker now, waiting (bounded by
// ctx) while it is being replaced, and returns once its pieces are parked.
// A worker that does not checkpoint is ErrNoCheckpoints.
func (p *Pool) Checkpoint(ctx context.Context, workerID string) error {
	s, err := p.slot(workerID)
	if err != nil {
		return err
	}
	peer, err := s.readyPeer(ctx, p.stopCh())
	if err != nil {
		return err
	}
	s.mu.Lock()
	incarnation, ok := s.info.Incarnation, s.checkpoints && s.peer == peer
	s.mu.Unlock()
	if p.Checkpoints == nil || !ok {
		return fmt.Errorf("checkpointing %s: %w", workerID, ErrNoCheckpoints)
	}
	return s.checkpointRound(ctx, peer, incarnation)
}

// MemCheckpointJournal keeps the index's records in memory (tests).
type MemCheckpointJournal struct {
	mu      sync.Mutex // guards records
	records map[string][]byte
}

var _ CheckpointJournal = (*MemCheckpointJournal)(nil)

// Save implements CheckpointJournal.
func (j *MemCheckpointJournal) Save(worker string, record []byte) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.records == nil {
		j.records = map[string][]byte{}
	}
	if record == nil {
		delete(j.records, worker)
	} else {
		j.records[worker] = append([]byte(nil), record...)
	}
	return nil
}

// Load implements CheckpointJournal.
func (j *MemCheckpointJournal) Load() (map[string][]byte, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string][]byte, len(j.records))
	for w, b := range j.records {
		out[w] = append([]byte(nil), b...)
	}
	return out, nil
}
