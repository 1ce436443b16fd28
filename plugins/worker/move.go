package worker

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// packageFormat is the UserPackage format this SDK writes and reads.
const packageFormat = 1

// noticeChanged is shown on a page whose state this build does not
// recognise after its person moved here.
const noticeChanged = "This page was reset because the application changed."

// fence refuses a frame the user's mailbox must not run: the user is frozen
// (moving away) or the frame carries an older epoch than the worker knows.
// It runs in the mailbox, so frames queued before a Freeze still run.
//
// A frame at a newer epoch for a frozen user means the maps gave them back
// to this worker since the freeze without a package (a move whose old
// worker died: their state is lost), so the freeze is over: whatever this
// worker still holds of an earlier stay is dropped, and they start clean
// here (a page they reopen says so). A move back with a package wakes them
// first, which ends the freeze the same way.
func (rt *runtime) fence(f *protocol.Frame) error {
	rt.mu.Lock()
	known := rt.epochs[f.User]
	if f.Epoch < known || (rt.frozen[f.User] && f.Epoch == known) {
		rt.mu.Unlock()
		return &movedError{user: f.User, epoch: known}
	}
	var stale []*Session
	if rt.frozen[f.User] {
		delete(rt.frozen, f.User)
		stale = rt.sessionsOfLocked(f.User)
		for _, s := range stale {
			rt.dropConnLocked(s)
			rt.countPages(s, -int64(len(s.pages)))
		}
	}
	if f.Epoch > known {
		rt.epochs[f.User] = f.Epoch
		rt.grewLocked()
	}
	rt.mu.Unlock()
	if len(stale) > 0 {
		rt.syncTables()
	}
	return nil
}

type movedError struct {
	user  string
	epoch uint64
}

func (e *movedError) Error() string {
	return fmt.Sprintf("user %q has moved (epoch %d here)", e.user, e.epoch)
}

// sessionsOfLocked lists the connections of user.
func (rt *runtime) sessionsOfLocked(user string) []*Session {
	out := make([]*Session, 0, len(rt.byUser[user]))
	for s := range rt.byUser[user] {
		out = append(out, s)
	}
	return out
}

// freeze stops the user and returns their package. It runs in the user's
// mailbox, after every frame that was queued before it.
func (rt *runtime) freeze(fr *protocol.Freeze) (*protocol.Frozen, error) {
	rt.mu.Lock()
	rt.frozen[fr.User] = true
	rt.grewLocked()
	delete(rt.yields, fr.User)
	if fr.Epoch > rt.epochs[fr.User] {
		rt.epochs[fr.User] = fr.Epoch
	}
	sessions := rt.sessionsOfLocked(fr.User)
	rt.mu.Unlock()
	pkg := &protocol.UserPackage{Format: packageFormat, User: fr.User, Epoch: fr.Epoch, App: rt.opts.Name, AppVersion: rt.opts.Version}
	out := &protocol.Frozen{Absent: len(sessions) == 0}
	base := fr.Base
	if fr.BaseDigest == "" {
		base = 0
	}
	conns := make([]connOut, 0, len(sessions))
	for _, s := range sessions {
		c := connOut{cp: &protocol.ConnPackage{Name: s.name, User: s.user}, values: s.values.root}
		for _, p := range s.pages {
			p.coll.mu.Lock()
			pp := &protocol.PagePackage{Id: p.id, Kind: p.kind, Schema: p.schema,
				Seq: p.coll.seq, Floor: p.coll.floor, Pending: append([]*protocol.Delta(nil), p.coll.pending...),
				Tables: p.Tables(), Marks: packMarks(p.marks), Answered: p.answered.pack()}
			p.coll.mu.Unlock()
			// A pull waiting here is answered now (with nothing); the page
			// pulls again and finds the person at their new home.
			p.coll.cancel()
			out.Pages++
			if p.fromBase(pp, base) {
				// The destination holds the tree as the precopy saw it.
				pkg.BaseDigest = fr.BaseDigest
				out.FromBase++
				c.pages = append(c.pages, pageOut{pp: pp})
				continue
			}
			c.pages = append(c.pages, pageOut{pp: pp, tree: p.tree.root})
		}
		conns = append(conns, c)
		out.Conns++
	}
	b, err := marshalPackage(pkg, conns)
	if err != nil {
		return nil, fmt.Errorf("encoding package of %q: %w", fr.User, err)
	}
	out.Package = b
	if out.FromBase == 0 {
		rt.setSizeHint(fr.User, len(b))
	}
	return out, nil
}

