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
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/protocol"
	"github.com/stickyd/stickyd/internal/store"
)

// FSM holds the maps. Reads take the read lock and see the last applied entry.
type FSM struct {
	mu    sync.RWMutex // guards state, index and load
	state *State
	index uint64
	// load counts users per worker; derived from state, never persisted.
	load map[string]int
	// watch holds a channel per watched user, closed when the user changes.
	watch map[string]chan struct{}
	// catalogCh is closed at the next change of the catalog.
	catalogCh chan struct{}
	// maintCh is closed at the next change of the maintenance windows.
	maintCh chan struct{}
	// gatewayCh is closed at the next submit or cancel of a gateway call;
	// jobWatch holds a channel per watched call (gateway.go).
	gatewayCh chan struct{}
	jobMu     sync.Mutex // guards jobWatch
	jobWatch  map[string]chan struct{}
	// grantWatch holds a channel per watched grant (store.go).
	grantWatch map[uint64]chan struct{}
	// ringCh is closed at the next change of the cookie key ring.
	ringCh chan struct{}
}

var _ raft.FSM = (*FSM)(nil)

// State is the whole replicated state. Its JSON form is the snapshot format.
type State struct {
	// Conns maps a connection name to its user key.
	Conns map[string]string `json:"conns"`
	// ConnSeen is when a front last saw each connection (unix seconds);
	// a connection not in it has not been stamped yet (seen.go).
	ConnSeen map[string]int64 `json:"conn_seen,omitempty"`
	// Users maps a user key to their home.
	Users map[string]*User `json:"users"`
	// Agents maps an agent's name to where its workers are reached.
	Agents map[string]*AgentEntry `json:"agents,omitempty"`
	// Catalog holds the groups, the default group and the rules.
	Catalog Catalog `json:"catalog"`
	// Tables maps a worker to the tables its pages subscribe to, sorted.
	Tables map[string][]string `json:"tables,omitempty"`
	// Store is the global store and its grants.
	Store *store.Store `json:"store,omitempty"`
	// Maintenance holds the open maintenance windows, by backend.
	Maintenance map[string]*MaintenanceEntry `json:"maintenance,omitempty"`
	// Gateway holds the AI gateway's cost counters and submitted calls.
	Gateway *GatewayState `json:"gateway,omitempty"`
	// TornDown is when a tear-down began (nil: never).
	TornDown *time.Time `json:"torn_down,omitempty"`
	// Jobs holds the operator jobs, running and the last finished ones.
	Jobs map[string]*JobRecord `json:"jobs,omitempty"`
	// CookieRing is the cluster's cookie key ring (cookiering.go).
	CookieRing *CookieRing `json:"cookie_ring,omitempty"`
}

// AgentEntry is an agent as the cluster reaches it.
type AgentEntry struct {
	Name      string `json:"name"`
	RPCAddr   string `json:"rpc_addr"`
	AdminAddr string `json:"admin_addr"`
	// Workers maps each of its worker ids to its group.
	Workers map[string]string `json:"workers"`
	// Draining marks an agent on its way down: nobody new is placed or
	// moved onto its workers while it moves its people off them.
	Draining bool `json:"draining,omitempty"`
}

// User is where a person lives.
type User struct {
	Worker string `json:"worker"`
	// Epoch grows each time the person's home changes; frames carry it.
	Epoch uint64 `json:"epoch"`
	// Since is the epoch at which the person arrived at Worker. A move
	// that rolls back raises Epoch and leaves Since: what their worker
	// kept of them at any epoch from Since on is still theirs.
	Since uint64 `json:"since,omitempty"`
	// Conns counts the connections bound to this user.
	Conns int `json:"conns"`
	// State is live, moving or parked (placement.State*); empty means live.
	State string `json:"state,omitempty"`
	// MovingTo is the destination while State is moving.
	MovingTo string `json:"moving_to,omitempty"`
	// Package is the parked package the user wakes from on Worker.
	Package string `json:"package,omitempty"`
	// Attrs are what the site declared about the person at their last
	// login; assignment rules match them.
	Attrs map[string]string `json:"attrs,omitempty"`
	// Seen is when a front last saw the person (unix seconds; 0: not
	// recorded yet), to within lifecycle.forget_after's stamp interval.
	Seen int64 `json:"seen,omitempty"`
}

// Route is where frames of a connection go.
type Route = placement.Route

