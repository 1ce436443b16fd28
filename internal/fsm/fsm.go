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
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/store"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// FSM holds the maps. Reads take the read lock and see the last applied entry.
type FSM struct {
	mu    sync.RWMutex // guards state, index and load
	state *State
	index uint64
	// load counts users per worker; derived from state, never persisted.
	load map[string]int
	// names holds one copy of each worker's name (intern).
	names map[string]string
	// changes are the people changed since a reader took them (changes.go).
	changes changes
	// maxApplyWait is the longest an entry waited for the maps' lock
	// since it was last read (MaxApplyWait).
	maxApplyWait atomic.Int64
	// gate says which entry types every server applies (SetEntryGate).
	gate entryGate
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

// State is the whole replicated state. The people and their connections
// are in shards a snapshot shares (cow.go); the rest is small, copied by a
// snapshot and written as JSON inside it (snapshot.go).
type State struct {
	// Conns maps a connection name to its person.
	Conns *connMap `json:"-"`
	// Users maps a user key to their home.
	Users *userMap `json:"-"`
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

// Conn is a connection as the maps hold it.
type Conn struct {
	// User is the key of the person it belongs to.
	User string
	// Seen is when a front last saw it (unix seconds); 0: not stamped yet
	// (seen.go).
	Seen int64
}

// User is where a person lives. The maps hold it by value and replace it
// whole: a snapshot shares it (Attrs too, which is replaced, never
// changed in place).
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
	f.changes.changedLocked(user)
	if ch := f.watch[user]; ch != nil {
		close(ch)
		delete(f.watch, user)
	}
}

// User returns what the maps know of a user.
func (f *FSM) User(user string) (placement.UserInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, ok := f.state.Users.get(user)
	if !ok {
		return placement.UserInfo{}, false
	}
	return info(user, h), true
}

// Users lists every user, unordered.
func (f *FSM) Users() []placement.UserInfo {
	f.mu.RLock()
	out := make([]placement.UserInfo, 0, f.state.Users.len()+f.state.Users.len()/64)
	f.mu.RUnlock()
	f.walkUsers(func(u string, r userRec) {
		out = append(out, info(u, r.unpack()))
	})
	return out
}

// walkUsers calls fn for every person, a chunk of a shard at a time under
// the read lock, released between chunks: a walk of everyone holds writers
// off for a thousand slots at a time (a fraction of a millisecond), never
// for the whole walk, whatever the population. What fn sees is not one
// moment's maps; the writes a walk leads to check again when applied.
func (f *FSM) walkUsers(fn func(name string, r userRec)) {
	walk(f, func(s *State) *shardMap[userRec] { return s.Users.m }, func(u string, r userRec) {
		if !r.ghost() {
			fn(u, r)
		}
	})
}

// walk calls fn for every entry of the map of the maps that m picks, a
// chunk at a time under the read lock (walkUsers).
func walk[V any](f *FSM, m func(*State) *shardMap[V], fn func(string, V)) {
	for i := range cowShards {
		for from := 0; ; {
			f.mu.RLock()
			from = m(f.state).shards[i].eachFrom(from, fn)
			f.mu.RUnlock()
			if from == 0 {
				break
			}
		}
	}
}

// UsersOf lists the users whose home is worker.
func (f *FSM) UsersOf(worker string) []string {
	var out []string
	f.walkUsers(func(u string, r userRec) {
		if r.worker == worker {
			out = append(out, u)
		}
	})
	return out
}

// UsersByWorker lists the people homed on each of workers, in one pass
// over everyone (not one for each worker).
func (f *FSM) UsersByWorker(workers map[string]bool) map[string][]string {
	out := make(map[string][]string, len(workers))
	f.walkUsers(func(u string, r userRec) {
		if workers[r.worker] {
			out[r.worker] = append(out[r.worker], u)
		}
	})
	return out
}

// UsersHomedOn lists the people whose home is one of workers, in one pass.
func (f *FSM) UsersHomedOn(workers map[string]bool) []placement.UserInfo {
	var out []placement.UserInfo
	f.walkUsers(func(u string, r userRec) {
		if workers[r.worker] {
			out = append(out, info(u, r.unpack()))
		}
	})
	return out
}

func info(user string, h User) placement.UserInfo {
	st := h.State
	if st == "" {
		st = placement.StateLive
	}
	return placement.UserInfo{User: user, Worker: h.Worker, Epoch: h.Epoch, State: st, MovingTo: h.MovingTo, Package: h.Package, Conns: h.Conns, Seen: h.Seen}
}

func newState() *State {
	users := newUserMap()
	return &State{Conns: newConnMap(users), Users: users, Agents: map[string]*AgentEntry{}}
}

// ArrivedAt returns the worker a person lives on and the epoch at which
// they arrived there (see User.Since).
func (f *FSM) ArrivedAt(user string) (worker string, since uint64, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	h, ok := f.state.Users.get(user)
	if !ok {
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
	c, ok := f.state.Conns.get(conn)
	if !ok {
		return Route{}, false
	}
	u := c.User
	h, ok := f.state.Users.get(u)
	if !ok {
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
func (f *FSM) addUserLocked(user string, h User) {
	h.Worker = f.intern(h.Worker)
	f.state.Users.put(user, h)
	f.load[h.Worker]++
}

// intern returns the one copy of a worker's name the maps keep: a million
// people on a hundred workers hold a hundred names.
func (f *FSM) intern(worker string) string {
	if w, ok := f.names[worker]; ok {
		return w
	}
	if f.names == nil || len(f.names) > 4*len(f.load)+1024 {
		// Names of workers nobody lives on any more go.
		f.names = make(map[string]string, len(f.load))
		for w := range f.load {
			f.names[w] = w
		}
	}
	f.names[worker] = worker
	return worker
}

// Counts returns the number of connections and users.
func (f *FSM) Counts() (conns, users int) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Conns.len(), f.state.Users.len()
}

// MaxApplyWait returns the longest an entry waited for the maps' lock
// since the last call, and starts again from zero.
func (f *FSM) MaxApplyWait() time.Duration {
	return time.Duration(f.maxApplyWait.Swap(0))
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
	t, buf, err := unwrap(l.Data)
	if err != nil {
		f.mu.Lock()
		f.index = l.Index
		f.mu.Unlock()
		return fmt.Errorf("%w at index %d", err, l.Index)
	}
	var decoded any
	if t == GatewayChargesRequestType || t == GatewayJobRequestType {
		if decoded, err = decodeGateway(t, buf); err != nil {
			f.mu.Lock()
			f.index = l.Index
			f.mu.Unlock()
			return err
		}
	}
	t0 := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := int64(time.Since(t0)); w > f.maxApplyWait.Load() {
		f.maxApplyWait.Store(w)
	}
	f.index = l.Index
	switch t {
	case ConnectRequestType:
		return f.applyConnect(buf)
	case ConnectBatchRequestType:
		return f.applyConnectBatch(buf)
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
	case GatewayAccessRequestType:
		return f.applyGatewayAccess(buf)
	case GatewayReserveRequestType:
		return f.applyGatewayReserve(buf)
	case GatewaySharesRequestType:
		return f.applyGatewayShares(buf)
	case GatewayCeilingsRequestType:
		return f.applyGatewayCeilings(buf)
	case TeardownRequestType:
		return f.applyTeardown(buf)
	case JobRequestType:
		return f.applyJob(buf)
	case CookieRingRequestType:
		return f.applyCookieRing(buf, l.Index)
	case RegisterAgentRequestType:
		var req AgentEntry
		if err := buf.decode(&req); err != nil {
			return fmt.Errorf("decoding agent registration: %w", err)
		}
		f.state.Agents[req.Name] = &req
		f.changes.everyoneLocked()
		return nil
	default:
		// An entry from a newer version: skipping it keeps the replica
		// running, and the newer leader will not send it to us until all
		// servers are upgraded.
		return fmt.Errorf("unknown log entry type %d at index %d", t, l.Index)
	}
}

func (f *FSM) applyConnect(buf body) interface{} {
	var req ConnectRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding connect: %w", err)
	}
	return f.connectLocked(req)
}

// connectLocked binds one connection: its Route, or the refusal.
func (f *FSM) connectLocked(req ConnectRequest) interface{} {
	user := protocol.AnonymousUser(req.Conn)
	if req.User != "" {
		user = req.User
	}
	if old, ok := f.state.Conns.get(req.Conn); ok {
		// The same write again (a retry after a lost answer) finds the
		// connection as it left it; anything else is a second connection
		// given a name already in use, which would take the first one's
		// person: refused.
		h, found := f.state.Users.get(old.User)
		anonymous := strings.HasPrefix(user, protocol.AnonymousPrefix)
		if old.User == user && found && (!anonymous || h.Worker == req.Worker || h.MovingTo == req.Worker) {
			r, _ := f.routeLocked(req.Conn)
			return r
		}
		return fmt.Errorf("binding connection %q: %w", req.Conn, ErrConnTaken)
	}
	defer f.touchLocked(user)
	f.state.Conns.put(req.Conn, Conn{User: user})
	h, ok := f.state.Users.get(user)
	if !ok {
		h = User{Worker: req.Worker, Epoch: 1}
		f.addUserLocked(user, h)
		h, _ = f.state.Users.get(user)
	}
	h.Conns++
	f.state.Users.put(user, h)
	r, _ := f.routeLocked(req.Conn)
	return r
}

func (f *FSM) applyLogin(buf body) interface{} {
	var req LoginRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding login: %w", err)
	}
	c, ok := f.state.Conns.get(req.Conn)
	if !ok {
		return fmt.Errorf("login on unknown connection %q", req.Conn)
	}
	old := c.User
	defer f.touchLocked(req.User)
	defer f.touchLocked(old)
	res := LoginResult{}
	if oh, ok := f.state.Users.get(old); ok {
		res.Previous = oh.Worker
	}
	if old != req.User {
		h, ok := f.state.Users.get(req.User)
		if !ok {
			// The person arrives for the first time: this connection's
			// worker becomes their home.
			f.addUserLocked(req.User, User{Worker: res.Previous, Epoch: 1})
			h, _ = f.state.Users.get(req.User)
		}
		h.Conns++
		f.state.Users.put(req.User, h)
		c.User = req.User
		f.state.Conns.put(req.Conn, c)
		f.unbindLocked(old)
	}
	if req.Attrs != nil {
		if h, ok := f.state.Users.get(req.User); ok {
			h.Attrs = req.Attrs
			f.state.Users.put(req.User, h)
		}
	}
	res.Route, _ = f.routeLocked(req.Conn)
	return res
}

func (f *FSM) applyForget(buf body) interface{} {
	var req ForgetConnRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding forget: %w", err)
	}
	if c, ok := f.state.Conns.get(req.Conn); ok {
		f.state.Conns.del(req.Conn)
		f.unbindLocked(c.User)
		f.touchLocked(c.User)
	}
	return nil
}

