package benchkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
)

// pageName is the id every benchmark page uses: each page is alone in its
// browser, so one name is enough.
const pageName = "bench"

// Page is one browser (its own cookie jar and HTTP client) with one tab: a
// WebSocket and an open counter page on it. A Page is used by one goroutine
// at a time, except Abort, which any goroutine may call.
type Page struct {
	http    *http.Client
	jar     http.CookieJar
	addr    string
	ws      *websocket.Conn
	timeout time.Duration // bounds each op's write and its answer
	worker  string        // the worker that answered the open
	next    uint64        // the last op id sent
	count   int           // the counter value the next inc must return, minus one
	last    uint64        // the last delta sequence acknowledged
	buf     []byte        // the inc op being built
	pullID  uint64        // the op id of the pull waiting (NotePulled), 0: none
	notes   int           // the notes sent (NotePulled)
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
	Deltas []struct {
		Seq   uint64          `json:"seq"`
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	} `json:"deltas"`
}

// incAnswer is the front's answer to an inc, decoded in one pass.
type incAnswer struct {
	Op     string `json:"op"`
	ID     uint64 `json:"id"`
	Worker string `json:"worker"`
	Error  string `json:"error"`
	Code   string `json:"code"`
	Data   struct {
		Count  *int   `json:"count"`
		Worker string `json:"worker"`
	} `json:"data"`
}

// OpenPage loads the site at addr in a new browser (which names its
// connection and sets its cookie), logs it in as user unless user is empty,
// dials the front's WebSocket with that cookie and opens a counter page.
// timeout bounds each HTTP request, the handshake, and every later op's
// write and its answer: a slow answer within it is a long round trip, past
// it an error.
func OpenPage(ctx context.Context, addr, user string, timeout time.Duration) (*Page, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	p := &Page{http: &http.Client{Jar: jar, Timeout: timeout}, timeout: timeout}
	base := "http://" + addr
	if err := p.request(ctx, http.MethodGet, base+"/"); err != nil {
		return nil, fmt.Errorf("loading the site: %w", err)
	}
	if user != "" {
		if err := p.request(ctx, http.MethodPost, base+"/login?user="+url.QueryEscape(user)); err != nil {
			return nil, fmt.Errorf("logging in as %q: %w", user, err)
		}
	}
	p.jar, p.addr = jar, addr
	if err := p.open(ctx, 0); err != nil {
		return nil, err
	}
	return p, nil
}

// open dials the front's WebSocket with the browser's cookie and opens the
// counter page, after the given delta.
func (p *Page) open(ctx context.Context, after uint64) error {
	u, _ := url.Parse("http://" + p.addr)
	h := http.Header{}
	for _, c := range p.jar.Cookies(u) {
		h.Add("Cookie", c.Name+"="+c.Value)
	}
	if len(h) == 0 {
		return errors.New("loading the site set no cookie")
	}
	d := websocket.Dialer{HandshakeTimeout: p.timeout, ReadBufferSize: 4096, WriteBufferSize: 4096}
	ws, wresp, err := d.DialContext(ctx, "ws://"+p.addr+"/_stickyd/ws", h)
	if err != nil {
		code := 0
		if wresp != nil {
			code = wresp.StatusCode
		}
		return fmt.Errorf("dialing the WebSocket (HTTP %d): %w", code, err)
	}
	p.ws = ws
	a, err := p.call(map[string]any{"op": "open", "kind": "counter", "after": after})
	if err != nil {
		p.Abort()
		return fmt.Errorf("opening the page: %w", err)
	}
	if a.Opened == nil || a.Worker == "" {
		p.Abort()
		return fmt.Errorf("opening the page: answer without opened or worker: %+v", a)
	}
	p.worker = a.Worker
	return nil
}

// Detach drops the page's WebSocket the way a tab whose laptop went to
// sleep does: no close op, so the page and its person stay where they
// live, holding no file on either side. Reattach continues the page.
func (p *Page) Detach() {
	p.Abort()
	p.ws = nil
}

// Detached says the page has no WebSocket (Detach).
func (p *Page) Detached() bool { return p.ws == nil }

// Reattach dials a new WebSocket with the browser's cookie and reopens the
// page after the last delta it acknowledged, as a tab that wakes does.
func (p *Page) Reattach(ctx context.Context) error {
	if p.ws != nil {
		return errors.New("the page is attached")
	}
	return p.open(ctx, p.last)
}

// Worker is the worker that answered the page's open: where it lives
// unless it has been moved since.
func (p *Page) Worker() string { return p.worker }

