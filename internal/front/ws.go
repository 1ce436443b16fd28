package front

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// wsConn is one browser WebSocket. An idle one holds one goroutine, its
// reader, parked in a read on a small stack. The reader reads frames and
// has a router (one of the front's, route.go) route each one's ops in
// socket order, holding them on the barrier while its person moves. A frame
// in flight costs no goroutine: its answer is queued from the channel's
// read loop (channel.Call.Then). One of the front's writers writes while
// answers or a ping wait, and a resender runs while frames a worker refused
// with MOVED wait to be sent again.
type wsConn struct {
	f    *Front
	ws   *websocket.Conn
	conn string
	// user is the user key the socket's cookie was bound to: once the
	// maps bind the connection to someone else (a login), the socket is
	// closed and must reconnect with the cookie the login issued.
	user string
	// batch is set for a page that asked for batched frames (?batch=1 on
	// the upgrade): it may send several ops as one JSON array, and gets the
	// answers that are ready together as one array.
	batch bool
	ctx   context.Context
	stop  context.CancelFunc
	// slowOnce closes a client too slow to read its answers, once; slow
	// is set then, and the socket's end sends no second close frame.
	slowOnce sync.Once
	slow     atomic.Bool
	once     sync.Once
	// sendMu is held by whoever routes and sends frames, the reader or
	// the resender, so frames leave in socket order.
	sendMu    sync.Mutex
	resending atomic.Bool
	// pingAt is when the socket's next ping is due (Unix nanoseconds; 0:
	// one is on its way): the front's pinger looks (pingLoop).
	pingAt atomic.Int64

	outMu sync.Mutex // guards outq, pingDue, writing, closed, cookieIssued
	// outq holds the answers waiting for the writer, at most
	// Config.SendQueue; an idle socket holds none.
	outq    []outbound
	pingDue bool
	writing bool // a writer goroutine runs
	closed  bool
	// cookieIssued is when the page's cookie was issued, as far as this
	// socket knows.
	cookieIssued time.Time

	mu sync.Mutex // guards flights and nextSeq
	// flights are the frames in flight, a handful at most (a slice: an
	// idle tab's one pull costs a pointer, not a map).
	flights []*flight
	nextSeq uint64
	// changed gets a token whenever a flight ends or is refused with MOVED.
	changed chan struct{}
	epoch   uint64 // the epoch frames were last sent at; under sendMu
}

// outbound is an answer waiting for the writer: an answer made here, a
// worker's reply to encode, or a notice already encoded.
type outbound struct {
	a   *answer
	id  uint64
	rep *protocol.FrameReply
	raw []byte
}

// helloFrame is the first frame a page that asked for batched frames gets:
// this front reads and writes them (a page sends arrays only once it has
// read it), and reads messages of at most maxMessage bytes (a page refuses
// a bigger one itself, too_large, rather than have the socket closed with
// 1009 and lose the other ops in flight).
func helloFrame(maxMessage int64) []byte {
	return fmt.Appendf(nil, `{"op":"hello","batch":true,"max_message_bytes":%d}`, maxMessage)
}

// maxBatchOps bounds the ops of one batched frame.
const maxBatchOps = 64

// flight is a frame in flight, in socket order.
type flight struct {
	seq   uint64
	o     *op
	fr    *protocol.Frame // o's frame, built once
	extra time.Duration   // o's time beyond the frame timeout (a pull's wait)
	send  sendCtx         // the context of its send, for the send alone
	epoch uint64
	moved bool
	call  *channel.Call // set once sent; under wsConn.mu
	timer *time.Timer   // its deadline
}

