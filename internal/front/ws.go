package front

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
)

// wsConn is one browser WebSocket. Three goroutines own it: the reader
// (reads ops, hands them to the sender in order), the sender (routes each
// op, holding it on the barrier while its person moves, and resends in order
// what a worker refused with MOVED) and the writer (encodes and writes
// answers, pings). A frame in flight costs no goroutine: its answer is queued for
// the writer from the channel's read loop (channel.Call.Then), and the
// writer encodes it.
type wsConn struct {
	f    *Front
	ws   *websocket.Conn
	conn string
	in   chan *op // reader → sender, in socket order
	ctx  context.Context
	stop context.CancelFunc
	// cookieIssued is when the page's cookie was issued, as far as this
	// socket knows; writer only.
	cookieIssued time.Time
	// slowOnce closes a client too slow to read its answers, once.
	slowOnce sync.Once
	wg       sync.WaitGroup
	once     sync.Once

	outMu sync.Mutex // guards outq
	// outq holds the answers waiting for the writer, at most
	// Config.SendQueue; an idle socket holds none.
	outq []outbound
	wake chan struct{} // a token when outq gets something

	mu      sync.Mutex // guards flights and nextSeq
	flights map[uint64]*flight
	nextSeq uint64
	// changed gets a token whenever a flight ends or is refused with MOVED.
	changed chan struct{}
	epoch   uint64 // the epoch the sender last sent at; sender only
}

// outbound is an answer waiting for the writer: an answer made here, or a
// worker's reply to encode.
type outbound struct {
	a   *answer
	id  uint64
	rep *protocol.FrameReply
}

// flight is a frame in flight, in socket order.
type flight struct {
	seq   uint64
	o     *op
	epoch uint64
	moved bool
}

func (f *Front) serveWS(w http.ResponseWriter, r *http.Request) error {
	conn, issued, renew, err := f.boundConn(r)
	if err != nil {
		return err
	}
	if renew {
		issued = f.cfg.Now() // the upgrade's answer carries a new cookie
	}
	var hdr http.Header
	if renew {
		// The upgrade's answer renews the cookie: a tab that stays on
		// its WebSocket all day keeps its session.
		c := f.cookieFor(conn)
		c.Value = f.cookie.sign(conn, issued)
		hdr = http.Header{"Set-Cookie": {c.String()}}
		f.cookieRenewals.Inc()
	}
	ws, err := f.upgrader.Upgrade(w, r, hdr)
	if err != nil {
		// The upgrader already answered the client.
		return nil
	}
	ctx, cancel := context.WithCancel(f.root)
	c := &wsConn{f: f, ws: ws, conn: conn, ctx: ctx, stop: cancel, cookieIssued: issued,
		in: make(chan *op, f.cfg.SendQueue), wake: make(chan struct{}, 1),
		flights: map[uint64]*flight{}, changed: make(chan struct{}, 1)}
	ws.SetReadLimit(f.cfg.MaxMessageBytes)
	defer f.cfg.Activity.opened(conn)()
	c.wg.Add(2)
	go c.writeLoop()
	go c.sendLoop()
	c.readLoop()
	c.close()
	c.wg.Wait()
	return nil
}

func (c *wsConn) close() {
	c.once.Do(func() {
		c.stop()
	})
}

// readLoop reads ops and hands them to the sender in order. When the sender
// falls behind (a person moving, a slow worker), the reader blocks and TCP
// pushes back on this client only.
func (c *wsConn) readLoop() {
	pongWait := 2*c.f.cfg.PingInterval + c.f.cfg.WriteTimeout
	_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(pongWait))
	})
	for {
		kind, msg, err := c.ws.ReadMessage()
		if err != nil {
			// gorilla has already sent 1009 for an oversize message.
			return
		}
		_ = c.ws.SetReadDeadline(time.Now().Add(pongWait))
		if kind != websocket.TextMessage {
			c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "ops are JSON text messages"}))
			continue
		}
		var o op
		if err := json.Unmarshal(msg, &o); err != nil {
			c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "decoding op: " + err.Error()}))
			continue
		}
		if !c.f.allowFrame(c.conn, "", viaWebSocket) {
			// Refused here, in socket order, before it costs a worker
			// anything; the page may retry it.
			c.send(errAnswer(o.ID, errRateLimited))
			continue
		}
		select {
		case c.in <- &o:
		case <-c.ctx.Done():
			return
		}
	}
}

