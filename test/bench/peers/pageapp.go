package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"

	"github.com/stickyd/stickyd/plugins/examples/counter"
)

// The paths and names the peers share with stickyd's front, so that one
// client drives them all: the site at /, the WebSocket at wsPath.
const (
	wsPath = "/_stickyd/ws"
	// sessionCookie is the peers' session cookie, set by GET / as a site
	// sets its own; nginx's upstream hash reads it.
	sessionCookie = "sid"
	// maxMessageBytes bounds one message from a browser, as the front's
	// default does.
	maxMessageBytes = 1 << 20
)

// pageState is the counter app's page (plugins/examples/counter) as the
// peers keep it: the count its inc raises, the blob its fill sets (the
// state part's page), and the grid its grid op sets and its edit changes
// (the live part's page). Seq is the page's newest delta: each write the
// app makes is one delta, numbered from 1, as the worker's tree does.
type pageState struct {
	Count   int       `json:"count"`
	Blob    string    `json:"blob"`
	Rows    []gridRow `json:"rows"`
	Draft   string    `json:"draft"`
	Version int       `json:"version"`
	Seq     uint64    `json:"seq"`
}

// gridRow is one row of the grid, encoded as the counter app's tree
// encodes its row (a map, whose keys JSON writes sorted): the same bytes.
type gridRow struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
	Note string `json:"note"`
	Qty  int    `json:"qty"`
}

// pageStore keeps pages by key. A page is served by one WebSocket at a
// time (as one tab is), so the state load returns is the caller's until
// it saves it.
type pageStore interface {
	// load returns the page at key, or nil if there is none.
	load(ctx context.Context, key string) (*pageState, error)
	save(ctx context.Context, key string, st *pageState) error
	remove(ctx context.Context, key string) error
}

// pageServer serves the counter app's page the way an application without
// stickyd would: one Go process (gorilla/websocket), the page's state kept
// in a pageStore. It speaks the part of the front's page protocol the
// benchmark's clients use (docs/protocol.md: the ops open, msg, pull and
// close; the answers reply and error), a pull waiting for the next delta
// included, so the same clients drive it and stickyd.
type pageServer struct {
	name     string // the worker name its answers carry
	store    pageStore
	upgrader websocket.Upgrader
}

func newPageServer(name string, store pageStore) *pageServer {
	return &pageServer{name: name, store: store, upgrader: websocket.Upgrader{ReadBufferSize: 4096, WriteBufferSize: 4096}}
}

func (s *pageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		ensureSession(w, r)
		fmt.Fprintln(w, "counter: "+s.name)
	case wsPath:
		c, err := r.Cookie(sessionCookie)
		if err != nil || c.Value == "" {
			http.Error(w, "no session: load the site first", http.StatusUnauthorized)
			return
		}
		ws, err := s.upgrader.Upgrade(w, r, nil)
		if err != nil {
			return // the upgrader has answered
		}
		defer ws.Close()
		ws.SetReadLimit(maxMessageBytes)
		s.serveSocket(r.Context(), ws, c.Value)
	default:
		http.NotFound(w, r)
	}
}

// ensureSession returns the request's session, setting a new one in a
// cookie if it has none.
func ensureSession(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" {
		return c.Value
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	sid := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: sid, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return sid
}

// wireOp is one op of a page, as the front reads it (internal/front/ops.go).
// A msg's msg_id is read and not kept: the benchmark never sends a message
// twice.
type wireOp struct {
	Op    string          `json:"op"`
	ID    uint64          `json:"id"`
	Page  string          `json:"page"`
	Kind  string          `json:"kind,omitempty"`
	After uint64          `json:"after,omitempty"`
	Wait  int64           `json:"wait,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
	MsgID string          `json:"msg_id,omitempty"`
}

// wireAnswer is the answer to an op, as the front writes it.
type wireAnswer struct {
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker,omitempty"`
	Opened *wireOpened     `json:"opened,omitempty"`
	Data   json.RawMessage `json:"data,omitempty"`
	Deltas []wireDelta     `json:"deltas,omitempty"`
	Last   uint64          `json:"last,omitempty"`
	Error  string          `json:"error,omitempty"`
}