func (f *Front) serveWS(w http.ResponseWriter, r *http.Request) error {
	ck, err := f.boundConn(r)
	if err != nil {
		return err
	}
	// The socket holds its connection's name for its life: a copy, not a
	// piece of the request's Cookie header, which would stay with it.
	conn, issued, renew := strings.Clone(ck.conn), ck.issued, ck.renew
	// The socket is bound to the person the cookie was checked against:
	// a later login elsewhere (a new person for the connection) closes it.
	user := ck.route.User
	if renew {
		issued = f.cfg.Now() // the upgrade's answer carries a new cookie
	}
	var hdr http.Header
	if renew {
		// The upgrade's answer renews the cookie: a tab that stays on
		// its WebSocket all day keeps its session.
		c := f.cookieFor(conn, user)
		c.Value = f.ring().sign(conn, user, issued)
		hdr = http.Header{"Set-Cookie": {c.String()}}
		f.cookieRenewals.Inc()
	}
	ws, err := f.upgrader.Upgrade(w, r, hdr)
	if err != nil {
		// The upgrader already answered the client.
		return nil
	}
	// The socket's context has no parent to register with (a few dozen
	// bytes a socket): the front's Close closes each socket it tracks.
	ctx, cancel := context.WithCancel(context.Background())
	c := &wsConn{f: f, ws: ws, conn: conn, user: user, ctx: ctx, stop: cancel, cookieIssued: issued,
		changed: make(chan struct{}, 1), batch: r.URL.Query().Get("batch") == "1"}
	if c.batch {
		c.queue(outbound{raw: f.hello})
	}
	ws.SetReadLimit(f.cfg.MaxMessageBytes)
	c.pingAt.Store(time.Now().Add(f.cfg.PingInterval).UnixNano())
	// The socket lives on in a goroutine of its own, and the handler
	// returns: net/http then lets go of the request and of its connection's
	// buffers, which a hijacked connection no longer uses, and the reader
	// starts on a small stack.
	f.cfg.Activity.opened(conn)
	go c.serve()
	return nil
}

// serve reads the socket until it ends, then tells the front's set of
// sockets and the activity record that it is gone.
func (c *wsConn) serve() {
	c.f.track(c)
	pongWait := 2*c.f.cfg.PingInterval + c.f.cfg.WriteTimeout
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(pongWait))
	})
	c.readLoop()
	c.close()
	c.closeSocket()
	c.f.untrack(c)
	c.f.cfg.Activity.closed(c.conn)
}

// readLoop reads the socket's frames until it ends, and has each one's ops
// routed in order (Front.routeFrame), not on this goroutine: its stack stays
// sized for waiting in a read. Routing an op (decoding it, framing it,
// sending it) needs 8 KB of stack or more, and a goroutine that then waits
// in a read keeps what it grew to (the collector halves a stack only when
// a quarter of it is in use): 4 KB more for every idle tab. While an op
// waits (a person moving, a slow worker) the reader does not read, and TCP
// pushes back on this client only.
func (c *wsConn) readLoop() {
	for {
		// Set before each read: an op that waited on a move must not
		// leave the next read with a deadline gone by.
		_ = c.ws.SetReadDeadline(time.Now().Add(2*c.f.cfg.PingInterval + c.f.cfg.WriteTimeout))
		kind, msg, err := c.ws.ReadMessage()
		if err != nil {
			// gorilla has already sent 1009 for an oversize message.
			return
		}
		if !c.f.routeFrame(c, kind, msg) {
			return
		}
	}
}

// close ends the socket's context: its calls are given up and it closes.
// Whoever calls it (a read or write error, a slow client, a login
// elsewhere, the front's shutdown), the socket says goodbye from a
// goroutine of its own: a caller may hold the socket's locks.
func (c *wsConn) close() {
	c.once.Do(func() {
		c.stop()
		go c.closeSocket()
	})
}

// closeSocket says goodbye and closes the socket; no writer starts after.
func (c *wsConn) closeSocket() {
	c.outMu.Lock()
	already := c.closed
	c.closed = true
	c.outq = nil
	c.outMu.Unlock()
	if already {
		return
	}
	c.abandonFlights()
	if !c.slow.Load() {
		// (A slow client was sent 1013, or nothing could be sent to it.)
		// The front stopping says 1001, going away: the client reconnects
		// (to this front once it is back, or another).
		code, reason := websocket.CloseNormalClosure, ""
		if c.f.root.Err() != nil {
			code, reason = websocket.CloseGoingAway, "the front is stopping; reconnect"
		}
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	}
	_ = c.ws.Close()
}

