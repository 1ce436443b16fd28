package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Precopy (docs/moves.md): ahead of a move, the host asks for a copy of a
// person's state without freezing them. In the person's mailbox, between
// two of their frames, each tree is given a view that stays as it is while
// the person goes on (Tree.view: a write then copies the maps on its path),
// and each page starts a journal of its writes; the views are encoded
// outside the mailbox. The host stages the copy at the destination, which
// reads it while the person is still at home. The freeze that follows
// (Freeze.base) then hands over each page as its journal, and the wake
// applies the journal to the staged copy: the pause is what the person
// wrote during the move, not the size of their state.

// Bounds of a precopy.
const (
	// precopyMin is the smallest person worth a precopy: below it, a full
	// freeze costs less than the extra round trip.
	precopyMin = 256 << 10
	// journalMax bounds one page's journal in bytes: a page written more
	// than that since the precopy is frozen in full.
	journalMax = 16 << 20
	// precopyTTL is how long a precopy waits for its freeze: a move that
	// never came stops the journal.
	precopyTTL = 2 * time.Minute
)

// Bounds of the staged copies at a destination (a cache: a wake whose base
// is gone is sent again with it).
const (
	stagedMax   = 64
	stagedBytes = 1 << 30
	stagedTTL   = 2 * time.Minute
)

// writeLog is a page's writes since some point, up to max bytes: past
// them it breaks (and lets its writes go), and the page goes whole. It is
// written in the person's mailbox. A precopy's journal and a checkpoint
// chain's next increment are each one.
type writeLog struct {
	deltas []*protocol.Delta
	bytes  int
	max    int
	broken bool
}

// note records one write.
func (l *writeLog) note(op protocol.Delta_Op, path string, v []byte) {
	if l.broken {
		return
	}
	l.bytes += len(path) + len(v) + 16
	if l.bytes > l.max {
		l.broken, l.deltas = true, nil
		return
	}
	l.deltas = append(l.deltas, &protocol.Delta{Op: op, Path: path, Value: v})
}

// journal is a page's writes since a precopy (at most journalMax bytes).
type journal struct {
	writeLog
	base uint64
	at   time.Time
	// pending is the page's pending deltas the precopy holds: those still
	// pending at the freeze go by their sequence alone.
	pending map[*protocol.Delta]struct{}
}

// note records one write of the page; it runs in the person's mailbox.
func (p *Page) note(op protocol.Delta_Op, path string, v []byte) {
	if time.Since(p.journal.at) > precopyTTL {
		p.journal = nil
		return
	}
	p.journal.writeLog.note(op, path, v)
}

// sizeHint is a person's state here, at least roughly: set when a package
// is read or written, grown by every write since. The read loop answers a
// precopy of a small person from it without a turn of their mailbox.
func (rt *runtime) sizeHint(user string) int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if a := rt.accounts[user]; a != nil {
		return a.held.Load()
	}
	return 0
}

// precopy answers a Precopy in the person's mailbox: it takes the views
// and starts the journals, then encodes outside the mailbox.
func (rt *runtime) precopy(id uint64, pc *protocol.Precopy) {
	small := func() {
		_ = rt.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_Precopied{Precopied: &protocol.Precopied{Small: true}}})
	}
	rt.mu.Lock()
	if rt.frozen[pc.User] {
		rt.mu.Unlock()
		small() // frozen already: the move's freeze finds nothing to add
		return
	}
	sessions := rt.sessionsOfLocked(pc.User)
	epoch := rt.epochs[pc.User]
	rt.mu.Unlock()
	if len(sessions) == 0 {
		small()
		return
	}
	base := rand.Uint64() | 1
	now := time.Now()
	var releases []func()
	conns := make([]connOut, 0, len(sessions))
	pages := 0
	for _, s := range sessions {
		c := connOut{cp: &protocol.ConnPackage{Name: s.name, User: s.user}}
		for _, p := range s.pages {
			root, release := p.tree.view()
			releases = append(releases, release)
			j := &journal{writeLog: writeLog{max: journalMax}, base: base, at: now}
			p.coll.mu.Lock()
			pending := append([]*protocol.Delta(nil), p.coll.pending...)
			p.coll.mu.Unlock()
			if len(pending) > 0 {
				j.pending = make(map[*protocol.Delta]struct{}, len(pending))
				for _, d := range pending {
					j.pending[d] = struct{}{}
				}
			}
			p.journal = j
			c.pages = append(c.pages, pageOut{pp: &protocol.PagePackage{Id: p.id, Kind: p.kind, Schema: p.schema, Pending: pending}, tree: root})
			pages++
		}
		conns = append(conns, c)
	}
	pkg := &protocol.UserPackage{Format: packageFormat, User: pc.User, Epoch: epoch, App: rt.opts.Name, AppVersion: rt.opts.Version, Precopy: base}
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		b, err := marshalPackage(pkg, conns)
		for _, release := range releases {
			release()
		}
		if err != nil {
			_ = rt.peer.ReplyError(id, protocol.Error_INTERNAL, fmt.Sprintf("encoding the precopy of %q: %v", pc.User, err))
			return
		}
		rt.setSizeHint(pc.User, len(b))
		if len(b) < precopyMin {
			small()
			return
		}
		_ = rt.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_Precopied{Precopied: &protocol.Precopied{Package: b, Base: base, Pages: uint32(pages)}}})
	}()
}

// setSizeHint records the size of a package of user just read or written.
func (rt *runtime) setSizeHint(user string, n int) {
	rt.mu.Lock()
	a := rt.accounts[user]
	rt.mu.Unlock()
	if a != nil {
		a.held.Store(int64(n))
	}
}

