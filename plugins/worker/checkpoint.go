package worker

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Crash checkpoints (docs/checkpoints.md). Now and then the host asks
// (Checkpoint) for what changed since the last ask; nobody is frozen. Each
// person with a change packages, in their own mailbox between two of their
// frames, the pages and connections that changed: one piece each, the same
// ConnPackage and PagePackage a freeze writes. The host parks the pieces; if
// this process dies, the person wakes on its replacement from their pieces
// (a Wake with checkpoint set).
//
// What changed is kept cheaply on the hot path: a page's first tree write
// after its last piece sets a flag and names its person in a set, under a
// lock taken once per page per round; later writes only read the flag.

// noticeRestored is shown on a page that came back from its last checkpoint.
const noticeRestored = "This page was restored from its last checkpoint: the worker that held it is gone, and changes made after the checkpoint may be lost."

// ckBatch people package at a time, each in their own mailbox; an answer
// stops growing once it holds max_bytes, checked between batches. A
// variable for the tests.
var ckBatch = 64

// Bounds of one checkpoint answer.
const (
	// ckBatchWait bounds the wait for one batch: a person whose mailbox is
	// busy longer (a handler stuck) is left changed for the next ask.
	ckBatchWait = 5 * time.Second
	// ckRoundTime bounds one answer; the people left are for the next ask.
	ckRoundTime = 10 * time.Second
)

// Increments (docs/checkpoints.md): a page of ckChainMin bytes or more is
// sent whole once, starting a chain, and then, while its writes since stay
// small beside it, as those writes only: each round parks what the person
// changed, not what they hold. The host replays a chain at a restore.
const (
	// ckChainMin is the smallest page sent by increments: below it, a
	// whole page costs about what its writes would.
	ckChainMin = 64 << 10
	// ckLinksMax bounds a chain's increments (a restore replays them
	// all, and each is a parked file).
	ckLinksMax = 32
	// ckChainShare bounds a chain's increments in bytes, as a share of
	// the page: past size/ckChainShare, the page goes whole again.
	ckChainShare = 4
)

// ckNextIncrement says whether the page's next piece may be an increment,
// under mark cur.
func (p *Page) ckNextIncrement(cur ckMark) bool {
	return p.ck == cur && p.ckChain != 0 && p.ckj != nil && !p.ckj.broken && p.ckLink < ckLinksMax
}

// ckSent records that the page's piece went: whole (starting a chain if
// the page is large enough) or as an increment.
func (p *Page) ckSent(cur ckMark, increment bool) {
	p.ck = cur
	if increment {
		p.ckLink++
		p.ckChained += p.ckj.bytes
	} else {
		p.ckChain, p.ckLink, p.ckChained = 0, 0, 0
		if p.tree.size >= ckChainMin {
			p.ckChain = rand.Uint64() | 1
		}
	}
	p.ckj = nil
	if p.ckChain != 0 {
		room := int(p.tree.size/ckChainShare) - p.ckChained
		if room <= 0 {
			return // the next piece is whole
		}
		p.ckj = &writeLog{max: room}
	}
}

// ckMark says under which user key and epoch a page's or a connection's
// last piece was sent; the zero mark means never.
type ckMark struct {
	user  string
	epoch uint64
}

// checkpoints is a worker's bookkeeping of what changed. Its zero value is
// ready (a detached test page has one too).
type checkpoints struct {
	mu      sync.Mutex // guards changed, full, gone, rounds and next
	changed map[string]struct{}
	// full names the pages (user, conn, page) the host asked for whole.
	full   map[[3]string]struct{}
	gone   []*protocol.CheckpointKey
	rounds map[uint64]*ckRound
	next   uint64
}

// ckRound is one batch of people packaging for one answer.
type ckRound struct {
	open    bool // while the batch is still waited for
	started int  // people who began packaging
	results chan ckResult
}

type ckResult struct {
	pieces []*protocol.CheckpointPiece
	later  []ckLater
	gone   []*protocol.CheckpointKey
	err    error
}