// handleFrame routes the ops of one frame in order; it reports whether the
// socket is still open.
func (c *wsConn) handleFrame(kind int, msg []byte) bool {
	if kind != websocket.TextMessage {
		c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "ops are JSON text messages"}))
		return true
	}
	if !utf8.Valid(msg) {
		// RFC 6455 §8.1: a text frame that is not UTF-8 fails the
		// connection with 1007.
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseInvalidFramePayloadData, "text frames must be UTF-8"), time.Now().Add(time.Second))
		return false
	}
	if c.batch && isArray(msg) {
		ops, err := decodeOps(msg)
		if err != nil {
			c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "decoding ops: " + err.Error()}))
			return true
		}
		if len(ops) > maxBatchOps {
			c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: fmt.Sprintf("a frame holds at most %d ops, this one %d", maxBatchOps, len(ops))}))
			return true
		}
		for i := range ops {
			c.handleOp(&ops[i])
		}
	} else {
		var o op
		if err := decodeOp(msg, &o); err != nil {
			c.send(errAnswer(0, &HTTPError{Status: http.StatusBadRequest, Message: "decoding op: " + err.Error()}))
			return true
		}
		c.handleOp(&o)
	}
	return c.ctx.Err() == nil
}

// isArray reports a frame that is a JSON array (of ops).
func isArray(msg []byte) bool {
	for _, b := range msg {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		}
		return b == '['
	}
	return false
}

// handleOp checks an op against the person's rate and routes it, in socket
// order.
func (c *wsConn) handleOp(o *op) {
	if !c.f.allowFrame(c.conn, "", viaWebSocket) {
		// Refused here, in socket order, before it costs a worker
		// anything; the page may retry it.
		c.send(errAnswer(o.ID, errRateLimited))
		return
	}
	// Before anything new goes out, frames refused with MOVED are
	// resent, oldest first, so a page's ops reach its person's new
	// home in the order the page sent them.
	c.sendMu.Lock()
	c.resendMoved()
	c.dispatch(o)
	c.sendMu.Unlock()
}

// resendSoon starts a resender unless one runs: frames refused with MOVED
// go out again without waiting for the page's next op.
func (c *wsConn) resendSoon() {
	if !c.resending.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			c.sendMu.Lock()
			c.resendMoved()
			c.sendMu.Unlock()
			c.resending.Store(false)
			// A refusal between the resend and the flag is ours to send.
			if !c.hasMoved() || c.ctx.Err() != nil || !c.resending.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// dispatch checks an op, waits out a move, and sends it.
func (c *wsConn) dispatch(o *op) {
	fr, extra, err := o.frame()
	if err != nil {
		c.send(errAnswer(o.ID, err))
		return
	}
	c.mu.Lock()
	c.nextSeq++
	fl := &flight{seq: c.nextSeq, o: o, fr: fr, extra: extra}
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
		if rt.User != c.user {
			// The connection now belongs to someone else than the cookie
			// this socket opened with (a login since): whoever holds that
			// cookie, a planted one included, is not them.
			_ = c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "this connection signed in as someone else; reconnect"), time.Now().Add(time.Second))
			c.close()
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
	// The common case, with nothing to wait for: the person stays where
	// the last frame went.
	if rt, ok := c.f.cfg.Directory.Lookup(c.conn); ok && !rt.Moving && rt.Epoch >= minEpoch &&
		(rt.Epoch == c.epoch || !c.olderInFlight(rt.Epoch)) {
		c.epoch = rt.Epoch
		return rt, nil
	}
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

// dropFlightLocked forgets fl, keeping the others in order; under c.mu.
func (c *wsConn) dropFlightLocked(fl *flight) {
	if i := slices.Index(c.flights, fl); i >= 0 {
		c.flights = slices.Delete(c.flights, i, i+1)
	}
	if len(c.flights) == 0 && cap(c.flights) > 8 {
		c.flights = nil // a burst's array goes with the burst
	}
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
			c.dropFlightLocked(fl)
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
	fr := fl.fr // built once; a resend stamps it again
	stamp(fr, rt)
	fl.epoch = rt.Epoch
	timeout := c.f.cfg.FrameTimeout + fl.extra
	// In flight from before it is sent: an answer that comes back at once
	// (a pull's, woken by the next op) finds the frames still out.
	c.mu.Lock()
	c.flights = append(c.flights, fl)
	c.mu.Unlock()
	// The context bounds the send alone (a worker being replaced is
	// waited for); the answer's wait costs a timer, no context. It is the
	// front's, with the frame's deadline, and costs nothing unless the send
	// waits (sendCtx). Not the socket's: a socket's context that had a
	// child once keeps the map that held it, a few hundred bytes for every
	// idle tab; a socket that closes while its frame waits to be sent
	// gives the call up once it is (below).
	fl.send = sendCtx{Context: c.f.root, deadline: time.Now().Add(timeout)}
	call, err := c.f.cfg.Dispatcher.Send(&fl.send, rt.Worker, fr)
	fl.send.release()
	if err != nil {
		c.mu.Lock()
		c.dropFlightLocked(fl)
		c.mu.Unlock()
		c.signal()
		c.send(errAnswer(fl.o.ID, frameErr(err)))
		return
	}
	c.mu.Lock()
	if c.ctx.Err() != nil {
		// The socket ended while the frame went out: nobody waits for it.
		c.dropFlightLocked(fl)
		c.mu.Unlock()
		call.Abandon()
		return
	}
	fl.call = call
	// The frame's deadline gives the call up.
	fl.timer = time.AfterFunc(timeout, func() {
		if call.Abandon() {
			c.settled(fl, nil, context.DeadlineExceeded)
		}
	})
	c.mu.Unlock()
	call.Then(func(env *protocol.Envelope, err error) {
		fl.timer.Stop()
		c.settled(fl, env, err)
	})
}

// abandonFlights gives up the calls of a socket that ended.
func (c *wsConn) abandonFlights() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fl := range c.flights {
		if fl.call != nil && fl.call.Abandon() {
			fl.timer.Stop()
		}
	}
	clear(c.flights)
	c.flights = nil
}