// New returns an empty FSM.
func New() *FSM {
	return &FSM{state: newState(), load: map[string]int{}, watch: map[string]chan struct{}{}}
}

// Watch returns a channel closed at the next change of user (or at once if
// the maps change wholesale, as on a snapshot restore).
func (f *FSM) Watch(user string) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := f.watch[user]
	if ch == nil {
		ch = make(chan struct{})
		f.watch[user] = ch
	}
	return ch
}

// touchLocked wakes the watchers of user.
func (f *FSM) touchLocked(user string) {
	if ch := f.watch[user]; ch != nil {
		close(ch)
		delete(f.watch, user)
	}
}

// User returns what the maps know of a user.
func (f *FSM) User(user string) (placement.UserInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := f.state.Users[user]
	if h == nil {
		return placement.UserInfo{}, false
	}
	return info(user, h), true
}

// Users lists every user, unordered.
func (f *FSM) Users() []placement.UserInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]placement.UserInfo, 0, len(f.state.Users))
	for u, h := range f.state.Users {
		out = append(out, info(u, h))
	}
	return out
}

// UsersOf lists the users whose home is worker.
func (f *FSM) UsersOf(worker string) []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for u, h := range f.state.Users {
		if h.Worker == worker {
			out = append(out, u)
		}
	}
	return out
}

// UsersHomedOn lists the people whose home is one of workers, in one pass.
func (f *FSM) UsersHomedOn(workers map[string]bool) []placement.UserInfo {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []placement.UserInfo
	for u, h := range f.state.Users {
		if workers[h.Worker] {
			out = append(out, info(u, h))
		}
	}
	return out
}

func info(user string, h *User) placement.UserInfo {
	st := h.State
	if st == "" {
		st = placement.StateLive
	}
	return placement.UserInfo{User: user, Worker: h.Worker, Epoch: h.Epoch, State: st, MovingTo: h.MovingTo, Package: h.Package, Conns: h.Conns, Seen: h.Seen}
}

func newState() *State {
	return &State{Conns: map[string]string{}, Users: map[string]*User{}, Agents: map[string]*AgentEntry{}}
}

// ArrivedAt returns the worker a person lives on and the epoch at which
// they arrived there (see User.Since).
func (f *FSM) ArrivedAt(user string) (worker string, since uint64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h := f.state.Users[user]
	if h == nil {
		return "", 0, false
	}
	return h.Worker, h.Since, true
}

// AgentOf returns the agent running worker, if any agent registered it.
func (f *FSM) AgentOf(worker string) (AgentEntry, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	for _, a := range f.state.Agents {
		if _, ok := a.Workers[worker]; ok {
			return *a, true
		}
	}
	return AgentEntry{}, false
}