// request makes one plain HTTP request in the page's browser; anything but
// 200 is an error.
func (p *Page) request(ctx context.Context, method, u string) error {
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

// call sends one op and returns its answer; an error answer is an error.
func (p *Page) call(m map[string]any) (*answer, error) {
	p.next++
	m["id"] = p.next
	m["page"] = pageName
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.timeout))
	if err := p.ws.WriteJSON(m); err != nil {
		return nil, fmt.Errorf("writing %v: %w", m["op"], err)
	}
	_ = p.ws.SetReadDeadline(time.Now().Add(p.timeout))
	var a answer
	if err := p.ws.ReadJSON(&a); err != nil {
		return nil, fmt.Errorf("reading the answer to %v: %w", m["op"], err)
	}
	if a.ID != p.next {
		return nil, fmt.Errorf("%v: answer for op %d, want %d", m["op"], a.ID, p.next)
	}
	if a.Op != "reply" || a.Error != "" {
		return nil, fmt.Errorf("%v refused: op %q, code %q: %s", m["op"], a.Op, a.Code, a.Error)
	}
	return &a, nil
}

// Fill sets the page's state to n bytes, then pulls the resulting deltas
// and acknowledges them, so the worker keeps the state but nothing of it is
// left waiting to be sent (and none of it rides along in a move's package
// as a pending delta).
func (p *Page) Fill(n int) error {
	a, err := p.call(map[string]any{"op": "msg", "data": map[string]any{"op": "fill", "bytes": n}})
	if err != nil {
		return err
	}
	if string(a.Data) != strconv.Itoa(n) {
		return fmt.Errorf("fill %d answered %s", n, a.Data)
	}
	// The page's first pull: the counter's zero and the blob.
	a, err = p.call(map[string]any{"op": "pull", "after": 0, "wait": 0})
	if err != nil {
		return err
	}
	blob := -1
	for _, d := range a.Deltas {
		if d.Op == "set" && d.Path == "blob" {
			blob = len(d.Value) - 2 // a JSON string of n "x"
		}
	}
	if blob != n {
		return fmt.Errorf("pull after fill %d: blob delta of %d bytes in %d deltas", n, blob, len(a.Deltas))
	}
	// Acknowledge them: the worker forgets deltas at or below after.
	p.last = a.Last
	a, err = p.call(map[string]any{"op": "pull", "after": p.last, "wait": 0})
	if err != nil {
		return err
	}
	if len(a.Deltas) != 0 {
		return fmt.Errorf("acknowledging pull after %d returned %d deltas", p.last, len(a.Deltas))
	}
	return nil
}

// Inc sends one inc message, checks its answer (the right op id, no error,
// the counter one higher than the last, the front and the app agreeing on
// the worker) and returns the worker that answered, which may differ from
// Worker if the page has been moved.
func (p *Page) Inc() (string, error) {
	p.next++
	p.buf = append(p.buf[:0], `{"op":"msg","id":`...)
	p.buf = strconv.AppendUint(p.buf, p.next, 10)
	p.buf = append(p.buf, `,"page":"`+pageName+`","data":{"op":"inc"}}`...)
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.timeout))
	if err := p.ws.WriteMessage(websocket.TextMessage, p.buf); err != nil {
		return "", fmt.Errorf("writing inc %d: %w", p.next, err)
	}
	_ = p.ws.SetReadDeadline(time.Now().Add(p.timeout))
	_, msg, err := p.ws.ReadMessage()
	if err != nil {
		return "", fmt.Errorf("reading the answer to inc %d: %w", p.next, err)
	}
	var a incAnswer
	if err := json.Unmarshal(msg, &a); err != nil {
		return "", fmt.Errorf("decoding the answer to inc %d: %w: %s", p.next, err, msg)
	}
	switch {
	case a.ID != p.next:
		return "", fmt.Errorf("inc %d: answer for op %d: %s", p.next, a.ID, msg)
	case a.Op != "reply" || a.Error != "":
		return "", fmt.Errorf("inc %d refused: op %q, code %q: %s", p.next, a.Op, a.Code, a.Error)
	case a.Data.Count == nil || *a.Data.Count != p.count+1:
		return "", fmt.Errorf("inc %d: counter answered %s, want count %d (state lost or doubled?)", p.next, msg, p.count+1)
	case a.Worker == "" || a.Worker != a.Data.Worker:
		return "", fmt.Errorf("inc %d: answered by %q but the app says %q", p.next, a.Worker, a.Data.Worker)
	}
	p.count++
	return a.Worker, nil
}

// IncHome is Inc for a page that is never moved: an answer from any worker
// but Worker is an error.
func (p *Page) IncHome() error {
	w, err := p.Inc()
	if err == nil && w != p.worker {
		err = fmt.Errorf("inc %d: answered by %s, the page lives on %s", p.next, w, p.worker)
	}
	return err
}