type wireOpened struct {
	Page string `json:"page"`
	Kind string `json:"kind"`
	Seq  uint64 `json:"seq"`
}

type wireDelta struct {
	Seq   uint64          `json:"seq"`
	Op    string          `json:"op"`
	Path  string          `json:"path,omitempty"`
	Value json.RawMessage `json:"value"`
}

// maxPullWait bounds a pull's wait, as the front does.
const maxPullWait = 25 * time.Second

// serveSocket answers the socket's ops in order, one at a time, until the
// socket fails or closes. A pull with nothing to send waits on the side
// (pageSocket) while the next ops are read.
func (s *pageServer) serveSocket(ctx context.Context, ws *websocket.Conn, sid string) {
	sock := newPageSocket(ws, s.name)
	defer sock.shutdown()
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var o wireOp
		var a *wireAnswer
		if err := json.Unmarshal(msg, &o); err != nil {
			a = &wireAnswer{Op: "error", Error: "decoding op: " + err.Error()}
		} else if a, err = s.answer(ctx, sock, sid, &o); err != nil {
			a = &wireAnswer{Op: "error", ID: o.ID, Error: err.Error()}
		}
		if a == nil {
			continue // a pull left waiting
		}
		if err := sock.write(a); err != nil {
			return
		}
	}
}

var errNotOpen = errors.New("the page is not open")

// answer runs one op on the page it names. It returns nil for a pull left
// waiting: the socket answers it when a delta comes or its wait runs out.
func (s *pageServer) answer(ctx context.Context, sock *pageSocket, sid string, o *wireOp) (*wireAnswer, error) {
	if o.Page == "" || len(o.Page) > 128 {
		return nil, errors.New("an op needs a page id of 1-128 bytes")
	}
	key := "page:" + sid + ":" + o.Page
	switch o.Op {
	case "open":
		st, err := s.store.load(ctx, key)
		if err != nil {
			return nil, err
		}
		if st == nil {
			st = &pageState{}
			if err := s.store.save(ctx, key, st); err != nil {
				return nil, err
			}
		}
		sock.adopt(o.Page, st.Seq)
		return &wireAnswer{Op: "reply", ID: o.ID, Worker: s.name, Opened: &wireOpened{Page: o.Page, Kind: o.Kind, Seq: st.Seq}}, nil
	case "msg":
		return s.message(ctx, sock, key, o)
	case "pull":
		return s.pull(ctx, sock, key, o)
	case "close":
		sock.forget(o.Page)
		if err := s.store.remove(ctx, key); err != nil {
			return nil, err
		}
		return &wireAnswer{Op: "reply", ID: o.ID, Worker: s.name}, nil
	}
	return nil, fmt.Errorf("unknown op %q (want open, msg, pull or close)", o.Op)
}

// message runs a msg the orthodox way: load the whole state, apply the
// message, store the whole state again. Its deltas go to the socket (to a
// waiting pull, at once) before its reply, as stickyd sends them.
func (s *pageServer) message(ctx context.Context, sock *pageSocket, key string, o *wireOp) (*wireAnswer, error) {
	st, err := s.store.load(ctx, key)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errNotOpen
	}
	out, changes, err := apply(st, o.Data, s.name)
	if err != nil {
		return nil, err
	}
	a := &wireAnswer{Op: "reply", ID: o.ID, Worker: s.name}
	if a.Data, err = json.Marshal(out); err != nil {
		return nil, err
	}
	if len(changes) == 0 {
		return a, nil
	}
	ds, err := st.number(changes)
	if err != nil {
		return nil, err
	}
	if err := s.store.save(ctx, key, st); err != nil {
		return nil, err
	}
	if err := sock.deliver(o.Page, ds); err != nil {
		return nil, err
	}
	return a, nil
}