// Agents lists the registered agents.
func (f *FSM) Agents() []AgentEntry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]AgentEntry, 0, len(f.state.Agents))
	for _, a := range f.state.Agents {
		out = append(out, *a)
	}
	return out
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
	return Route{Conn: conn, User: u, Worker: h.Worker, Epoch: h.Epoch,
		Moving: h.State == placement.StateMoving, Package: h.Package}, true
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
	var decoded any
	if t == GatewayChargesRequestType || t == GatewayJobRequestType {
		var err error
		if decoded, err = decodeGateway(t, buf); err != nil {
			f.mu.Lock()
			f.index = l.Index
			f.mu.Unlock()
			return err
		}
	}
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
	case MoveBeginRequestType:
		return f.applyMoveBegin(buf)
	case MoveCommitRequestType:
		return f.applyMoveCommit(buf)
	case MoveAbortRequestType:
		return f.applyMoveAbort(buf)
	case ForgetConnsRequestType:
		return f.applyForgetConns(buf)
	case SeenUsersRequestType:
		return f.applySeenUsers(buf)
	case ForgetUsersRequestType:
		return f.applyForgetUsers(buf)
	case MoveBatchRequestType:
		return f.applyMoveBatch(buf)
	case WokenRequestType:
		return f.applyWoken(buf)
	case GroupPutRequestType:
		return f.applyGroupPut(buf, l.Index)
	case GroupDeleteRequestType:
		return f.applyGroupDelete(buf)
	case SetDefaultRequestType:
		return f.applySetDefault(buf)
	case RulePutRequestType:
		return f.applyRulePut(buf)
	case RuleDeleteRequestType:
		return f.applyRuleDelete(buf)
	case TableSubsRequestType:
		return f.applyTableSubs(buf)
	case StoreOpRequestType:
		return f.applyStoreOp(buf, l.Index)
	case MaintenanceRequestType:
		return f.applyMaintenance(buf)
	case GatewayChargesRequestType:
		return f.applyGatewayCharges(decoded.(*GatewayChargesRequest))
	case GatewayJobRequestType:
		return f.applyGatewayJob(decoded.(*GatewayJobRequest))
	case TeardownRequestType:
		return f.applyTeardown(buf)
	case JobRequestType:
		return f.applyJob(buf)
	case CookieRingRequestType:
		return f.applyCookieRing(buf, l.Index)
	case RegisterAgentRequestType:
		var req AgentEntry
		if err := json.Unmarshal(buf, &req); err != nil {
			return fmt.Errorf("decoding agent registration: %w", err)
		}
		f.state.Agents[req.Name] = &req
		return nil
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
	if old, ok := f.state.Conns[req.Conn]; ok {
		// The same write again (a retry after a lost answer) finds the
		// connection as it left it; anything else is a second connection
		// given a name already in use, which would take the first one's
		// person: refused.
		h := f.state.Users[old]
		anonymous := strings.HasPrefix(user, protocol.AnonymousPrefix)
		if old == user && h != nil && (!anonymous || h.Worker == req.Worker || h.MovingTo == req.Worker) {
			r, _ := f.routeLocked(req.Conn)
			return r
		}
		return fmt.Errorf("binding connection %q: %w", req.Conn, ErrConnTaken)
	}
	defer f.touchLocked(user)
	f.state.Conns[req.Conn] = user
	h := f.state.Users[user]
	if h == nil {
		h = &User{Worker: req.Worker, Epoch: 1}
		f.addUserLocked(user, h)
	}
	h.Conns++
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
	defer f.touchLocked(req.User)
	defer f.touchLocked(old)
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
	if req.Attrs != nil {
		if h := f.state.Users[req.User]; h != nil {
			h.Attrs = req.Attrs
		}
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
		delete(f.state.ConnSeen, req.Conn)
		f.unbindLocked(u)
		f.touchLocked(u)
	}
	return nil
}

// applyMoveBegin raises the barrier: the user is moving, with a new epoch.
func (f *FSM) applyMoveBegin(buf []byte) interface{} {
	var req MoveBeginRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding move begin: %w", err)
	}
	return result(f.moveBeginLocked(req))
}

func (f *FSM) moveBeginLocked(req MoveBeginRequest) (placement.UserInfo, error) {
	h := f.state.Users[req.User]
	switch {
	case h == nil:
		return placement.UserInfo{}, fmt.Errorf("%w: %q", ErrNoUser, req.User)
	case h.State == placement.StateMoving:
		return placement.UserInfo{}, fmt.Errorf("%w: %q is already moving to %s", ErrBusy, req.User, h.MovingTo)
	case h.Worker != req.From:
		return placement.UserInfo{}, fmt.Errorf("%w: %q lives on %s, not %s", ErrBusy, req.User, h.Worker, req.From)
	case h.Epoch != req.Epoch:
		return placement.UserInfo{}, fmt.Errorf("%w: %q is at epoch %d, not %d", ErrBusy, req.User, h.Epoch, req.Epoch)
	}
	h.State, h.MovingTo = placement.StateMoving, req.To
	h.Epoch++
	f.touchLocked(req.User)
	return info(req.User, h), nil
}

// applyMoveCommit reassigns the user to the destination, parked on Package
// (empty when the state was lost), and drops the barrier.
func (f *FSM) applyMoveCommit(buf []byte) interface{} {
	var req MoveCommitRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding move commit: %w", err)
	}
	return result(f.moveCommitLocked(req))
}

func (f *FSM) moveCommitLocked(req MoveCommitRequest) (placement.UserInfo, error) {
	h := f.state.Users[req.User]
	if h == nil || h.State != placement.StateMoving || h.Epoch != req.Epoch {
		return placement.UserInfo{}, fmt.Errorf("%w: no move of %q at epoch %d to commit", ErrBusy, req.User, req.Epoch)
	}
	f.load[h.Worker]--
	if f.load[h.Worker] <= 0 {
		delete(f.load, h.Worker)
	}
	// Grants the person held where they were are let go: whatever they
	// meant to commit there will not be.
	f.releaseMovedLocked(req.User, h.Worker, req.Now)
	h.Worker, h.MovingTo, h.Package, h.Since = req.To, "", req.Package, req.Epoch
	h.State = placement.StateParked
	if req.Package == "" {
		h.State = placement.StateLive
	}
	f.load[h.Worker]++
	f.touchLocked(req.User)
	return info(req.User, h), nil
}