// Ack pulls the page's deltas since the last acknowledged one, which also
// acknowledges them, as client.js keeps doing. Between two acks the page only
// incs, so every delta must set the counter; anything else (a RESET: the page
// restarted, or its worker folded its deltas into the whole tree) fails.
// It returns the worker that answered.
func (p *Page) Ack() (string, error) {
	a, err := p.call(map[string]any{"op": "pull", "after": p.last, "wait": 0})
	if err != nil {
		return "", err
	}
	for _, d := range a.Deltas {
		if d.Op != "set" || d.Path != "count" || d.Seq <= p.last {
			return "", fmt.Errorf("pull after %d: unexpected delta %s %q seq %d (%d bytes)", p.last, d.Op, d.Path, d.Seq, len(d.Value))
		}
	}
	if n := len(a.Deltas); n > 0 {
		if got := string(a.Deltas[n-1].Value); got != strconv.Itoa(p.count) {
			return "", fmt.Errorf("pull after %d: the counter's last delta is %s, want %d", p.last, got, p.count)
		}
		p.last = a.Deltas[n-1].Seq
	}
	return a.Worker, nil
}

// Close closes the page on its worker (freeing its state) and then the
// WebSocket, with a normal closure.
func (p *Page) Close() error {
	_, err := p.call(map[string]any{"op": "close"})
	_ = p.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	p.Abort()
	if err != nil {
		return fmt.Errorf("closing the page: %w", err)
	}
	return nil
}

// Abort drops the WebSocket and the browser's idle connections. It unblocks
// a read or write in progress, may be called from any goroutine and is
// safe to call more than once.
func (p *Page) Abort() {
	if p.ws != nil {
		_ = p.ws.Close()
	}
	p.http.CloseIdleConnections()
}

// Send sends the page one message of op (the counter app's ops: "inc",
// "order", ...) and returns the app's answer; a refusal is an error naming
// its code ("maintenance" for a request that waited past a window).
func (p *Page) Send(op string) (json.RawMessage, error) {
	a, err := p.call(map[string]any{"op": "msg", "data": map[string]any{"op": op}})
	if err != nil {
		return nil, err
	}
	return a.Data, nil
}

// Delivery is how one message and its deltas came back to a page that
// keeps a pull waiting, as client.js does (NotePulled).
type Delivery struct {
	// Pulls is how many pull answers it took to get the message's delta
	// (1: the waiting pull brought it).
	Pulls int
	// ReplyToDelta is how long after the message's reply its delta
	// arrived (negative: the delta came first).
	ReplyToDelta time.Duration
}

// NotePulled sends one note (a message that writes twice: the note, then
// the count of notes) while a pull waits, as client.js does, and reads
// until both the reply and the message's last delta arrived. The next
// pull is left waiting for the next call.
func (p *Page) NotePulled() (Delivery, error) {
	var d Delivery
	if p.pullID == 0 {
		if err := p.sendPull(); err != nil {
			return d, err
		}
	}
	p.next++
	incID, want := p.next, strconv.Itoa(p.notes+1)
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.timeout))
	if err := p.ws.WriteJSON(map[string]any{"op": "msg", "id": incID, "page": pageName, "data": map[string]any{"op": "note", "text": "n"}}); err != nil {
		return d, fmt.Errorf("writing note %d: %w", incID, err)
	}
	var replied, delivered time.Time
	for replied.IsZero() || delivered.IsZero() {
		_ = p.ws.SetReadDeadline(time.Now().Add(p.timeout))
		var a answer
		if err := p.ws.ReadJSON(&a); err != nil {
			return d, fmt.Errorf("reading after note %d: %w", incID, err)
		}
		if a.Op != "reply" || a.Error != "" {
			return d, fmt.Errorf("op %d refused: %q %q: %s", a.ID, a.Op, a.Code, a.Error)
		}
		switch a.ID {
		case incID:
			replied = time.Now()
			p.notes++
		case p.pullID:
			d.Pulls++
			for _, x := range a.Deltas {
				p.last = max(p.last, x.Seq)
				if x.Path == "notes" && string(x.Value) == want {
					delivered = time.Now()
				}
			}
			if err := p.sendPull(); err != nil {
				return d, err
			}
		default:
			return d, fmt.Errorf("an answer for op %d, want %d or %d", a.ID, incID, p.pullID)
		}
	}
	d.ReplyToDelta = delivered.Sub(replied)
	return d, nil
}

// sendPull leaves a pull waiting after the last delta seen.
func (p *Page) sendPull() error {
	p.next++
	p.pullID = p.next
	_ = p.ws.SetWriteDeadline(time.Now().Add(p.timeout))
	if err := p.ws.WriteJSON(map[string]any{"op": "pull", "id": p.pullID, "page": pageName, "after": p.last, "wait": 25000}); err != nil {
		return fmt.Errorf("writing a pull: %w", err)
	}
	return nil
}