// applyMoveBegin raises the barrier: the user is moving, with a new epoch.
func (f *FSM) applyMoveBegin(buf body) interface{} {
	var req MoveBeginRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding move begin: %w", err)
	}
	return result(f.moveBeginLocked(req))
}

func (f *FSM) moveBeginLocked(req MoveBeginRequest) (placement.UserInfo, error) {
	h, ok := f.state.Users.get(req.User)
	switch {
	case !ok:
		return placement.UserInfo{}, fmt.Errorf("%w: %q", ErrNoUser, req.User)
	case h.State == placement.StateMoving:
		return placement.UserInfo{}, fmt.Errorf("%w: %q is already moving to %s", ErrBusy, req.User, h.MovingTo)
	case h.Worker != req.From:
		return placement.UserInfo{}, fmt.Errorf("%w: %q lives on %s, not %s", ErrBusy, req.User, h.Worker, req.From)
	case h.Epoch != req.Epoch:
		return placement.UserInfo{}, fmt.Errorf("%w: %q is at epoch %d, not %d", ErrBusy, req.User, h.Epoch, req.Epoch)
	}
	h.State, h.MovingTo = placement.StateMoving, f.intern(req.To)
	h.Epoch++
	f.state.Users.put(req.User, h)
	f.touchLocked(req.User)
	return info(req.User, h), nil
}

