package worker

import (
	"fmt"
	"sync/atomic"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Page is one browser tab of a connection, with its own Tree.
type Page struct {
	id, kind string
	schema   uint32 // the state-schema version this build declared for kind
	session  *Session
	tree     *Tree
	coll     *collector
	local    map[string]any
	// tables are the tables the page subscribes to; marks maps a cached
	// value's tree path to the tables it came from (tables.go). Both are
	// used from the person's mailbox, and tables also under rt.mu.
	tables map[string]bool
	marks  map[string][]string
	// ck is the mark of the page's last checkpoint piece and ckDirty says
	// it changed since (checkpoint.go); restoredAt is the sequence of the
	// RESET a checkpoint wake queued, until a client acknowledges it.
	ck         ckMark
	ckDirty    atomic.Bool
	restoredAt uint64
	// ckChain and ckLink name the page's last piece in its chain (chain 0:
	// a whole piece no increment follows), ckChained counts the bytes of
	// its increments so far, and ckj holds its writes since, for the next
	// increment (checkpoint.go).
	ckChain   uint64
	ckLink    uint32
	ckChained int
	ckj       *writeLog
	// journal is the page's writes since a precopy, while a move is on its
	// way (precopy.go).
	journal *journal
	// answered remembers the answers of its recent messages (answered.go).
	answered answered
}

func newPage(s *Session, id, kind string) *Page {
	p := &Page{id: id, kind: kind, session: s, coll: &collector{}}
	if sc, ok := s.rt.app.(Schemas); ok {
		p.schema, _, _ = sc.Schema(kind)
	}
	p.tree = newTree(func(op deltaOp, path string, v []byte) {
		o := protocol.Delta_SET
		if op == opDelete {
			o = protocol.Delta_DELETE
		}
		p.session.wrote(len(path) + len(v))
		p.changed()
		p.coll.add(o, path, v)
		if p.journal != nil {
			p.note(o, path, v)
		}
		if p.ckj != nil {
			p.ckj.note(o, path, v)
		}
	})
	p.tree.room = p.room
	p.coll.fold = func() []byte {
		b, _ := p.tree.snapshot()
		return b
	}
	return p
}

// ID is the page's name, chosen by the browser tab.
func (p *Page) ID() string { return p.id }

// Kind is the page's kind as the page declared it when it opened.
func (p *Page) Kind() string { return p.kind }

// Tree is the page's data: the truth of its state.
func (p *Page) Tree() *Tree { return p.tree }

// Session is the connection the page belongs to.
func (p *Page) Session() *Session { return p.session }

// Local holds live objects derived from the tree (an index, a cursor). It is
// a cache, never the truth: it does not travel when the person moves, so an
// App must be able to rebuild it from the tree. A page that never asks for
// it holds none.
func (p *Page) Local() map[string]any {
	if p.local == nil {
		p.local = map[string]any{}
	}
	return p.local
}

// room refuses a write that would take the page's state, or its person's,
// past its bound. It runs in the person's mailbox, so the person's other
// pages are still.
func (p *Page) room(delta int64) error {
	rt := p.session.rt
	perPage, perPerson := rt.opts.stateBounds()
	if perPage > 0 && p.tree.size+delta > perPage {
		rt.stateRefused.Add(1)
		return fmt.Errorf("%w: the page's state would be %d bytes; at most %d are allowed per page", ErrStateTooLarge, p.tree.size+delta, perPage)
	}
	if perPerson <= 0 {
		return nil
	}
	rt.mu.Lock()
	total := delta
	for s := range rt.byUser[p.session.userKey()] {
		for _, other := range s.pages {
			total += other.tree.size
		}
	}
	if _, ok := rt.byUser[p.session.userKey()][p.session]; !ok {
		for _, other := range p.session.pages {
			total += other.tree.size
		}
	}
	rt.mu.Unlock()
	if total > perPerson {
		rt.stateRefused.Add(1)
		return fmt.Errorf("%w: this person's pages would hold %d bytes; at most %d are allowed per person", ErrStateTooLarge, total, perPerson)
	}
	return nil
}
