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
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/redis/go-redis/v9"
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
// peers keep it: the count its inc raises and the blob its fill sets, which
// is the page state of the benchmark's size. Seq numbers the state's
// changes, so a pull can say whether there is anything new.
type pageState struct {
	Count int    `json:"count"`
	Blob  string `json:"blob"`
	Seq   uint64 `json:"seq"`
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
// benchmark's client uses (docs/protocol.md: the ops open, msg, pull and
// close; the answers reply and error), so the same client drives it and
// stickyd.
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
type wireOp struct {
	Op    string          `json:"op"`
	ID    uint64          `json:"id"`
	Page  string          `json:"page"`
	Kind  string          `json:"kind,omitempty"`
	After uint64          `json:"after,omitempty"`
	Data  json.RawMessage `json:"data,omitempty"`
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
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value"`
}

// serveSocket answers the socket's ops in order, one at a time, until the
// socket fails or closes.
func (s *pageServer) serveSocket(ctx context.Context, ws *websocket.Conn, sid string) {
	for {
		_, msg, err := ws.ReadMessage()
		if err != nil {
			return
		}
		var o wireOp
		var a *wireAnswer
		if err := json.Unmarshal(msg, &o); err != nil {
			a = &wireAnswer{Op: "error", Error: "decoding op: " + err.Error()}
		} else if a, err = s.answer(ctx, sid, &o); err != nil {
			a = &wireAnswer{Op: "error", ID: o.ID, Error: err.Error()}
		}
		b, err := json.Marshal(a)
		if err != nil {
			return
		}
		_ = ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if err := ws.WriteMessage(websocket.TextMessage, b); err != nil {
			return
		}
	}
}

var errNotOpen = errors.New("the page is not open")

// answer runs one op on the page it names.
func (s *pageServer) answer(ctx context.Context, sid string, o *wireOp) (*wireAnswer, error) {
	if o.Page == "" || len(o.Page) > 128 {
		return nil, errors.New("an op needs a page id of 1-128 bytes")
	}
	key := "page:" + sid + ":" + o.Page
	a := &wireAnswer{Op: "reply", ID: o.ID, Worker: s.name}
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
		a.Opened = &wireOpened{Page: o.Page, Kind: o.Kind, Seq: st.Seq}
	case "msg":
		// The orthodox round trip: load the whole state, apply the
		// message, store the whole state again.
		st, err := s.store.load(ctx, key)
		if err != nil {
			return nil, err
		}
		if st == nil {
			return nil, errNotOpen
		}
		out, changed, err := apply(st, o.Data, s.name)
		if err != nil {
			return nil, err
		}
		if changed {
			st.Seq++
			if err := s.store.save(ctx, key, st); err != nil {
				return nil, err
			}
		}
		if a.Data, err = json.Marshal(out); err != nil {
			return nil, err
		}
	case "pull":
		// Whatever changed since after comes as the whole state.
		st, err := s.store.load(ctx, key)
		if err != nil {
			return nil, err
		}
		if st == nil {
			return nil, errNotOpen
		}
		a.Last = max(o.After, st.Seq)
		if st.Seq > o.After {
			blob, err := json.Marshal(st.Blob)
			if err != nil {
				return nil, err
			}
			a.Deltas = []wireDelta{
				{Seq: st.Seq, Op: "set", Path: "count", Value: json.RawMessage(fmt.Sprint(st.Count))},
				{Seq: st.Seq, Op: "set", Path: "blob", Value: blob},
			}
		}
	case "close":
		if err := s.store.remove(ctx, key); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown op %q (want open, msg, pull or close)", o.Op)
	}
	return a, nil
}

// appMessage is a message of the counter app.
type appMessage struct {
	Op    string          `json:"op"`
	Bytes int             `json:"bytes"`
	V     json.RawMessage `json:"v"`
}

// apply runs the counter app's inc, fill and echo on st, as
// plugins/examples/counter does on its page tree, and returns the answer
// and whether st changed.
func apply(st *pageState, raw json.RawMessage, worker string) (any, bool, error) {
	var m appMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, false, fmt.Errorf("decoding message: %w", err)
	}
	switch m.Op {
	case "inc":
		st.Count++
		return map[string]any{"count": st.Count, "worker": worker}, true, nil
	case "fill":
		if m.Bytes < 0 || m.Bytes > 256<<20 {
			return nil, false, errors.New("fill: bytes must be 0..256 MiB")
		}
		st.Blob = strings.Repeat("x", m.Bytes)
		return m.Bytes, true, nil
	case "echo":
		return m.V, false, nil
	default:
		return nil, false, fmt.Errorf("unknown op %q", m.Op)
	}
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
	buf.Grow(len(st.Blob) + 64)
	if err := gob.NewEncoder(&buf).Encode(st); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func (gobCodec) decode(b []byte, st *pageState) error {
	return gob.NewDecoder(bytes.NewReader(b)).Decode(st)
}
