// Package fsm is the supervisor's replicated state machine: the maps that say
// where every person lives (connection → user → worker, with the user's
// epoch). Every change is a typed log entry applied by hashicorp/raft, so
// every server holds the same maps and the leader is their single writer.
//
// Apply is deterministic and does no IO; Snapshot is a cheap copy and the
// encoding happens in Persist. Page contents never live here: they live in
// workers and in parked packages.
package fsm

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
)

// FSM holds the maps. Reads take the read lock and see the last applied entry.
type FSM struct {
	mu    sync.RWMutex // guards state, index and load
	state *State
	index uint64
	// load counts users per worker; derived from state, never persisted.
	load map[string]int
}

var _ raft.FSM = (*FSM)(nil)

// State is the whole replicated state. Its JSON form is the snapshot format.
type State struct {
	// Conns maps a connection name to its user key.
	Conns map[string]string `json:"conns"`
	// Users maps a user key to their home.
	Users map[string]*User `json:"users"`
}

// User is where a person lives.
type User struct {
	Worker string `json:"worker"`
	// Epoch grows each time the person's home changes; frames carry it.
	Epoch uint64 `json:"epoch"`
	// Conns counts the connections bound to this user.
	Conns int `json:"conns"`
}

// Route is where frames of a connection go.
type Route = placement.Route

// New returns an empty FSM.
func New() *FSM { return &FSM{state: newState(), load: map[string]int{}} }

func newState() *State {
	return &State{Conns: map[string]string{}, Users: map[string]*User{}}
}

// Lookup returns the route of a connection from the local replica.
func (f *FSM) Lookup(conn string) (Route, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.routeLocked(conn)
}

func (f *FSM) routeLocked(conn string) (Route, bool) {
	u, ok := f.state.Conns[conn]
	if !ok {
		return Route{}, false
	}
	h := f.state.Users[u]
	if h == nil {
		return Route{}, false
	}
	return Route{Conn: conn, User: u, Worker: h.Worker, Epoch: h.Epoch}, true
}

// UsersOn counts the users whose home is each worker.
func (f *FSM) UsersOn() map[string]int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int, len(f.load))
	for w, n := range f.load {
		out[w] = n
	}
	return out
}

// addUserLocked records a new user's home.
func (f *FSM) addUserLocked(user string, h *User) {
	f.state.Users[user] = h
	f.load[h.Worker]++
}

// Counts returns the number of connections and users.
func (f *FSM) Counts() (conns, users int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.state.Conns), len(f.state.Users)
}

// Index is the raft index of the last applied entry.
func (f *FSM) Index() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// Apply applies one log entry. It returns the entry's result or an error
// value; it never panics on a bad entry.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if len(l.Data) == 0 {
		return fmt.Errorf("empty log entry at index %d", l.Index)
	}
	t, buf := MessageType(l.Data[0]), l.Data[1:]
	f.mu.Lock()
	defer f.mu.Unlock()
	f.index = l.Index
	switch t {
	case ConnectRequestType:
		return f.applyConnect(buf)
	case LoginRequestType:
		return f.applyLogin(buf)
	case ForgetConnRequestType:
		return f.applyForget(buf)
	default:
		// An entry from a newer version: skipping it keeps the replica
		// running, and the newer leader will not send it to us until all
		// servers are upgraded.
		return fmt.Errorf("unknown log entry type %d at index %d", t, l.Index)
	}
}

func (f *FSM) applyConnect(buf []byte) interface{} {
	var req ConnectRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding connect: %w", err)
	}
	user := protocol.AnonymousUser(req.Conn)
	if req.User != "" {
		user = req.User
	}
	if old, ok := f.state.Conns[req.Conn]; ok && old != user {
		f.unbindLocked(old)
	}
	if _, ok := f.state.Conns[req.Conn]; !ok || f.state.Conns[req.Conn] != user {
		f.state.Conns[req.Conn] = user
		h := f.state.Users[user]
		if h == nil {
			h = &User{Worker: req.Worker, Epoch: 1}
			f.addUserLocked(user, h)
		}
		h.Conns++
	}
	r, _ := f.routeLocked(req.Conn)
	return r
}

func (f *FSM) applyLogin(buf []byte) interface{} {
	var req LoginRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding login: %w", err)
	}
	old, ok := f.state.Conns[req.Conn]
	if !ok {
		return fmt.Errorf("login on unknown connection %q", req.Conn)
	}
	res := LoginResult{}
	if oh := f.state.Users[old]; oh != nil {
		res.Previous = oh.Worker
	}
	if old != req.User {
		h := f.state.Users[req.User]
		if h == nil {
			// The person arrives for the first time: this connection's
			// worker becomes their home.
			h = &User{Worker: res.Previous, Epoch: 1}
			f.addUserLocked(req.User, h)
		}
		h.Conns++
		f.state.Conns[req.Conn] = req.User
		f.unbindLocked(old)
	}
	res.Route, _ = f.routeLocked(req.Conn)
	return res
}

func (f *FSM) applyForget(buf []byte) interface{} {
	var req ForgetConnRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding forget: %w", err)
	}
	if u, ok := f.state.Conns[req.Conn]; ok {
		delete(f.state.Conns, req.Conn)
		f.unbindLocked(u)
	}
	return nil
}

// unbindLocked drops one connection from a user, and the user with the last.
func (f *FSM) unbindLocked(user string) {
	h := f.state.Users[user]
	if h == nil {
		return
	}
	h.Conns--
	if h.Conns <= 0 {
		delete(f.state.Users, user)
		if f.load[h.Worker]--; f.load[h.Worker] <= 0 {
			delete(f.load, h.Worker)
		}
	}
}

// Snapshot copies the maps; encoding happens in Persist, off the FSM lock.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := newState()
	for k, v := range f.state.Conns {
		s.Conns[k] = v
	}
	for k, v := range f.state.Users {
		c := *v
		s.Users[k] = &c
	}
	return &snapshot{state: s}, nil
}

// Restore replaces the maps with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s := newState()
	if err := json.NewDecoder(rc).Decode(s); err != nil {
		return fmt.Errorf("decoding snapshot: %w", err)
	}
	if s.Conns == nil {
		s.Conns = map[string]string{}
	}
	if s.Users == nil {
		s.Users = map[string]*User{}
	}
	load := map[string]int{}
	for _, u := range s.Users {
		load[u.Worker]++
	}
	f.mu.Lock()
	f.state, f.load = s, load
	f.mu.Unlock()
	return nil
}

type snapshot struct{ state *State }

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := json.NewEncoder(sink).Encode(s.state); err != nil {
		sink.Cancel()
		return fmt.Errorf("encoding snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}