// applyMoveCommit reassigns the user to the destination, parked on Package
// (empty when the state was lost), and drops the barrier.
func (f *FSM) applyMoveCommit(buf body) interface{} {
	var req MoveCommitRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding move commit: %w", err)
	}
	return result(f.moveCommitLocked(req))
}

func (f *FSM) moveCommitLocked(req MoveCommitRequest) (placement.UserInfo, error) {
	h, ok := f.state.Users.get(req.User)
	if !ok || h.State != placement.StateMoving || h.Epoch != req.Epoch {
		return placement.UserInfo{}, fmt.Errorf("%w: no move of %q at epoch %d to commit", ErrBusy, req.User, req.Epoch)
	}
	f.load[h.Worker]--
	if f.load[h.Worker] <= 0 {
		delete(f.load, h.Worker)
	}
	// Grants the person held where they were are let go: whatever they
	// meant to commit there will not be.
	f.releaseMovedLocked(req.User, h.Worker, req.Now)
	h.Worker, h.MovingTo, h.Package, h.Since = f.intern(req.To), "", req.Package, req.Epoch
	h.State = placement.StateParked
	if req.Package == "" {
		h.State = placement.StateLive
	}
	f.state.Users.put(req.User, h)
	f.load[h.Worker]++
	f.touchLocked(req.User)
	return info(req.User, h), nil
}

