package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// pageName is the id of every page: each person is alone in their browser.
const pageName = "bench"

// page is one browser (its own cookie jar) with one tab: a WebSocket and an
// open counter page on it. Unlike benchkit.Page it reads its WebSocket all
// the time, in a goroutine of its own: answers are matched to their op by
// id, so ops may overlap (a pull waiting while a message goes out), and the
// front's pings are answered while the page is idle, as a browser's would be.
// call may be used from several goroutines; last belongs to one goroutine
// at a time (whoever pulls).
type page struct {
	user    string
	worker  string // the worker that answered the open; the pages are never moved
	http    *http.Client
	ws      *websocket.Conn
	timeout time.Duration // bounds each op's write and its answer (beyond a pull's wait)
	last    uint64        // the last delta sequence acknowledged

	wmu  sync.Mutex // guards next and writes to ws
	next uint64     // the last op id sent

	mu      sync.Mutex // guards waiting and err
	waiting map[uint64]chan *answer
	err     error         // why the reader stopped; set before done is closed
	done    chan struct{} // closed when the reader has stopped
}

// answer is the front's JSON answer to an op (see internal/front/ops.go).
type answer struct {
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker"`
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
	Code   string          `json:"code"`
	Last   uint64          `json:"last"`
	Opened *struct {
		Seq uint64 `json:"seq"`
	} `json:"opened"`
	Deltas []delta `json:"deltas"`
}

type delta struct {
	Seq   uint64          `json:"seq"`
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// errPageClosed is a call on a page whose WebSocket has gone.
var errPageClosed = errors.New("the page's WebSocket is closed")

// openPage loads the site at addr in a new browser (which names its
// connection and sets its cookie), logs it in as user, dials the front's
// WebSocket with that cookie and opens a counter page. If arrival is not
// nil, the load and the login happen holding it: the agent places a
// newcomer on the worker with the fewest people, and only sees the last
// one once their login is applied, so concurrent arrivals would pile onto
// the same worker.
func openPage(ctx context.Context, addr, user string, timeout time.Duration, arrival sync.Locker) (*page, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	p := &page{user: user, http: &http.Client{Jar: jar, Timeout: timeout}, timeout: timeout,
		waiting: map[uint64]chan *answer{}, done: make(chan struct{})}
	base := "http://" + addr
	if err := p.arrive(ctx, base, arrival); err != nil {
		return nil, err
	}
	u, _ := url.Parse(base)
	h := http.Header{}
	for _, c := range jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	if len(h) == 0 {
		return nil, errors.New("loading the site set no cookie")
	}
	d := websocket.Dialer{HandshakeTimeout: timeout, ReadBufferSize: 4096, WriteBufferSize: 4096}
	ws, wresp, err := d.DialContext(ctx, "ws://"+addr+"/_stickyd/ws", h)
	if err != nil {
		code := 0
		if wresp != nil {
			code = wresp.StatusCode
		}
		return nil, fmt.Errorf("dialing the WebSocket (HTTP %d): %w", code, err)
	}
	p.ws = ws
	go p.read()
	a, _, err := p.call(ctx, map[string]any{"op": "open", "kind": "counter"}, 0)
	if err != nil {
		p.abort()
		return nil, fmt.Errorf("opening the page: %w", err)
	}
	if a.Opened == nil || a.Worker == "" {
		p.abort()
		return nil, fmt.Errorf("opening the page: answer without opened or worker: %+v", a)
	}
	p.worker = a.Worker
	return p, nil
}

// arrive loads the site and logs in, holding arrival if it is not nil.
func (p *page) arrive(ctx context.Context, base string, arrival sync.Locker) error {
	if arrival != nil {
		arrival.Lock()
		defer arrival.Unlock()
	}
	if err := p.request(ctx, http.MethodGet, base+"/"); err != nil {
		return fmt.Errorf("loading the site: %w", err)
	}
	if err := p.request(ctx, http.MethodPost, base+"/login?user="+url.QueryEscape(p.user)); err != nil {
		return fmt.Errorf("logging in as %q: %w", p.user, err)
	}
	return nil
}

// request makes one plain HTTP request in the page's browser; anything but
// 200 is an error.
func (p *page) request(ctx context.Context, method, u string) error {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, body)
	}
	return nil
}