// sendLoop routes ops in socket order. Before anything new goes out, frames
// refused with MOVED are resent, oldest first, so a page's ops reach its
// person's new home in the order the page sent them.
func (c *wsConn) sendLoop() {
	defer c.wg.Done()
	for {
		select {
		case o := <-c.in:
			c.resendMoved()
			c.dispatch(o)
		case <-c.changed:
			c.resendMoved()
		case <-c.ctx.Done():
			return
		}
	}
}

// dispatch checks an op, waits out a move, and sends it.
func (c *wsConn) dispatch(o *op) {
	if _, _, err := o.frame(); err != nil {
		c.send(errAnswer(o.ID, err))
		return
	}
	c.mu.Lock()
	c.nextSeq++
	fl := &flight{seq: c.nextSeq, o: o}
	c.mu.Unlock()
	for {
		rt, err := c.routeAfterOlder(0)
		if errors.Is(err, errResendFirst) {
			c.resendMoved()
			continue
		}
		if err != nil {
			c.send(errAnswer(o.ID, err))
			return
		}
		c.launch(fl, rt)
		return
	}
}

// routeAfterOlder waits for a route at minEpoch or later (through the
// barrier) and, if the epoch changed since the last send, for every frame
// sent at an older epoch to be answered or refused: nothing new may overtake
// a frame that might still have to be resent.
func (c *wsConn) routeAfterOlder(minEpoch uint64) (placement.Route, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.f.cfg.FrameTimeout)
	defer cancel()
	for {
		rt, err := c.f.barrier.route(ctx, c.conn, minEpoch)
		if err != nil {
			return rt, err
		}
		if rt.Epoch == c.epoch || !c.olderInFlight(rt.Epoch) {
			c.epoch = rt.Epoch
			return rt, nil
		}
		select {
		case <-c.changed:
			// Give the token back: resendMoved may need it too.
			select {
			case c.changed <- struct{}{}:
			default:
			}
			if c.hasMoved() {
				return rt, errResendFirst
			}
			time.Sleep(time.Millisecond)
		case <-ctx.Done():
			return rt, errBarrierTimeout
		}
	}
}

var errResendFirst = errors.New("frames refused by the old home must be resent first")

// olderInFlight reports frames sent at an older epoch and not yet answered.
// Pulls do not count: they change nothing, so their order does not matter.
func (c *wsConn) olderInFlight(epoch uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fl := range c.flights {
		if fl.epoch < epoch && !fl.moved && fl.o.Op != "pull" {
			return true
		}
	}
	return false
}

func (c *wsConn) hasMoved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fl := range c.flights {
		if fl.moved {
			return true
		}
	}
	return false
}

// resendMoved sends again, in socket order, every frame a worker refused
// with MOVED. Such frames never ran, so sending them again is safe.
func (c *wsConn) resendMoved() {
	for {
		c.mu.Lock()
		var moved []*flight
		minEpoch := uint64(0)
		for _, fl := range c.flights {
			if fl.moved {
				moved = append(moved, fl)
				minEpoch = max(minEpoch, fl.epoch+1)
			}
		}
		c.mu.Unlock()
		if len(moved) == 0 {
			return
		}
		sort.Slice(moved, func(i, j int) bool { return moved[i].seq < moved[j].seq })
		rt, err := c.routeAfterOlder(minEpoch)
		if errors.Is(err, errResendFirst) {
			continue // more were refused meanwhile: take them all, in order
		}
		for _, fl := range moved {
			c.mu.Lock()
			delete(c.flights, fl.seq)
			fl.moved = false
			c.mu.Unlock()
			if err != nil {
				c.send(errAnswer(fl.o.ID, err))
				continue
			}
			c.launch(fl, rt)
		}
	}
}