// ckLater is a whole piece of a large page, encoded outside its person's
// mailbox from a view of its tree (Tree.view), so a 10 MB page costs its
// person a view, not an encode.
type ckLater struct {
	piece   *protocol.CheckpointPiece // its package unset
	conn    connOut
	release func()
}

// encode fills the piece's package and releases the view.
func (l *ckLater) encode() error {
	defer l.release()
	b, err := marshalConn(l.conn)
	l.piece.Package = b
	return err
}

// changedUser names a person with something to checkpoint.
func (rt *runtime) changedUser(user string) {
	rt.ck.mu.Lock()
	if rt.ck.changed == nil {
		rt.ck.changed = map[string]struct{}{}
	}
	rt.ck.changed[user] = struct{}{}
	rt.ck.mu.Unlock()
}

// changed marks the page as changed since its last piece.
func (p *Page) changed() {
	if !p.ckDirty.Load() {
		p.ckDirty.Store(true)
		p.session.rt.changedUser(p.session.userKey())
	}
}

// changed marks the connection's values as changed since its last piece.
func (s *Session) changed() {
	if !s.ckDirty.Load() {
		s.ckDirty.Store(true)
		s.rt.changedUser(s.userKey())
	}
}

// goneLocked records that the pieces of a page (or, page "", of a
// connection) sent under mark must be dropped.
func (ck *checkpoints) goneLocked(mark ckMark, conn, page string) {
	if mark.user != "" {
		ck.gone = append(ck.gone, &protocol.CheckpointKey{User: mark.user, Conn: conn, Page: page})
	}
}

// pageGone records that a page closed.
func (rt *runtime) pageGone(s *Session, p *Page) {
	rt.ck.mu.Lock()
	rt.ck.goneLocked(p.ck, s.name, p.id)
	rt.ck.mu.Unlock()
}

// connGone records that a connection left, with its pages.
func (rt *runtime) connGone(s *Session) {
	rt.ck.mu.Lock()
	rt.ck.goneLocked(s.ck, s.name, "")
	for _, p := range s.pages {
		rt.ck.goneLocked(p.ck, s.name, p.id)
	}
	rt.ck.mu.Unlock()
}

// checkpoint answers the host's Checkpoint request: the people who changed
// package in their mailboxes, a batch at a time, until the answer holds
// max_bytes (it may pass it by one batch) or its time is up; the others stay
// changed (more is set).
func (rt *runtime) checkpoint(id uint64, c *protocol.Checkpoint) {
	for _, k := range c.Full {
		rt.ckAskFull(k.User, k.Conn, k.Page)
	}
	rt.ck.mu.Lock()
	users := make([]string, 0, len(rt.ck.changed))
	for u := range rt.ck.changed {
		users = append(users, u)
	}
	rt.ck.changed = nil
	out := &protocol.Checkpointed{Gone: rt.ck.gone}
	rt.ck.gone = nil
	rt.ck.mu.Unlock()
	sort.Strings(users)
	var size uint64
	began := time.Now()
	for len(users) > 0 {
		if (c.MaxBytes > 0 && size >= c.MaxBytes) || time.Since(began) > ckRoundTime || rt.ctx.Err() != nil {
			for _, u := range users {
				rt.changedUser(u)
			}
			out.More = true
			break
		}
		batch := users[:min(len(users), ckBatch)]
		users = users[len(batch):]
		for _, r := range rt.packageBatch(batch) {
			if r.err != nil {
				rt.log.Warn("packaging a checkpoint", "error", r.err)
				continue
			}
			for i := range r.later {
				l := &r.later[i]
				if err := l.encode(); err != nil {
					// The page was marked sent: have it sent whole next time.
					rt.log.Warn("packaging a checkpoint", "user", l.piece.User, "page", l.piece.Page, "error", err)
					rt.ckAskFull(l.piece.User, l.piece.Conn, l.piece.Page)
					continue
				}
				r.pieces = append(r.pieces, l.piece)
			}
			out.Pieces = append(out.Pieces, r.pieces...)
			out.Gone = append(out.Gone, r.gone...)
			for _, p := range r.pieces {
				size += uint64(len(p.Package))
			}
		}
	}
	_ = rt.peer.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_Checkpointed{Checkpointed: out}})
}