// read is the page's reader: it hands each answer to the call waiting for
// it (gorilla answers the front's pings inside ReadMessage) until the
// WebSocket fails or is closed.
func (p *page) read() {
	var err error
	defer func() {
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	for {
		var msg []byte
		if _, msg, err = p.ws.ReadMessage(); err != nil {
			return
		}
		var a answer
		if err = json.Unmarshal(msg, &a); err != nil {
			err = fmt.Errorf("decoding an answer: %w: %s", err, msg)
			return
		}
		p.mu.Lock()
		ch, ok := p.waiting[a.ID]
		delete(p.waiting, a.ID)
		p.mu.Unlock()
		if !ok {
			err = fmt.Errorf("an answer to no op in flight: %s", msg)
			return
		}
		ch <- &a // buffered: the caller may have given up
	}
}

// call sends one op and waits for its answer; an error answer is an error.
// It returns the answer and when the op was handed to the socket (just
// before the write). extra lengthens the wait for the answer (a pull's
// wait).
func (p *page) call(ctx context.Context, m map[string]any, extra time.Duration) (*answer, time.Time, error) {
	ch := make(chan *answer, 1)
	p.wmu.Lock()
	p.next++
	id := p.next
	m["id"], m["page"] = id, pageName
	b, err := json.Marshal(m)
	if err != nil {
		p.wmu.Unlock()
		return nil, time.Time{}, err
	}
	p.mu.Lock()
	p.waiting[id] = ch
	p.mu.Unlock()
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.timeout))
	sent := time.Now()
	err = p.ws.WriteMessage(websocket.TextMessage, b)
	p.wmu.Unlock()
	if err != nil {
		return nil, sent, fmt.Errorf("writing %v: %w", m["op"], err)
	}
	timer := time.NewTimer(p.timeout + extra)
	defer timer.Stop()
	select {
	case a := <-ch:
		if a.Op != "reply" || a.Error != "" {
			return a, sent, fmt.Errorf("%v refused: op %q, code %q: %s", m["op"], a.Op, a.Code, a.Error)
		}
		return a, sent, nil
	case <-p.done:
		p.mu.Lock()
		err := p.err
		p.mu.Unlock()
		return nil, sent, fmt.Errorf("waiting for the answer to %v: %w: %w", m["op"], errPageClosed, err)
	case <-timer.C:
		return nil, sent, fmt.Errorf("no answer to %v within %v", m["op"], p.timeout+extra)
	case <-ctx.Done():
		return nil, sent, fmt.Errorf("waiting for the answer to %v: %w", m["op"], ctx.Err())
	}
}

// msg sends the counter app a message and returns its answer's data and
// when it was sent.
func (p *page) msg(ctx context.Context, data map[string]any) (json.RawMessage, time.Time, error) {
	a, sent, err := p.call(ctx, map[string]any{"op": "msg", "data": data}, 0)
	if err != nil {
		return nil, sent, err
	}
	if a.Worker != p.worker {
		return nil, sent, fmt.Errorf("%v answered by %s, the page lives on %s", data["op"], a.Worker, p.worker)
	}
	return a.Data, sent, nil
}

// pull returns the page's deltas after the last acknowledged one, waiting
// up to wait for a first one, and acknowledges them.
func (p *page) pull(ctx context.Context, wait time.Duration) ([]delta, error) {
	a, _, err := p.call(ctx, map[string]any{"op": "pull", "after": p.last, "wait": wait.Milliseconds()}, wait)
	if err != nil {
		return nil, err
	}
	if a.Worker != p.worker {
		return nil, fmt.Errorf("pull answered by %s, the page lives on %s", a.Worker, p.worker)
	}
	for _, d := range a.Deltas {
		if d.Seq <= p.last {
			return nil, fmt.Errorf("pull after %d: delta %s %q numbered %d", p.last, d.Op, d.Path, d.Seq)
		}
		p.last = d.Seq
	}
	return a.Deltas, nil
}

// close closes the page on its worker, then the WebSocket with a normal
// closure, and waits for the reader.
func (p *page) close(ctx context.Context) error {
	_, _, err := p.call(ctx, map[string]any{"op": "close"}, 0)
	_ = p.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	p.abort()
	if err != nil {
		return fmt.Errorf("closing the page: %w", err)
	}
	return nil
}

// abort drops the WebSocket and the browser's idle connections and waits
// for the reader. It may be called from any goroutine, more than once.
func (p *page) abort() {
	if p.ws != nil {
		_ = p.ws.Close()
		<-p.done
	}
	p.http.CloseIdleConnections()
}
