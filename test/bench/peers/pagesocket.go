package main

import (
	"encoding/json"
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// maxPending is how many deltas a page that never pulls keeps on its
// socket before only the last of each path is kept, as the worker's
// collector does: the state part's pages send inc after inc and never pull.
const maxPending = 4096

// errSocketClosed is a write to a socket that has ended.
var errSocketClosed = errors.New("the socket is closed")

// pageSocket is one WebSocket of the page server and what it owes each
// page opened on it: the deltas written and not yet acknowledged, and a
// pull waiting for the next one. The server's read loop answers the ops;
// a waiting pull's timer answers from its own goroutine, so writes to the
// socket and the pages' delivery share mu. The deltas live with the
// socket, not in the store: the peers are one process and a tab one
// socket, and keeping them in Redis too would only add to its cost.
type pageSocket struct {
	ws     *websocket.Conn
	worker string // the worker name the answers carry

	mu     sync.Mutex // guards pages and closed, and serializes writes to ws
	pages  map[string]*delivery
	closed bool
}

// delivery is what a socket owes one page.
type delivery struct {
	last    uint64      // the page's newest delta that the socket knows of
	floor   uint64      // the deltas up to it were acknowledged (or came before the socket)
	pending []wireDelta // the deltas after floor, in order
	held    *heldPull   // a pull waiting for a delta; nil: none
}

// heldPull is a pull left waiting: it is answered by the next deltas, or
// empty when its timer fires.
type heldPull struct {
	id    uint64
	after uint64
	timer *time.Timer
}

func newPageSocket(ws *websocket.Conn, worker string) *pageSocket {
	return &pageSocket{ws: ws, worker: worker, pages: map[string]*delivery{}}
}

// write sends one answer.
func (s *pageSocket) write(a *wireAnswer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(a)
}

func (s *pageSocket) writeLocked(a *wireAnswer) error {
	if s.closed {
		return errSocketClosed
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	_ = s.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return s.ws.WriteMessage(websocket.TextMessage, b)
}

// adopt notes that page, whose newest delta is last, is served on this
// socket; a page it already serves keeps what it is owed.
func (s *pageSocket) adopt(page string, last uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pages[page] == nil {
		s.pages[page] = &delivery{last: last, floor: last}
	}
}

// deliver adds a message's deltas to what page is owed and answers its
// waiting pull with them.
func (s *pageSocket) deliver(page string, ds []wireDelta) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.pages[page]
	if d == nil {
		d = &delivery{last: ds[0].Seq - 1, floor: ds[0].Seq - 1}
		s.pages[page] = d
	}
	d.pending = append(d.pending, ds...)
	d.last = ds[len(ds)-1].Seq
	if len(d.pending) > maxPending {
		d.pending = lastOfEachPath(d.pending)
	}
	h := d.held
	if h == nil {
		return nil
	}
	h.timer.Stop()
	d.held = nil
	return s.writeLocked(s.pullAnswer(h.id, h.after, d))
}

// pull answers a pull of page after after: with the deltas the socket
// holds after it, or, if there are none and wait is positive, by leaving
// it waiting (nil). known is false when the socket cannot tell: the page
// is not served here, or the reader is behind what it holds.
func (s *pageSocket) pull(page string, id, after uint64, wait time.Duration) (a *wireAnswer, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.pages[page]
	if d == nil || after < d.floor {
		return nil, false
	}
	// The pull acknowledges everything up to after.
	i := 0
	for i < len(d.pending) && d.pending[i].Seq <= after {
		i++
	}
	d.pending = d.pending[i:]
	d.floor = max(d.floor, min(after, d.last))
	if len(d.pending) > 0 || wait <= 0 {
		return s.pullAnswer(id, after, d), true
	}
	if d.held != nil {
		// One pull waits per page: an older one is answered empty.
		d.held.timer.Stop()
		_ = s.writeLocked(s.pullAnswer(d.held.id, d.held.after, &delivery{last: d.last}))
	}
	h := &heldPull{id: id, after: after}
	h.timer = time.AfterFunc(wait, func() { s.expire(page, h) })
	d.held = h
	return nil, true
}

// pullAnswer is the answer to pull id: d's pending deltas and its last.
func (s *pageSocket) pullAnswer(id, after uint64, d *delivery) *wireAnswer {
	a := &wireAnswer{Op: "reply", ID: id, Worker: s.worker, Last: max(after, d.last)}
	if len(d.pending) > 0 {
		a.Deltas = append([]wireDelta(nil), d.pending...)
	}
	return a
}

// expire answers h empty if it still waits: its wait ran out.
func (s *pageSocket) expire(page string, h *heldPull) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.pages[page]
	if d == nil || d.held != h {
		return
	}
	d.held = nil
	_ = s.writeLocked(&wireAnswer{Op: "reply", ID: h.id, Worker: s.worker, Last: max(h.after, d.last)})
}

// forget drops page (it closed), answering its waiting pull empty.
func (s *pageSocket) forget(page string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.pages[page]
	if d == nil {
		return
	}
	if h := d.held; h != nil {
		h.timer.Stop()
		_ = s.writeLocked(&wireAnswer{Op: "reply", ID: h.id, Worker: s.worker, Last: max(h.after, d.last)})
	}
	delete(s.pages, page)
}

// shutdown ends the socket: no more writes, no waiting pull left.
func (s *pageSocket) shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, d := range s.pages {
		if d.held != nil {
			d.held.timer.Stop()
			d.held = nil
		}
	}
}

// lastOfEachPath keeps the last delta of each path, in order: replaying
// them gives the same page (their sequence numbers in between are skipped,
// as the worker's collector skips them).
func lastOfEachPath(ds []wireDelta) []wireDelta {
	last := make(map[string]uint64, 8)
	for _, d := range ds {
		last[d.Path] = d.Seq
	}
	keep := ds[:0]
	for _, d := range ds {
		if last[d.Path] == d.Seq {
			keep = append(keep, d)
		}
	}
	return keep
}
