package front

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// wsConn is one browser WebSocket. One goroutine reads (readLoop), one writes
// (writeLoop); answers travel from waiting goroutines to the writer over out.
type wsConn struct {
	f    *Front
	ws   *websocket.Conn
	conn string
	out  chan []byte
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
	once sync.Once
}

func (f *Front) serveWS(w http.ResponseWriter, r *http.Request) error {
	conn := f.connOf(r)
	if conn == "" {
		return errNoConnection
	}
	if _, ok := f.cfg.Directory.Lookup(conn); !ok {
		return errNoConnection
	}
	ws, err := f.upgrader.Upgrade(w, r, nil)
	if err != nil {
		// The upgrader already answered the client.
		return nil
	}
	ctx, cancel := context.WithCancel(f.root)
	c := &wsConn{f: f, ws: ws, conn: conn, out: make(chan []byte, f.cfg.SendQueue), ctx: ctx, stop: cancel}
	ws.SetReadLimit(f.cfg.MaxMessageBytes)
	c.wg.Add(1)
	go c.writeLoop()
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

// readLoop reads ops in order and starts each frame before reading the next,
// so the worker sees a page's ops in the order the page sent them.
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
		c.start(&o)
		if c.ctx.Err() != nil {
			return
		}
	}
}

// start sends the op's frame now and waits for its answer in the background.
func (c *wsConn) start(o *op) {
	rt, ok := c.f.cfg.Directory.Lookup(c.conn)
	if !ok {
		c.send(errAnswer(o.ID, errNoConnection))
		return
	}
	fr, extra, err := o.frame(rt)
	if err != nil {
		c.send(errAnswer(o.ID, err))
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.f.cfg.FrameTimeout+extra)
	call, err := c.f.cfg.Dispatcher.Send(ctx, rt.Worker, fr)
	if err != nil {
		cancel()
		c.send(errAnswer(o.ID, frameErr(err)))
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer cancel()
		env, err := call.Wait(ctx)
		if err != nil {
			if c.ctx.Err() != nil {
				return // the socket is gone; nobody to tell
			}
			c.send(errAnswer(o.ID, frameErr(err)))
			return
		}
		rep := env.GetFrameReply()
		if rep == nil {
			c.send(errAnswer(o.ID, errors.New("worker answered with an unexpected envelope")))
			return
		}
		c.send(toAnswer(o.ID, rep))
	}()
}

// send queues an answer for the writer. A client too slow to take its
// answers is closed (1013) rather than allowed to hold memory or block
// anyone else.
func (c *wsConn) send(a *answer) {
	b, err := json.Marshal(a)
	if err != nil {
		c.f.log.Error("encoding answer", "error", err)
		return
	}
	select {
	case c.out <- b:
	case <-c.ctx.Done():
	default:
		c.f.log.Warn("closing a WebSocket too slow to read its answers", "conn", c.conn)
		_ = c.ws.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(websocket.CloseTryAgainLater, "client too slow"),
			time.Now().Add(time.Second))
		c.close()
		_ = c.ws.Close()
	}
}

func (c *wsConn) writeLoop() {
	defer c.wg.Done()
	ping := time.NewTicker(c.f.cfg.PingInterval)
	defer ping.Stop()
	defer c.ws.Close()
	for {
		select {
		case b := <-c.out:
			_ = c.ws.SetWriteDeadline(time.Now().Add(c.f.cfg.WriteTimeout))
			if err := c.ws.WriteMessage(websocket.TextMessage, b); err != nil {
				c.close()
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.f.cfg.WriteTimeout)); err != nil {
				c.close()
				return
			}
		case <-c.ctx.Done():
			_ = c.ws.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return
		}
	}
}