// thaw undoes a freeze: the move was rolled back.
func (rt *runtime) thaw(t *protocol.Thaw) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.frozen, t.User)
	if t.Epoch > rt.epochs[t.User] {
		rt.epochs[t.User] = t.Epoch
	}
	// The person stays at a new epoch: their pieces are sent again under it.
	rt.changedUser(t.User)
}

// evict forgets a frozen user whose move committed elsewhere. The user
// stays fenced: a late frame is still answered MOVED.
func (rt *runtime) evict(e *protocol.Evict) {
	rt.mu.Lock()
	if !rt.frozen[e.User] {
		rt.mu.Unlock()
		return
	}
	sessions := rt.sessionsOfLocked(e.User)
	for _, s := range sessions {
		rt.dropConnLocked(s)
	}
	rt.dropAccountLocked(e.User)
	rt.leftLocked(e.User, e.Forget)
	rt.mu.Unlock()
	rt.syncTables()
	for _, s := range sessions {
		rt.countPages(s, -int64(len(s.pages)))
	}
	rt.released()
}

// wake installs a user from their package. Pages whose state this build
// does not recognise restart clean, with a notice.
func (rt *runtime) wake(w *protocol.Wake) (*protocol.Woken, error) {
	var pkg protocol.UserPackage
	if len(w.Package) > 0 {
		if err := unmarshalPackage(w.Package, &pkg); err != nil {
			return nil, fmt.Errorf("decoding package of %q: %w", w.User, err)
		}
		if pkg.Format != packageFormat {
			return nil, fmt.Errorf("package of %q has format %d; this SDK reads %d", w.User, pkg.Format, packageFormat)
		}
	}
	var base *stagedCopy
	if pkg.BaseDigest != "" {
		// Read before anything changes: a wake answered errNotStaged is
		// sent again with its base.
		var err error
		if base, err = rt.base(w, pkg.BaseDigest); err != nil {
			return nil, err
		}
	}
	rt.mu.Lock()
	known := rt.epochs[w.User]
	if known > w.Epoch {
		// A late wake: the person has moved on since this package.
		rt.mu.Unlock()
		return nil, &movedError{user: w.User, epoch: known}
	}
	if known == w.Epoch && !rt.frozen[w.User] && len(rt.byUser[w.User]) > 0 {
		rt.mu.Unlock()
		return &protocol.Woken{}, nil // already awake here
	}
	// Frozen at this very epoch, the person was parked where they live
	// (idle parking): let go already, or their next frame came before the
	// eviction. Either way the package is what the freeze left, and they
	// wake from it as if the eviction had come first (the late eviction
	// finds nobody frozen and does nothing).
	for _, s := range rt.sessionsOfLocked(w.User) {
		// A stale copy from an earlier stay, or the frozen one the
		// eviction has not dropped yet: the package is the truth.
		rt.dropConnLocked(s)
		rt.countPages(s, -int64(len(s.pages)))
	}
	delete(rt.frozen, w.User)
	rt.epochs[w.User] = w.Epoch
	rt.mu.Unlock()

	out := &protocol.Woken{}
	ctx := rt.ctx
	for _, cp := range pkg.Conns {
		s := newSession(rt, cp.Name, cp.User)
		if err := decodeTree(s.values, cp.Values); err != nil {
			return nil, fmt.Errorf("loading connection %q: %w", cp.Name, err)
		}
		sctx := context.WithValue(ctx, sessionKey{}, s)
		for _, pp := range cp.Pages {
			p := newPage(s, pp.Id, pp.Kind)
			p.answered.unpack(pp.Answered)
			s.pages[p.id] = p
			out.Pages++
			if rt.recognises(pp) {
				if err := loadTree(p.tree, cp.Name, pp, base); err != nil {
					return nil, fmt.Errorf("loading page %q: %w", pp.Id, err)
				}
				p.coll.seq, p.coll.floor, p.coll.pending = pp.Seq, pp.Floor, pp.Pending
				// Subscriptions and cache marks travel with the page.
				p.marks = unpackMarks(pp.Marks)
				if err := p.Subscribe(pp.Tables...); err != nil {
					rt.log.Warn("restoring a page's subscriptions", "page", p.id, "error", err)
				}
				if w.Checkpoint {
					p.restoreFromCheckpoint(pp.Seq, w.Generation, noticeRestored)
				}
				continue
			}
			// Not guessed at: the page starts over, numbering on from
			// where it was, and its first delta says why.
			out.ResetPages++
			p.coll.seq, p.coll.floor = pp.Seq, pp.Seq
			if err := rt.app.OpenPage(sctx, p); err != nil {
				rt.log.Warn("reopening a page that restarted clean", "page", p.id, "error", err)
			}
			if w.Checkpoint {
				p.restoreFromCheckpoint(pp.Seq, w.Generation, noticeChanged)
				continue
			}
			p.coll.restartClean(noticeChanged)
		}
		rt.mu.Lock()
		rt.addConnLocked(s)
		s.acct = rt.accountLocked(s.userKey())
		rt.mu.Unlock()
		rt.countPages(s, int64(len(s.pages)))
	}
	size := len(w.Package)
	if base != nil {
		size += base.size
	}
	rt.setSizeHint(w.User, size)
	// Everything here is new to this worker: the next checkpoint round
	// sends it all.
	rt.changedUser(w.User)
	rt.signalArrival(w.User)
	return out, nil
}