// pull answers with the deltas the socket holds after the pull's after, or
// leaves it waiting for the next. A reader further behind than what the
// socket holds (a page opened on another socket) gets the whole page as a
// reset delta, as the worker answers a reader whose deltas are gone.
func (s *pageServer) pull(ctx context.Context, sock *pageSocket, key string, o *wireOp) (*wireAnswer, error) {
	if o.Wait < 0 {
		return nil, errors.New("a pull's wait must not be negative")
	}
	wait := min(time.Duration(o.Wait)*time.Millisecond, maxPullWait)
	if a, known := sock.pull(o.Page, o.ID, o.After, wait); known {
		return a, nil
	}
	st, err := s.store.load(ctx, key)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, errNotOpen
	}
	sock.adopt(o.Page, st.Seq)
	if o.After >= st.Seq {
		a, _ := sock.pull(o.Page, o.ID, o.After, wait)
		return a, nil
	}
	tree, err := json.Marshal(map[string]any{"count": st.Count, "blob": st.Blob, "rows": st.Rows, "draft": st.Draft, "version": st.Version})
	if err != nil {
		return nil, err
	}
	return &wireAnswer{Op: "reply", ID: o.ID, Worker: s.name, Last: st.Seq,
		Deltas: []wireDelta{{Seq: st.Seq, Op: "reset", Value: tree}}}, nil
}

// change is one write a message made to the page: a value set at a path.
type change struct {
	path  string
	value any
}

// number makes changes the page's next deltas, a sequence number each.
func (st *pageState) number(changes []change) ([]wireDelta, error) {
	ds := make([]wireDelta, len(changes))
	for i, c := range changes {
		v, err := json.Marshal(c.value)
		if err != nil {
			return nil, fmt.Errorf("encoding %s: %w", c.path, err)
		}
		st.Seq++
		ds[i] = wireDelta{Seq: st.Seq, Op: "set", Path: c.path, Value: v}
	}
	return ds, nil
}

// appMessage is a message of the counter app.
type appMessage struct {
	Op    string          `json:"op"`
	Bytes int             `json:"bytes"`
	V     json.RawMessage `json:"v"`
}

// apply runs the counter app's inc, fill, grid, edit and echo on st, as
// plugins/examples/counter does on its page tree, and returns the answer
// and the writes it made, in order (none: st did not change).
func apply(st *pageState, raw json.RawMessage, worker string) (any, []change, error) {
	var m appMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("decoding message: %w", err)
	}
	switch m.Op {
	case "inc":
		st.Count++
		return map[string]any{"count": st.Count, "worker": worker}, []change{{"count", st.Count}}, nil
	case "fill":
		if m.Bytes < 0 || m.Bytes > 256<<20 {
			return nil, nil, errors.New("fill: bytes must be 0..256 MiB")
		}
		st.Blob = strings.Repeat("x", m.Bytes)
		return m.Bytes, []change{{"blob", st.Blob}}, nil
	case "grid":
		if m.Bytes < 0 || m.Bytes > 256<<20 {
			return nil, nil, errors.New("grid: bytes must be 0..256 MiB")
		}
		st.Rows, st.Draft, st.Version = gridRows(m.Bytes), "", 0
		return m.Bytes, []change{{"rows", st.Rows}, {"draft", ""}, {"version", 0}}, nil
	case "edit":
		return editGrid(st)
	case "echo":
		return m.V, nil, nil
	default:
		return nil, nil, fmt.Errorf("unknown op %q", m.Op)
	}
}

// gridNote is every grid row's note, as the counter app writes it.
const gridNote = "a row of the benchmark's grid, about 100 bytes"

// gridRows are the rows of a grid of about size bytes, as the counter
// app's grid op makes them.
func gridRows(size int) []gridRow {
	rows := make([]gridRow, max(1, size/counter.GridRowBytes))
	for i := range rows {
		rows[i] = gridRow{ID: i, Name: fmt.Sprintf("customer-%06d", i), Note: gridNote, Qty: i % 17}
	}
	return rows
}

// gridDraftMax is how long the draft grows before it starts again, as in
// the counter app.
const gridDraftMax = 200

