package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
)

// opTimeout bounds one op's write and its answer, a page load and a
// WebSocket handshake.
const opTimeout = 60 * time.Second

// newSiteClient is the HTTP client browsers load the site with: no cookie
// jar (each load is a new browser, whose cookies loadSite returns) and
// keep-alive, so thousands of loads need not each open a connection.
func newSiteClient() *http.Client {
	return &http.Client{
		Timeout:   opTimeout,
		Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute},
	}
}

// loadSite loads the site at addr as a new browser (GET /) and returns the
// Cookie header that browser sends from then on.
func loadSite(ctx context.Context, hc *http.Client, addr string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
	if err != nil {
		return "", err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("loading the site: %w", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("loading the site: HTTP %d", resp.StatusCode)
	}
	var parts []string
	for _, c := range resp.Cookies() {
		parts = append(parts, c.Name+"="+c.Value)
	}
	if len(parts) == 0 {
		return "", fmt.Errorf("loading the site set no cookie")
	}
	return strings.Join(parts, "; "), nil
}

// dialWS opens the site's WebSocket with the browser's cookie, from local
// (nil: an address the kernel picks).
func dialWS(ctx context.Context, addr, cookie string, local net.Addr) (*websocket.Conn, error) {
	return dialWSURL(ctx, "ws://"+addr+wsPath, cookie, local)
}

// dialWSURL is dialWS to a WebSocket URL of the caller's, query included.
func dialWSURL(ctx context.Context, u, cookie string, local net.Addr) (*websocket.Conn, error) {
	nd := &net.Dialer{Timeout: opTimeout, LocalAddr: local}
	d := websocket.Dialer{NetDialContext: nd.DialContext, HandshakeTimeout: opTimeout, ReadBufferSize: 4096, WriteBufferSize: 4096}
	ws, resp, err := d.DialContext(ctx, u, http.Header{"Cookie": {cookie}})
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return nil, fmt.Errorf("dialing the WebSocket (HTTP %d): %w", code, err)
	}
	return ws, nil
}

// echoClient is one browser sending echo messages on its WebSocket, closed
// loop. It speaks the front's page protocol: the page is opened, then
// every message is the counter app's echo op, and it only needs the answer
// to carry the op's id and the payload. A plain echo server sends the op
// back as it is; stickyd answers with a reply whose data is the payload. A
// client is used by one goroutine at a time, except abort.
type echoClient struct {
	ws      *websocket.Conn
	next    uint64 // the last op id sent
	payload string // JSON-safe text
	buf     []byte
}

// echoAnswer is what the client reads of an answer: a plain echo's op and
// stickyd's reply both have these.
type echoAnswer struct {
	Op    string `json:"op"`
	ID    uint64 `json:"id"`
	Error string `json:"error"`
	Code  string `json:"code"`
}

// openEchoClient loads the site at addr as a new browser, opens its
// WebSocket and a page on it.
func openEchoClient(ctx context.Context, hc *http.Client, addr string, payload int) (*echoClient, error) {
	cookie, err := loadSite(ctx, hc, addr)
	if err != nil {
		return nil, err
	}
	ws, err := dialWS(ctx, addr, cookie, nil)
	if err != nil {
		return nil, err
	}
	c := &echoClient{ws: ws, payload: strings.Repeat("e", payload), next: 1}
	if _, err := c.call([]byte(`{"op":"open","id":1,"page":"bench","kind":"counter"}`)); err != nil {
		c.abort()
		return nil, fmt.Errorf("opening the page: %w", err)
	}
	return c, nil
}

// roundTrip sends one echo message and checks its answer.
func (c *echoClient) roundTrip() error {
	c.next++
	c.buf = append(c.buf[:0], `{"op":"msg","id":`...)
	c.buf = strconv.AppendUint(c.buf, c.next, 10)
	c.buf = append(c.buf, `,"page":"bench","data":{"op":"echo","v":"`...)
	c.buf = append(c.buf, c.payload...)
	c.buf = append(c.buf, `"}}`...)
	msg, err := c.call(c.buf)
	if err != nil {
		return err
	}
	if !bytes.Contains(msg, []byte(c.payload)) {
		return fmt.Errorf("op %d: the answer lacks the payload: %.200s", c.next, msg)
	}
	return nil
}

// call writes op (whose id is c.next) and reads its answer.
func (c *echoClient) call(op []byte) ([]byte, error) {
	_ = c.ws.SetWriteDeadline(time.Now().Add(opTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, op); err != nil {
		return nil, fmt.Errorf("writing op %d: %w", c.next, err)
	}
	_ = c.ws.SetReadDeadline(time.Now().Add(opTimeout))
	_, msg, err := c.ws.ReadMessage()
	if err != nil {
		return nil, fmt.Errorf("reading the answer to op %d: %w", c.next, err)
	}
	var a echoAnswer
	if err := json.Unmarshal(msg, &a); err != nil {
		return nil, fmt.Errorf("decoding the answer to op %d: %w: %.200s", c.next, err, msg)
	}
	if a.ID != c.next || a.Error != "" || a.Op == "error" {
		return nil, fmt.Errorf("op %d: answered %.200s", c.next, msg)
	}
	return msg, nil
}

// close closes the WebSocket with a normal closure.
func (c *echoClient) close() {
	_ = c.ws.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.abort()
}

// abort drops the WebSocket; it unblocks a read or write in progress and
// may be called from any goroutine, more than once.
func (c *echoClient) abort() { _ = c.ws.Close() }