// applyMoveAbort drops the barrier and leaves the user at home. The epoch
// stays raised, so frames stamped before the move are still refused.
func (f *FSM) applyMoveAbort(buf []byte) interface{} {
	var req MoveAbortRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding move abort: %w", err)
	}
	return result(f.moveAbortLocked(req))
}

func (f *FSM) moveAbortLocked(req MoveAbortRequest) (placement.UserInfo, error) {
	h := f.state.Users[req.User]
	if h == nil || h.State != placement.StateMoving || h.Epoch != req.Epoch {
		return placement.UserInfo{}, fmt.Errorf("%w: no move of %q at epoch %d to abort", ErrBusy, req.User, req.Epoch)
	}
	h.State, h.MovingTo = placement.StateLive, ""
	f.touchLocked(req.User)
	return info(req.User, h), nil
}

// result is what Apply returns for a one-person entry: the user's new
// placement, or the refusal.
func result(u placement.UserInfo, err error) interface{} {
	if err != nil {
		return err
	}
	return u
}

// applyWoken records that the user was woken from their package.
func (f *FSM) applyWoken(buf []byte) interface{} {
	var req WokenRequest
	if err := json.Unmarshal(buf, &req); err != nil {
		return fmt.Errorf("decoding woken: %w", err)
	}
	h := f.state.Users[req.User]
	if h == nil || h.State != placement.StateParked || h.Package != req.Package {
		// Already woken, or moved again since: nothing to record.
		return nil
	}
	h.State, h.Package = placement.StateLive, ""
	f.touchLocked(req.User)
	return info(req.User, h)
}

// unbindLocked drops one connection from a user, and the user with the last.
func (f *FSM) unbindLocked(user string) {
	h := f.state.Users[user]
	if h == nil {
		return
	}
	h.Conns--
	if h.Conns <= 0 && h.State != placement.StateMoving {
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
	if len(f.state.ConnSeen) > 0 {
		s.ConnSeen = make(map[string]int64, len(f.state.ConnSeen))
		for k, v := range f.state.ConnSeen {
			s.ConnSeen[k] = v
		}
	}
	for k, v := range f.state.Users {
		c := *v
		s.Users[k] = &c
	}
	for k, v := range f.state.Agents {
		c := *v
		s.Agents[k] = &c
	}
	s.Catalog = f.state.Catalog.clone()
	if f.state.Store != nil {
		s.Store = f.state.Store.Clone()
	}
	if len(f.state.Tables) > 0 {
		s.Tables = make(map[string][]string, len(f.state.Tables))
		for w, ts := range f.state.Tables {
			s.Tables[w] = ts // replaced whole on change, never mutated
		}
	}
	s.Gateway = cloneGateway(f.state.Gateway)
	s.CookieRing = f.state.CookieRing.clone()
	s.TornDown = f.state.TornDown // replaced, never mutated
	if len(f.state.Jobs) > 0 {
		s.Jobs = make(map[string]*JobRecord, len(f.state.Jobs))
		for id, j := range f.state.Jobs {
			c := *j
			s.Jobs[id] = &c
		}
	}
	if len(f.state.Maintenance) > 0 {
		s.Maintenance = make(map[string]*MaintenanceEntry, len(f.state.Maintenance))
		for b, e := range f.state.Maintenance {
			c := *e
			s.Maintenance[b] = &c
		}
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
	if s.Agents == nil {
		s.Agents = map[string]*AgentEntry{}
	}
	load := map[string]int{}
	for _, u := range s.Users {
		load[u.Worker]++
	}
	f.mu.Lock()
	f.state, f.load = s, load
	for u, ch := range f.watch {
		close(ch)
		delete(f.watch, u)
	}
	f.catalogChangedLocked()
	f.maintenanceChangedLocked()
	f.gatewayRestoredLocked()
	if f.ringCh != nil {
		close(f.ringCh)
		f.ringCh = nil
	}
	for id, ch := range f.grantWatch {
		close(ch)
		delete(f.grantWatch, id)
	}
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