// settled ends a flight with its worker's answer. It runs on the channel's
// read loop: it only takes locks held briefly and queues for the writer.
func (c *wsConn) settled(fl *flight, env *protocol.Envelope, err error) {
	c.mu.Lock()
	if isMoved(err) {
		fl.moved = true
	} else {
		c.dropFlightLocked(fl)
	}
	// A pull a message woke says the message's reply follows at once:
	// the writer waits for it, and the page gets both in one write. Only
	// while another frame is in flight, whose end starts the writer.
	hold := err == nil && env.GetFrameReply().GetMore() && len(c.flights) > 0
	c.mu.Unlock()
	c.signal()
	switch {
	case isMoved(err):
		c.resendSoon()
	case err != nil:
		if c.ctx.Err() == nil {
			c.send(errAnswer(fl.o.ID, frameErr(err)))
		}
	case env.GetFrameReply() == nil:
		c.send(errAnswer(fl.o.ID, errors.New("worker answered with an unexpected envelope")))
	case hold:
		c.queueHeld(outbound{id: fl.o.ID, rep: env.GetFrameReply()})
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
	if c.closed {
		c.outMu.Unlock()
		return
	}
	if len(c.outq) >= c.f.cfg.SendQueue {
		c.outMu.Unlock()
		// Once: answers racing to this point find the socket closing.
		c.slowOnce.Do(func() {
			c.f.log.Warn("closing a WebSocket too slow to read its answers", "conn", c.conn)
			c.slow.Store(true)
			_ = c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "client too slow"),
				time.Now().Add(time.Second))
			c.close()
		})
		return
	}
	c.outq = append(c.outq, o)
	c.startWriterLocked()
	c.outMu.Unlock()
}

// queueHeld queues an answer for the writer without starting it: the
// answer that follows starts it (a pull's answer, then its message's
// reply). The queue's bound is the same.
func (c *wsConn) queueHeld(o outbound) {
	c.outMu.Lock()
	if c.closed || c.ctx.Err() != nil || len(c.outq) >= c.f.cfg.SendQueue {
		c.outMu.Unlock()
		c.queue(o) // closed, or full: queue says so
		return
	}
	c.outq = append(c.outq, o)
	c.outMu.Unlock()
}