// packageBatch has each user of batch package in their mailbox and waits
// for them (bounded by ckBatchWait for those who have not begun).
func (rt *runtime) packageBatch(batch []string) []ckResult {
	r := &ckRound{open: true, results: make(chan ckResult, len(batch))}
	rt.ck.mu.Lock()
	rt.ck.next++
	n := rt.ck.next
	if rt.ck.rounds == nil {
		rt.ck.rounds = map[uint64]*ckRound{}
	}
	rt.ck.rounds[n] = r
	rt.ck.mu.Unlock()
	for _, u := range batch {
		// An internal mailbox item: its id names the round, not a request.
		rt.enqueue(u, &protocol.Envelope{Id: n, Body: &protocol.Envelope_Checkpoint{Checkpoint: &protocol.Checkpoint{}}})
	}
	var out []ckResult
	timer := time.NewTimer(ckBatchWait)
	defer timer.Stop()
	for len(out) < len(batch) {
		select {
		case res := <-r.results:
			out = append(out, res)
			continue
		case <-timer.C:
		case <-rt.ctx.Done():
		}
		// Those who have not begun give up their turn (and stay changed);
		// those packaging now are waited for.
		rt.ck.mu.Lock()
		r.open = false
		started := r.started
		rt.ck.mu.Unlock()
		for len(out) < started {
			out = append(out, <-r.results)
		}
		break
	}
	rt.ck.mu.Lock()
	r.open = false
	delete(rt.ck.rounds, n)
	rt.ck.mu.Unlock()
	return out
}

// runCheckpoint is a person's turn in a checkpoint round, in their mailbox.
func (rt *runtime) runCheckpoint(user string, round uint64) {
	rt.ck.mu.Lock()
	r := rt.ck.rounds[round]
	if r == nil || !r.open {
		rt.ck.mu.Unlock()
		rt.changedUser(user) // the round gave up on this turn: next time
		return
	}
	r.started++
	rt.ck.mu.Unlock()
	var res ckResult
	defer func() {
		// The round waits for this turn's result, whatever happens to it.
		if p := recover(); p != nil {
			res = ckResult{err: fmt.Errorf("packaging %q: %v", user, p)}
		}
		r.results <- res
	}()
	res.pieces, res.later, res.gone, res.err = rt.packageUser(user)
}

