package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// livePage is the page id every live tab opens: each tab is alone in its
// browser.
const livePage = "live"

// pullWait is the wait of every pull a live tab sends, client.js's.
const pullWait = 25000

// liveTimeout bounds each frame a live tab waits for. It is longer than
// opTimeout: at 10MB the Redis app spends a quarter of a second of CPU on a
// message, and 50 tabs queue behind one another for a minute or more; a
// slow answer is a long round trip, not an error.
const liveTimeout = 5 * time.Minute

// liveTab is one browser tab running /_stickyd/client.js on the counter
// app's grid (internal/front/assets/client.js): one pull always
// outstanding, sent again after the newest delta as soon as its answer
// arrives, and every message carrying a msg_id of its own. Like a
// browser, it reads its socket all the time (readLoop), so it answers the
// front's pings while it waits for its turn: a front drops a socket silent
// for two ping intervals. A tab is used by one goroutine at a time, except
// abort.
type liveTab struct {
	ws      *websocket.Conn
	frames  chan frameIn  // what readLoop read, a frame at a time
	stop    chan struct{} // closed by abort: readLoop gives up sending
	stopped sync.Once
	done    chan struct{} // closed when readLoop returns
	timer   *time.Timer   // bounds each wait for a frame
	name    string        // the prefix of the tab's msg_ids
	worker  string        // the worker that answered the open
	next    uint64        // the last op id sent
	pullID  uint64        // the op id of the pull outstanding; 0: none
	msgs    int           // the messages sent, which number the msg_ids
	version int           // the grid's version after the last edit
	last    uint64        // the newest delta applied
	buf     []byte        // the edit being built
	// batching is set once the front said it reads ops sent together
	// (its hello on a socket dialed with ?batch=1): like client.js, the
	// tab then sends the ops of one turn in one frame, the pull it sends
	// again on an answer with the message sent on that answer. outbox
	// holds the ops of the turn not yet sent.
	batching bool
	outbox   [][]byte

	// framesOut and framesIn count the WebSocket frames the tab wrote and
	// read since the last resetFrames.
	framesOut, framesIn int
}

// frameIn is one frame readLoop read: its answers, or the error that ended
// the reading.
type frameIn struct {
	answers []liveAnswer
	err     error
}

// liveAnswer is an answer as a tab reads it: a reply to a msg (data), to a
// pull (deltas, last) or to an open (worker), or an error.
type liveAnswer struct {
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker"`
	Data   json.RawMessage `json:"data"`
	Deltas []liveDelta     `json:"deltas"`
	Last   uint64          `json:"last"`
	Error  string          `json:"error"`
	Code   string          `json:"code"`
	Batch  bool            `json:"batch"` // a hello's
}