// launch sends a flight's frame to rt; its answer comes back through
// settled, from the channel's read loop, or when the frame's time is up.
func (c *wsConn) launch(fl *flight, rt placement.Route) {
	fr, extra, _ := fl.o.frame()
	stamp(fr, rt)
	fl.epoch = rt.Epoch
	ctx, cancel := context.WithTimeout(c.ctx, c.f.cfg.FrameTimeout+extra)
	call, err := c.f.cfg.Dispatcher.Send(ctx, rt.Worker, fr)
	if err != nil {
		cancel()
		c.send(errAnswer(fl.o.ID, frameErr(err)))
		return
	}
	c.mu.Lock()
	c.flights[fl.seq] = fl
	c.mu.Unlock()
	// The frame's deadline, or the socket's end, gives the call up.
	stop := context.AfterFunc(ctx, func() {
		if call.Abandon() {
			c.settled(fl, nil, ctx.Err())
		}
	})
	call.Then(func(env *protocol.Envelope, err error) {
		stop()
		cancel()
		c.settled(fl, env, err)
	})
}

// settled ends a flight with its worker's answer. It runs on the channel's
// read loop: it only takes locks held briefly and queues for the writer.
func (c *wsConn) settled(fl *flight, env *protocol.Envelope, err error) {
	c.mu.Lock()
	if isMoved(err) {
		fl.moved = true
	} else {
		delete(c.flights, fl.seq)
	}
	c.mu.Unlock()
	c.signal()
	switch {
	case isMoved(err):
		// The sender resends it.
	case err != nil:
		if c.ctx.Err() == nil {
			c.send(errAnswer(fl.o.ID, frameErr(err)))
		}
	case env.GetFrameReply() == nil:
		c.send(errAnswer(fl.o.ID, errors.New("worker answered with an unexpected envelope")))
	default:
		c.queue(outbound{id: fl.o.ID, rep: env.GetFrameReply()})
	}
}

func (c *wsConn) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// send queues an answer for the writer.
func (c *wsConn) send(a *answer) { c.queue(outbound{a: a}) }

// queue hands an answer to the writer. A client too slow to take its
// answers is closed (1013) rather than allowed to hold memory or block
// anyone else.
func (c *wsConn) queue(o outbound) {
	if c.ctx.Err() != nil {
		return // closed: the answers still arriving have nowhere to go
	}
	c.outMu.Lock()
	if len(c.outq) >= c.f.cfg.SendQueue {
		c.outMu.Unlock()
		// Once: answers racing to this point find the socket closing.
		c.slowOnce.Do(func() {
			c.f.log.Warn("closing a WebSocket too slow to read its answers", "conn", c.conn)
			c.close()
			_ = c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "client too slow"),
				time.Now().Add(time.Second))
			_ = c.ws.Close()
		})
		return
	}
	c.outq = append(c.outq, o)
	c.outMu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take swaps the queued answers for the writer's emptied batch.
func (c *wsConn) take(batch []outbound) []outbound {
	clear(batch)
	c.outMu.Lock()
	q := c.outq
	if cap(batch) > 64 {
		batch = nil // a burst's backing array goes with the burst
	}
	c.outq = batch[:0]
	c.outMu.Unlock()
	return q
}

// write encodes and writes one answer.
func (c *wsConn) write(o outbound) error {
	a := o.a
	if a == nil {
		a = toAnswer(o.id, o.rep)
	}
	b, err := json.Marshal(a)
	if err != nil {
		c.f.log.Error("encoding answer", "error", err)
		return nil
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// renewNotice tells a page its cookie is due for renewal.
var renewNotice = []byte(`{"op":"renew"}`)

func (c *wsConn) writeLoop() {
	defer c.wg.Done()
	ping := time.NewTicker(c.f.cfg.PingInterval)
	defer ping.Stop()
	defer c.ws.Close()
	var batch []outbound
	for {
		select {
		case <-c.wake:
			batch = c.take(batch)
			for _, o := range batch {
				if err := c.write(o); err != nil {
					c.close()
					return
				}
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.f.cfg.WriteTimeout)); err != nil {
				c.close()
				return
			}
			if c.f.cfg.Now().Sub(c.cookieIssued) >= c.f.cfg.CookieTTL/2 {
				// The page's cookie is past half its life: the page fetches
				// a new one (POST /_stickyd/renew).
				c.cookieIssued = c.f.cfg.Now()
				_ = c.ws.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
				if err := c.ws.WriteMessage(websocket.TextMessage, renewNotice); err != nil {
					c.close()
					return
				}
			}
		case <-c.ctx.Done():
			_ = c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		}
	}
}