// applyMoveAbort drops the barrier and leaves the user at home. The epoch
// stays raised, so frames stamped before the move are still refused.
func (f *FSM) applyMoveAbort(buf body) interface{} {
	var req MoveAbortRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding move abort: %w", err)
	}
	return result(f.moveAbortLocked(req))
}

func (f *FSM) moveAbortLocked(req MoveAbortRequest) (placement.UserInfo, error) {
	h, ok := f.state.Users.get(req.User)
	if !ok || h.State != placement.StateMoving || h.Epoch != req.Epoch {
		return placement.UserInfo{}, fmt.Errorf("%w: no move of %q at epoch %d to abort", ErrBusy, req.User, req.Epoch)
	}
	h.State, h.MovingTo = placement.StateLive, ""
	f.state.Users.put(req.User, h)
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
func (f *FSM) applyWoken(buf body) interface{} {
	var req WokenRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding woken: %w", err)
	}
	h, ok := f.state.Users.get(req.User)
	if !ok || h.State != placement.StateParked || h.Package != req.Package {
		// Already woken, or moved again since: nothing to record.
		return nil
	}
	h.State, h.Package = placement.StateLive, ""
	f.state.Users.put(req.User, h)
	f.touchLocked(req.User)
	return info(req.User, h)
}

// unbindLocked drops one connection from a user, and the user with the last.
func (f *FSM) unbindLocked(user string) {
	h, ok := f.state.Users.get(user)
	if !ok {
		return
	}
	h.Conns--
	if h.Conns <= 0 && h.State != placement.StateMoving {
		f.state.Users.del(user)
		if f.load[h.Worker]--; f.load[h.Worker] <= 0 {
			delete(f.load, h.Worker)
		}
		return
	}
	f.state.Users.put(user, h)
}