// packageUser returns a piece for each of user's pages and connections that
// changed since its last piece (or was last sent under another user key or
// epoch), and marks them sent. It runs in the user's mailbox, so no frame of
// theirs runs meanwhile. A frozen user is skipped: they are moving, and
// their package is the truth. The whole pieces of pages of ckChainMin bytes
// or more come back in later, to be encoded outside the mailbox.
func (rt *runtime) packageUser(user string) (pieces []*protocol.CheckpointPiece, later []ckLater, gone []*protocol.CheckpointKey, err error) {
	rt.mu.Lock()
	if rt.frozen[user] {
		rt.mu.Unlock()
		return nil, nil, nil, nil
	}
	defer func() {
		if err != nil {
			for _, l := range later {
				l.release()
			}
			later = nil
		}
	}()
	epoch := rt.epochs[user]
	sessions := rt.sessionsOfLocked(user)
	rt.mu.Unlock()
	cur := ckMark{user: user, epoch: epoch}
	piece := func(s *Session, page string, c connOut, chain uint64, link uint32) error {
		b, err := marshalConn(c)
		if err != nil {
			return err
		}
		pieces = append(pieces, &protocol.CheckpointPiece{User: user, Epoch: epoch, Conn: s.name, Page: page, Package: b, Chain: chain, Link: link})
		return nil
	}
	for _, s := range sessions {
		if s.ck != cur || s.ckDirty.Load() {
			if s.ck.user != "" && s.ck.user != user {
				gone = append(gone, &protocol.CheckpointKey{User: s.ck.user, Conn: s.name})
			}
			s.ckDirty.Store(false)
			if err := piece(s, "", connOut{cp: &protocol.ConnPackage{Name: s.name, User: s.user}, values: s.values.root}, 0, 0); err != nil {
				return nil, nil, nil, err
			}
			s.ck = cur
		}
		for _, p := range s.pages {
			whole := rt.ckTakeFull(user, s.name, p.id)
			if p.ck == cur && !p.ckDirty.Load() && !whole {
				continue
			}
			if p.ck.user != "" && p.ck.user != user {
				gone = append(gone, &protocol.CheckpointKey{User: p.ck.user, Conn: s.name, Page: p.id})
			}
			p.ckDirty.Store(false)
			p.coll.mu.Lock()
			pp := &protocol.PagePackage{Id: p.id, Kind: p.kind, Schema: p.schema,
				Seq: p.coll.seq, Floor: p.coll.seq, Tables: p.Tables(), Marks: packMarks(p.marks), Answered: p.answered.pack()}
			p.coll.mu.Unlock()
			out := pageOut{pp: pp}
			inc := !whole && p.ckNextIncrement(cur)
			chain, link := p.ckChain, p.ckLink+1
			var release func()
			switch {
			case inc:
				pp.Journal = p.ckj.deltas
			case p.tree.size >= ckChainMin:
				// Encoded outside the mailbox, from a view.
				out.tree, release = p.tree.view()
				link = 0
			default:
				// The tree is encoded once, in place (pkgcodec.go).
				out.tree = p.tree.root
				link = 0
			}
			c := connOut{cp: &protocol.ConnPackage{Name: s.name, User: s.user}, pages: []pageOut{out}}
			p.ckSent(cur, inc)
			if !inc {
				chain = p.ckChain
			}
			if release != nil {
				later = append(later, ckLater{
					piece:   &protocol.CheckpointPiece{User: user, Epoch: epoch, Conn: s.name, Page: p.id, Chain: chain, Link: link},
					conn:    c,
					release: release,
				})
				continue
			}
			if err := piece(s, p.id, c, chain, link); err != nil {
				p.ck = ckMark{} // whole next time
				return nil, nil, nil, err
			}
		}
	}
	return pieces, later, gone, nil
}

// ckAskFull has the page's next piece sent whole.
func (rt *runtime) ckAskFull(user, conn, page string) {
	rt.ck.mu.Lock()
	if rt.ck.full == nil {
		rt.ck.full = map[[3]string]struct{}{}
	}
	rt.ck.full[[3]string{user, conn, page}] = struct{}{}
	rt.ck.mu.Unlock()
	rt.changedUser(user)
}

// ckTakeFull says whether the host asked for the page whole, and forgets
// the ask.
func (rt *runtime) ckTakeFull(user, conn, page string) bool {
	rt.ck.mu.Lock()
	defer rt.ck.mu.Unlock()
	k := [3]string{user, conn, page}
	_, ok := rt.ck.full[k]
	if ok {
		delete(rt.ck.full, k)
	}
	return ok
}

// restoreFromCheckpoint makes a page woken from a crash checkpoint continue
// above anything its clients were sent by the worker that died: its
// sequence jumps to the generation's base, and its next delta is a RESET of
// the restored tree carrying notice. See Wake.checkpoint.
func (p *Page) restoreFromCheckpoint(seq uint64, generation uint32, notice string) {
	base := max((seq>>32+1)<<32, uint64(generation)<<32)
	p.coll.mu.Lock()
	p.coll.seq, p.coll.floor, p.coll.pending = base, base, nil
	p.coll.mu.Unlock()
	p.coll.restartClean(notice)
	p.restoredAt = p.coll.last()
}