// signalArrival tells a person's pages that arrived from a move, once per
// table they subscribe to, that the table may have changed while they
// travelled (a change published then went to the worker they left): their
// cached values marked with it are invalidated and the app hears of it with
// empty Data and Origin. It runs in the person's mailbox, after the wake.
func (rt *runtime) signalArrival(user string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	seen := map[string]bool{}
	for s := range rt.byUser[user] {
		for _, p := range s.pages {
			for t := range p.tables {
				if !seen[t] {
					seen[t] = true
					rt.userLocked(user).enqueue(&protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: t}}})
				}
			}
		}
	}
}

// recognises applies the version rule to a parked page.
func (rt *runtime) recognises(pp *protocol.PagePackage) bool {
	sc, ok := rt.app.(Schemas)
	if !ok {
		return true
	}
	version, oldest, known := sc.Schema(pp.Kind)
	return known && pp.Schema >= oldest && pp.Schema <= version
}

// loadTree fills a woken page's tree: from its package, or from the
// precopy it continues with its journal replayed.
func loadTree(t *Tree, conn string, pp *protocol.PagePackage, base *stagedCopy) error {
	if !pp.FromBase {
		if err := decodeTree(t, pp.Tree); err != nil {
			return err
		}
		// A checkpoint's page: its increments' writes since (host
		// CheckpointIndex.Restore), replayed.
		return applyJournal(t, pp.Journal)
	}
	if base == nil {
		return fmt.Errorf("the page continues a precopy the package does not name")
	}
	key := [2]string{conn, pp.Id}
	sp, ok := base.pages[key]
	if !ok {
		return fmt.Errorf("the page is not in the precopy it continues")
	}
	delete(base.pages, key) // a copy serves one page
	if len(pp.BasePending) > 0 {
		// The page's deltas: the base's it names and its own, in order.
		all := make([]*protocol.Delta, 0, len(pp.BasePending)+len(pp.Pending))
		for _, seq := range pp.BasePending {
			d := sp.pending[seq]
			if d == nil {
				return fmt.Errorf("the precopy it continues has no pending delta %d", seq)
			}
			all = append(all, d)
		}
		all = append(all, pp.Pending...)
		slices.SortStableFunc(all, func(a, b *protocol.Delta) int { return cmp.Compare(a.Seq, b.Seq) })
		pp.Pending = all
	}
	t.root, t.size = sp.root, sp.size
	return applyJournal(t, pp.Journal)
}