// fromBase makes pp (a frozen page, its pending deltas set) the page's
// journal since the precopy base if it can, and ends the journal either way.
func (p *Page) fromBase(pp *protocol.PagePackage, base uint64) bool {
	j := p.journal
	p.journal = nil
	if base == 0 || j == nil || j.base != base || j.broken {
		return false
	}
	pp.FromBase, pp.Journal = true, j.deltas
	if len(j.pending) > 0 {
		own := pp.Pending[:0:0]
		for _, d := range pp.Pending {
			if _, ok := j.pending[d]; ok {
				pp.BasePending = append(pp.BasePending, d.Seq)
			} else {
				own = append(own, d)
			}
		}
		pp.Pending = own
	}
	return true
}

// staging holds the precopies staged at this worker, by digest.
type staging struct {
	mu    sync.Mutex
	m     map[string]*stagedCopy
	bytes int
}

// stagedCopy is a staged precopy, read: each page's tree by connection and
// page id (the trees alias the package's bytes).
type stagedCopy struct {
	user  string
	at    time.Time
	size  int
	pages map[[2]string]stagedPage
}

type stagedPage struct {
	root    map[string]any
	size    int64
	pending map[uint64]*protocol.Delta
}

// errNotStaged answers a wake whose base is neither staged nor sent.
var errNotStaged = errors.New("the precopy this package continues is not staged here")

// stage reads a precopy for a wake to come; it runs off the read loop.
func (rt *runtime) stage(st *protocol.Stage) error {
	var pkg protocol.UserPackage
	if err := unmarshalPackage(st.Package, &pkg); err != nil {
		return fmt.Errorf("decoding the precopy of %q: %w", st.User, err)
	}
	if pkg.Format != packageFormat || pkg.Precopy == 0 {
		return fmt.Errorf("staging %q: the package is not a precopy this SDK reads", st.User)
	}
	c, err := readBase(&pkg)
	if err != nil {
		return fmt.Errorf("staging %q: %w", st.User, err)
	}
	c.user, c.at, c.size = st.User, time.Now(), len(st.Package)
	s := &rt.staged
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]*stagedCopy{}
	}
	if old := s.m[st.Digest]; old != nil {
		s.bytes -= old.size
	}
	s.m[st.Digest] = c
	s.bytes += c.size
	// The oldest go first past the bounds (and past their time): a wake
	// whose copy went is sent again with it.
	for len(s.m) > stagedMax || s.bytes > stagedBytes {
		var oldest string
		for d, e := range s.m {
			if oldest == "" || e.at.Before(s.m[oldest].at) {
				oldest = d
			}
		}
		s.bytes -= s.m[oldest].size
		delete(s.m, oldest)
	}
	for d, e := range s.m {
		if time.Since(e.at) > stagedTTL {
			s.bytes -= e.size
			delete(s.m, d)
		}
	}
	return nil
}

func readBase(pkg *protocol.UserPackage) (*stagedCopy, error) {
	c := &stagedCopy{pages: map[[2]string]stagedPage{}}
	for _, cp := range pkg.Conns {
		for _, pp := range cp.Pages {
			t := newTree(nil)
			if err := decodeTree(t, pp.Tree); err != nil {
				return nil, fmt.Errorf("reading page %q: %w", pp.Id, err)
			}
			sp := stagedPage{root: t.root, size: t.size}
			if len(pp.Pending) > 0 {
				sp.pending = make(map[uint64]*protocol.Delta, len(pp.Pending))
				for _, d := range pp.Pending {
					sp.pending[d.Seq] = d
				}
			}
			c.pages[[2]string{cp.Name, pp.Id}] = sp
		}
	}
	return c, nil
}

// base returns the precopy a package continues: the one sent with the wake,
// or the one staged here (taken: a copy serves one wake).
func (rt *runtime) base(w *protocol.Wake, digest string) (*stagedCopy, error) {
	if len(w.BasePackage) > 0 {
		var pkg protocol.UserPackage
		if err := unmarshalPackage(w.BasePackage, &pkg); err != nil {
			return nil, fmt.Errorf("decoding the precopy of %q: %w", w.User, err)
		}
		c, err := readBase(&pkg)
		if err != nil {
			return nil, err
		}
		c.size = len(w.BasePackage)
		return c, nil
	}
	s := &rt.staged
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.m[digest]
	if c == nil || c.user != w.User {
		return nil, fmt.Errorf("waking %q from %s: %w", w.User, digest, errNotStaged)
	}
	delete(s.m, digest)
	s.bytes -= c.size
	return c, nil
}

// applyJournal replays a page's writes on its precopied tree.
func applyJournal(t *Tree, deltas []*protocol.Delta) error {
	for _, d := range deltas {
		switch d.Op {
		case protocol.Delta_SET:
			var v any
			if err := json.Unmarshal(d.Value, &v); err != nil {
				return fmt.Errorf("replaying %q: %w", d.Path, err)
			}
			delta := t.growth(d.Path, v, false)
			if d.Path == "" {
				m, ok := v.(map[string]any)
				if !ok {
					return fmt.Errorf("replaying the root: %w: not a map", ErrBadPath)
				}
				t.root = m
				t.size += delta
				continue
			}
			if err := t.place(d.Path, v, false); err != nil {
				return fmt.Errorf("replaying %q: %w", d.Path, err)
			}
			t.size += delta
		case protocol.Delta_DELETE:
			delta := t.growth(d.Path, nil, true)
			if err := t.place(d.Path, nil, true); err != nil {
				return fmt.Errorf("replaying the delete of %q: %w", d.Path, err)
			}
			t.size += delta
		default:
			return fmt.Errorf("replaying %q: a journal holds no %v", d.Path, d.Op)
		}
	}
	return nil
}