// pingTime is the pinger's: the writer pings the page.
func (c *wsConn) pingTime() {
	c.outMu.Lock()
	c.pingDue = true
	c.startWriterLocked()
	c.outMu.Unlock()
}

// startWriterLocked starts the writer unless it runs or the socket closed.
func (c *wsConn) startWriterLocked() {
	if c.writing || c.closed {
		return
	}
	c.writing = true
	c.f.startWriter(c)
}

// writeOut writes what waits, until nothing does.
func (c *wsConn) writeOut() {
	var batch []outbound
	for {
		clear(batch)
		if cap(batch) > 64 {
			batch = nil // a burst's backing array goes with the burst
		}
		c.outMu.Lock()
		if c.closed || (len(c.outq) == 0 && !c.pingDue) {
			c.writing = false
			c.outMu.Unlock()
			return
		}
		batch, c.outq = c.outq, batch[:0]
		ping := c.pingDue
		c.pingDue = false
		renew := ping && c.f.cfg.Now().Sub(c.cookieIssued) >= c.f.cfg.CookieTTL/2
		if renew {
			c.cookieIssued = c.f.cfg.Now()
		}
		c.outMu.Unlock()
		if err := c.writeAll(batch); err != nil {
			c.writeFailed()
			return
		}
		if !ping {
			continue
		}
		if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.f.cfg.WriteTimeout)); err != nil {
			c.writeFailed()
			return
		}
		if renew {
			// The page's cookie is past half its life: the page fetches
			// a new one (POST /_stickyd/renew).
			_ = c.ws.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
			if err := c.ws.WriteMessage(websocket.TextMessage, renewNotice); err != nil {
				c.writeFailed()
				return
			}
		}
		c.pingAt.Store(time.Now().Add(c.f.cfg.PingInterval).UnixNano())
	}
}

// writeFailed ends the socket after a write failed; no writer starts again.
func (c *wsConn) writeFailed() {
	c.outMu.Lock()
	c.writing = false
	c.outMu.Unlock()
	c.close()
}

// writeAll writes the answers that wait: one frame each, or, to a page
// that reads batches, all of them as one frame (a JSON array).
func (c *wsConn) writeAll(batch []outbound) error {
	bp := bufPool.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBuf {
			bufPool.Put(bp)
		}
	}()
	together := c.batch && len(batch) > 1
	b := (*bp)[:0]
	if together {
		b = append(b, '[')
	}
	for i, o := range batch {
		if together && i > 0 {
			b = append(b, ',')
		}
		b = c.encode(b, o)
		if together {
			continue
		}
		if err := c.writeFrame(b); err != nil {
			return err
		}
		b = b[:0]
	}
	if together {
		b = append(b, ']')
		if err := c.writeFrame(b); err != nil {
			return err
		}
	}
	*bp = b
	return nil
}

// encode appends one answer to b.
func (c *wsConn) encode(b []byte, o outbound) []byte {
	switch {
	case o.raw != nil:
		return append(b, o.raw...)
	case o.a != nil:
		enc, err := json.Marshal(o.a)
		if err != nil {
			// (An answer made here always encodes.)
			c.f.log.Error("encoding answer", "error", err)
			enc, _ = json.Marshal(errAnswer(o.a.ID, err))
		}
		return append(b, enc...)
	}
	b, bad := appendReply(b, o.id, o.rep)
	if bad {
		c.f.log.Warn("a worker answered with a value that is not JSON: the page gets null", "conn", c.conn, "worker", o.rep.WorkerId)
	}
	return b
}

// writeFrame writes b as one text frame.
func (c *wsConn) writeFrame(b []byte) error {
	if !utf8.Valid(b) {
		// An app's raw bytes: a text frame must be UTF-8 (the bad bytes
		// can only be inside JSON strings, which stay strings).
		b = bytes.ToValidUTF8(b, []byte("\uFFFD"))
	}
	_ = c.ws.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, b)
}

// renewNotice tells a page its cookie is due for renewal.
var renewNotice = []byte(`{"op":"renew"}`)