type liveDelta struct {
	Seq   uint64          `json:"seq"`
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// openLiveTab loads the site at addr as a new browser, opens its WebSocket
// (with ?batch=1 if batch: the tab takes answers combined in one frame),
// opens the page and makes it a grid of size bytes, whose first deltas it
// pulls (the whole grid: not part of any measurement), and then leaves a
// pull waiting, as client.js does from then on.
func openLiveTab(ctx context.Context, hc *http.Client, addr, name string, batch bool, size int) (*liveTab, error) {
	cookie, err := loadSite(ctx, hc, addr)
	if err != nil {
		return nil, err
	}
	u := "ws://" + addr + wsPath
	if batch {
		u += "?batch=1"
	}
	ws, err := dialWSURL(ctx, u, cookie, nil)
	if err != nil {
		return nil, err
	}
	// A close from the server is reported with its code and reason, not
	// with the error of answering it (the default handler writes back).
	ws.SetCloseHandler(func(int, string) error { return nil })
	t := &liveTab{ws: ws, name: name, frames: make(chan frameIn, 16), stop: make(chan struct{}), done: make(chan struct{}),
		timer: time.NewTimer(liveTimeout)}
	go t.readLoop()
	if err := t.start(size); err != nil {
		t.abort()
		return nil, err
	}
	return t, nil
}

// start opens the page, sends the grid and pulls its deltas.
func (t *liveTab) start(size int) error {
	a, err := t.call(`{"op":"open","id":%d,"page":"` + livePage + `","kind":"counter","after":0}`)
	if err != nil {
		return fmt.Errorf("opening the page: %w", err)
	}
	if a.Worker == "" {
		return errors.New("opening the page: the answer names no worker")
	}
	t.worker = a.Worker
	t.msgs++
	a, err = t.call(`{"op":"msg","id":%d,"page":"` + livePage + `","msg_id":"` + t.msgID() + `","data":{"op":"grid","bytes":` + strconv.Itoa(size) + `}}`)
	if err != nil {
		return fmt.Errorf("sending the grid: %w", err)
	}
	if string(a.Data) != strconv.Itoa(size) {
		return fmt.Errorf("grid %d answered %s", size, a.Data)
	}
	a, err = t.call(`{"op":"pull","id":%d,"page":"` + livePage + `","after":0,"wait":0}`)
	if err != nil {
		return fmt.Errorf("pulling the grid: %w", err)
	}
	rows := false
	for _, d := range a.Deltas {
		if err := t.apply(d); err != nil {
			return fmt.Errorf("pulling the grid: %w", err)
		}
		rows = rows || d.Path == "rows"
	}
	if !rows {
		return fmt.Errorf("pulling the grid: no rows among %d deltas", len(a.Deltas))
	}
	return t.sendPull()
}

// call writes op (a format with %d for its id) and reads its answer, with
// no pull outstanding: any other answer is an error.
func (t *liveTab) call(op string) (*liveAnswer, error) {
	t.next++
	if err := t.write([]byte(fmt.Sprintf(op, t.next))); err != nil {
		return nil, err
	}
	as, err := t.read()
	if err != nil {
		return nil, err
	}
	if err := refused(&as[0]); err != nil {
		return nil, err
	}
	if len(as) != 1 || as[0].ID != t.next {
		return nil, fmt.Errorf("op %d: %d answers, the first for op %d", t.next, len(as), as[0].ID)
	}
	return &as[0], nil
}

// edit sends one edit and reads until both its reply (the version one
// higher) and the pull answer carrying its version delta have arrived,
// sending the next pull after every pull answer. It is one round trip of
// the live part.
func (t *liveTab) edit() error {
	t.next++
	t.msgs++
	id, want := t.next, t.version+1
	t.buf = append(t.buf[:0], `{"op":"msg","id":`...)
	t.buf = strconv.AppendUint(t.buf, id, 10)
	t.buf = append(t.buf, `,"page":"`+livePage+`","msg_id":"`...)
	t.buf = append(t.buf, t.name...)
	t.buf = append(t.buf, '-')
	t.buf = strconv.AppendInt(t.buf, int64(t.msgs), 10)
	t.buf = append(t.buf, `","data":{"op":"edit"}}`...)
	if err := t.send(t.buf); err != nil {
		return err
	}
	replied, delivered := false, false
	for !replied || !delivered {
		// The turn ends here: a pull sent again on an answer that did not
		// finish the edit (its deltas came in two answers) leaves now.
		if err := t.flush(); err != nil {
			return err
		}
		as, err := t.read()
		if err != nil {
			return fmt.Errorf("waiting for edit %d: %w", want, err)
		}
		for i := range as {
			a := &as[i]
			if err := refused(a); err != nil {
				return fmt.Errorf("edit %d: op %d: %w", want, a.ID, err)
			}
			switch a.ID {
			case id:
				if err := checkVersion(a.Data, want); err != nil {
					return err
				}
				replied = true
			case t.pullID:
				seen, err := t.pulled(a, want)
				if err != nil {
					return fmt.Errorf("edit %d: %w", want, err)
				}
				delivered = delivered || seen
			default:
				return fmt.Errorf("edit %d: an answer for op %d, want %d or the pull %d", want, a.ID, id, t.pullID)
			}
		}
	}
	t.version = want
	return nil
}

// pulled applies a pull answer and sends the next pull at once; it says
// whether the answer carried the version want.
func (t *liveTab) pulled(a *liveAnswer, want int) (bool, error) {
	seen := false
	for _, d := range a.Deltas {
		if err := t.apply(d); err != nil {
			return false, err
		}
		if d.Path != "version" {
			continue
		}
		v, err := strconv.Atoi(string(d.Value))
		switch {
		case err != nil:
			return false, fmt.Errorf("a version delta of %s", d.Value)
		case v > want:
			return false, fmt.Errorf("a version delta of %d before the reply of %d", v, want)
		}
		seen = seen || v == want
	}
	return seen, t.sendPull()
}

// apply takes one delta: it must be the next in sequence, so a lost delta
// fails the run, and a set (a reset means the tab's copy was replaced,
// which a live tab that never falls behind must not see).
func (t *liveTab) apply(d liveDelta) error {
	if d.Seq != t.last+1 {
		return fmt.Errorf("delta %d (%s %q) after %d: deltas lost or repeated", d.Seq, d.Op, d.Path, t.last)
	}
	if d.Op != "set" {
		return fmt.Errorf("delta %d is a %s of %q, want a set", d.Seq, d.Op, d.Path)
	}
	t.last = d.Seq
	return nil
}

// sendPull leaves a pull waiting after the newest delta, as client.js does.
func (t *liveTab) sendPull() error {
	t.next++
	t.pullID = t.next
	b := fmt.Appendf(nil, `{"op":"pull","id":%d,"page":"%s","after":%d,"wait":%d}`, t.pullID, livePage, t.last, pullWait)
	if t.batching {
		// Sent at the end of the turn, with the message that follows.
		t.outbox = append(t.outbox, b)
		return nil
	}
	return t.write(b)
}

// send sends op with the ops of the turn still held, in one frame (a JSON
// array when there are several), as client.js does at the end of a turn.
func (t *liveTab) send(op []byte) error {
	if len(t.outbox) == 0 {
		return t.write(op)
	}
	b := append([]byte{'['}, bytes.Join(append(t.outbox, op), []byte{','})...)
	t.outbox = t.outbox[:0]
	return t.write(append(b, ']'))
}

// flush sends the ops of the turn still held.
func (t *liveTab) flush() error {
	if len(t.outbox) == 0 {
		return nil
	}
	op := t.outbox[len(t.outbox)-1]
	t.outbox = t.outbox[:len(t.outbox)-1]
	return t.send(op)
}

// close closes the page, reading past the answer to the waiting pull, and
// the WebSocket with a normal closure, and waits for its reading to end.
func (t *liveTab) close() error {
	defer func() {
		t.abort()
		<-t.done
	}()
	if err := t.flush(); err != nil {
		return err
	}
	t.next++
	id := t.next
	if err := t.write(fmt.Appendf(nil, `{"op":"close","id":%d,"page":"%s"}`, id, livePage)); err != nil {
		return err
	}
	for {
		as, err := t.read()
		if err != nil {
			return fmt.Errorf("closing the page: %w", err)
		}
		for i := range as {
			if as[i].ID == id {
				_ = t.ws.WriteControl(websocket.CloseMessage,
					websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
				return refused(&as[i])
			}
		}
	}
}

// abort drops the WebSocket, which ends readLoop; it unblocks a read or
// write in progress and may be called from any goroutine, more than once.
func (t *liveTab) abort() {
	t.stopped.Do(func() { close(t.stop) })
	_ = t.ws.Close()
}

// msgID is the msg_id of the tab's newest message.
func (t *liveTab) msgID() string { return t.name + "-" + strconv.Itoa(t.msgs) }

// resetFrames starts counting frames again.
func (t *liveTab) resetFrames() { t.framesOut, t.framesIn = 0, 0 }

// write sends one frame.
func (t *liveTab) write(b []byte) error {
	_ = t.ws.SetWriteDeadline(time.Now().Add(liveTimeout))
	if err := t.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		return fmt.Errorf("writing %.60s: %w", b, err)
	}
	t.framesOut++
	return nil
}

// read waits for the next frame that carries answers: one answer, or
// several combined in a JSON array (a socket dialed with ?batch=1 may get
// a pull's answer and a reply in one frame), in the order they were
// written. Notices (a front's hello, a cookie's renew) are passed over, as
// client.js passes them, but counted as frames.
func (t *liveTab) read() ([]liveAnswer, error) {
	for {
		t.timer.Reset(liveTimeout)
		var f frameIn
		select {
		case f = <-t.frames:
		case <-t.timer.C:
			return nil, fmt.Errorf("no answer within %v", liveTimeout)
		}
		t.timer.Stop()
		if f.err != nil {
			return nil, f.err
		}
		t.framesIn++
		for _, a := range f.answers {
			if a.ID == 0 && a.Op == "hello" {
				t.batching = a.Batch
			}
		}
		if as := slices.DeleteFunc(f.answers, isNotice); len(as) > 0 {
			return as, nil
		}
	}
}

// isNotice says whether a is a notice of the front's rather than an answer.
func isNotice(a liveAnswer) bool { return a.ID == 0 && (a.Op == "hello" || a.Op == "renew") }

// readLoop reads the socket until it fails or closes, handing each frame's
// answers to read. Reading is what answers pings (gorilla's handler).
func (t *liveTab) readLoop() {
	defer close(t.done)
	for {
		_, msg, err := t.ws.ReadMessage()
		f := frameIn{err: err}
		if err != nil {
			f.err = fmt.Errorf("reading: %w", err)
		} else {
			f.answers, f.err = decodeFrame(msg)
		}
		select {
		case t.frames <- f:
		case <-t.stop:
			return
		}
		if f.err != nil {
			return
		}
	}
}

// decodeFrame decodes a frame: one answer, or a JSON array of them.
func decodeFrame(msg []byte) ([]liveAnswer, error) {
	if b := bytes.TrimLeft(msg, " \t\r\n"); len(b) > 0 && b[0] == '[' {
		var as []liveAnswer
		if err := json.Unmarshal(b, &as); err != nil {
			return nil, fmt.Errorf("decoding combined answers: %w: %.200s", err, msg)
		}
		return as, nil
	}
	as := make([]liveAnswer, 1)
	if err := json.Unmarshal(msg, &as[0]); err != nil {
		return nil, fmt.Errorf("decoding an answer: %w: %.200s", err, msg)
	}
	return as, nil
}

// refused is the error an answer carries, if any.
func refused(a *liveAnswer) error {
	if a.Op != "reply" || a.Error != "" {
		return fmt.Errorf("refused: op %q, code %q: %s", a.Op, a.Code, a.Error)
	}
	return nil
}

// checkVersion checks an edit's reply: {"version": want}.
func checkVersion(data json.RawMessage, want int) error {
	var r struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.Version == nil || *r.Version != want {
		return fmt.Errorf("edit %d answered %s (state lost or doubled?)", want, data)
	}
	return nil
}