// editGrid is the counter app's edit: the qty of the row the version picks,
// the draft one letter longer (empty again past gridDraftMax), the version
// one higher.
func editGrid(st *pageState) (any, []change, error) {
	if len(st.Rows) == 0 {
		return nil, nil, errors.New("edit: the page has no grid (send grid first)")
	}
	v := st.Version
	k := v % len(st.Rows)
	st.Rows[k].Qty = v
	st.Draft += "x"
	if len(st.Draft) > gridDraftMax {
		st.Draft = ""
	}
	st.Version = v + 1
	changes := []change{{"rows/" + strconv.Itoa(k) + "/qty", v}, {"draft", st.Draft}, {"version", st.Version}}
	return map[string]int{"version": st.Version}, changes, nil
}

// memStore keeps pages in this process's memory: the floor, what the same
// app costs with no hop and no store.
type memStore struct {
	mu    sync.Mutex // guards pages
	pages map[string]*pageState
}

var _ pageStore = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{pages: map[string]*pageState{}} }

func (m *memStore) load(_ context.Context, key string) (*pageState, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pages[key], nil
}

func (m *memStore) save(_ context.Context, key string, st *pageState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pages[key] = st
	return nil
}

func (m *memStore) remove(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pages, key)
	return nil
}

// redisStore keeps each page as one Redis string, encoded by a codec: the
// orthodox answer, where any process can serve any message.
type redisStore struct {
	rdb   *redis.Client
	codec codec
}

var _ pageStore = (*redisStore)(nil)

// newRedisStore connects to the Redis server at addr with at most pool
// connections, and checks that it answers.
func newRedisStore(ctx context.Context, addr string, pool int, c codec) (*redisStore, error) {
	rdb := redis.NewClient(&redis.Options{
		Addr:     addr,
		PoolSize: pool,
		// A 10 MB value queued behind others on a busy machine is slow,
		// not lost: generous timeouts, so the numbers show it.
		ReadTimeout:     time.Minute,
		WriteTimeout:    time.Minute,
		PoolTimeout:     time.Minute,
		DisableIdentity: true,
	})
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("pinging Redis at %s: %w", addr, err)
	}
	return &redisStore{rdb: rdb, codec: c}, nil
}

func (r *redisStore) load(ctx context.Context, key string) (*pageState, error) {
	b, err := r.rdb.Get(ctx, key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s: %w", key, err)
	}
	st := &pageState{}
	if err := r.codec.decode(b, st); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", key, err)
	}
	return st, nil
}

func (r *redisStore) save(ctx context.Context, key string, st *pageState) error {
	b, err := r.codec.encode(st)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", key, err)
	}
	if err := r.rdb.Set(ctx, key, b, 0).Err(); err != nil {
		return fmt.Errorf("setting %s: %w", key, err)
	}
	return nil
}

func (r *redisStore) remove(ctx context.Context, key string) error {
	if err := r.rdb.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("deleting %s: %w", key, err)
	}
	return nil
}

// codec is how the Redis app turns a page state into a Redis value.
type codec interface {
	encode(st *pageState) ([]byte, error)
	decode(b []byte, st *pageState) error
}

// codecByName is the codec called name: "json" (what session stores use
// by default) or "gob" (Go's binary encoding: a long string is copied, not
// scanned).
func codecByName(name string) (codec, error) {
	switch name {
	case "json":
		return jsonCodec{}, nil
	case "gob":
		return gobCodec{}, nil
	}
	return nil, fmt.Errorf("unknown codec %q (want json or gob)", name)
}

type jsonCodec struct{}

func (jsonCodec) encode(st *pageState) ([]byte, error) { return json.Marshal(st) }
func (jsonCodec) decode(b []byte, st *pageState) error { return json.Unmarshal(b, st) }

type gobCodec struct{}

func (gobCodec) encode(st *pageState) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(st.Blob) + len(st.Rows)*80 + 64)
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (gobCodec) decode(b []byte, st *pageState) error {
	return gob.NewDecoder(bytes.NewReader(b)).Decode(st)
}
