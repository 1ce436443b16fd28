// Package supervisor is the single writer of the placement maps: it chooses a
// worker for a new connection, binds connections to people and people to
// workers through the raft log, and answers the front's lookups from the
// local replica. Governance (probe, balance, moves) grows here; it acts on
// workers only through the host's interfaces.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
)

// Workers is what the supervisor needs of the hosts.
type Workers interface {
	// Ready lists the workers that can take frames now.
	Ready() []string
	// GroupOf names a worker's group.
	GroupOf(worker string) string
	// Local lists the ready workers of this agent: a new connection is
	// placed on the host whose front it arrived at.
	Local() []string
}

// Mover moves people; internal/move is the one road.
type Mover interface {
	Move(ctx context.Context, user, to, reason string) (move.Result, error)
	MoveSet(ctx context.Context, reqs []move.Request, opt move.Options, done func(move.Result, error))
	Forget(ctx context.Context, users []string, done func(move.Forgotten, error))
}

// Log is the replicated log the maps are written through.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Supervisor writes and reads the maps.
type Supervisor struct {
	fsm     *fsm.FSM
	raft    Log
	workers Workers
	mover   Mover
	rr      atomic.Uint64
	// admit, if set, is asked before a new session is placed (SetAdmission).
	admit atomic.Pointer[func() error]
	log   hclog.Logger

	mu              sync.Mutex // guards fallbackDefault
	fallbackDefault string
	// connects writes new connections together (connect.go).
	connects *connectBatcher
	// placing picks newcomers' workers by the maps and the placements of
	// the burst under way (placer.go).
	placing placer
}

// ErrNoWorkers is returned when no worker is ready to take a new connection.
var ErrNoWorkers = errors.New("no worker is ready")

// New returns a supervisor over the given replica, log and workers. mover
// may be nil where no move is ever made (tests).
func New(f *fsm.FSM, log Log, workers Workers, mover Mover) *Supervisor {
	return &Supervisor{fsm: f, raft: log, workers: workers, mover: mover, connects: &connectBatcher{log: log, encode: f.EncodeEntry}}
}

// SetBatchGate sets what says whether every server of the cluster applies
// the batched entries (ConnectBatch): until it says so, each new connection
// is written alone. Without a gate they are batched.
func (s *Supervisor) SetBatchGate(together func() bool) { s.connects.together.Store(&together) }

// SetLogger sets where the supervisor reports what it does in the
// background.
func (s *Supervisor) SetLogger(l hclog.Logger) { s.log = l }

// Watch returns a channel closed at the next change of user in the maps.
func (s *Supervisor) Watch(user string) <-chan struct{} { return s.fsm.Watch(user) }

// Users lists the people in the maps, by name.
func (s *Supervisor) Users() []placement.UserInfo {
	us := s.fsm.Users()
	sort.Slice(us, func(i, j int) bool { return us[i].User < us[j].User })
	return us
}

// User returns one person.
func (s *Supervisor) User(user string) (placement.UserInfo, bool) { return s.fsm.User(user) }

// UsersHomedOn lists the people whose home is one of workers.
func (s *Supervisor) UsersHomedOn(workers map[string]bool) []placement.UserInfo {
	return s.fsm.UsersHomedOn(workers)
}

// Woken records that a person woke from their package; the package is then
// deleted from the park store by the caller.
func (s *Supervisor) Woken(ctx context.Context, user, digest string) error {
	_, err := s.apply(ctx, fsm.WokenRequestType, fsm.WokenRequest{User: user, Package: digest})
	return err
}

var (
	// ErrNoDestination is returned when no worker can take a person.
	ErrNoDestination = errors.New("no ready worker to move to")
	// ErrNoWorker is returned for a worker no host runs (neither this
	// agent's pool nor any agent the maps know of).
	ErrNoWorker = errors.New("no such worker")
)

// Move moves a person to a worker. It returns ErrNoWorker for a worker no
// host runs; a worker that exists but is not ready is the mover's refusal
// (move.ErrBadDestination).
func (s *Supervisor) Move(ctx context.Context, user, to, reason string) (move.Result, error) {
	if s.workers.GroupOf(to) == "" {
		return move.Result{User: user, To: to, Outcome: move.Failed}, fmt.Errorf("moving %q to %q: %w", user, to, ErrNoWorker)
	}
	return s.mover.Move(ctx, user, to, reason)
}

// MoveToGroup moves a person to the least loaded ready worker of group. It
// returns ErrNoGroup for a group neither the catalog nor any worker knows,
// ErrNoDestination for a known group with no other ready worker.
func (s *Supervisor) MoveToGroup(ctx context.Context, user, group, reason string) (move.Result, error) {
	u, ok := s.fsm.User(user)
	if !ok {
		return move.Result{User: user}, fmt.Errorf("moving %q: %w", user, fsm.ErrNoUser)
	}
	if !s.groupExists(group) {
		return move.Result{User: user}, fmt.Errorf("moving %q to group %q: %w", user, group, ErrNoGroup)
	}
	to, err := s.leastLoaded(func(w string) bool { return w != u.Worker && s.workers.GroupOf(w) == group })
	if err != nil {
		return move.Result{User: user}, fmt.Errorf("moving %q to group %q: %w", user, group, err)
	}
	return s.mover.Move(ctx, user, to, reason)
}

func (s *Supervisor) leastLoaded(ok func(string) bool) (string, error) {
	return s.picker()("", ok)
}

// picker chooses destinations for a set of people: each pick is the least
// loaded ready worker ok accepts, counting the people already picked for
// it (and no longer counting the person on the worker they leave), so that
// a set spreads over the workers as the moves one by one would.
func (s *Supervisor) picker() func(from string, ok func(string) bool) (string, error) {
	load := s.fsm.UsersOn()
	ready := s.workers.Ready()
	return func(from string, ok func(string) bool) (string, error) {
		best := ""
		for _, w := range ready {
			if ok(w) && (best == "" || load[w] < load[best]) {
				best = w
			}
		}
		if best == "" {
			return "", ErrNoDestination
		}
		load[best]++
		if from != "" {
			load[from]--
		}
		return best, nil
	}
}

// DrainResult sums up a drain.
type DrainResult struct {
	Worker string `json:"worker"`
	Users  int    `json:"users"`
	Moved  int    `json:"moved"`
	Failed int    `json:"failed"`
}

// Drain moves everyone off worker, parallel moves at a time, to the least
// loaded other ready workers of its group (any group if it is alone).
// progress, if not nil, is called after each move, from one goroutine at a
// time.
func (s *Supervisor) Drain(ctx context.Context, worker string, parallel int, progress func(move.Result, error)) (DrainResult, error) {
	if s.workers.GroupOf(worker) == "" {
		return DrainResult{Worker: worker}, fmt.Errorf("draining %q: %w", worker, ErrNoWorker)
	}
	users := s.fsm.UsersOf(worker)
	sort.Strings(users)
	res := DrainResult{Worker: worker, Users: len(users)}
	group := s.workers.GroupOf(worker)
	pick := s.picker()
	reqs := make([]move.Request, 0, len(users))
	for _, u := range users {
		to, err := pick(worker, func(w string) bool { return w != worker && s.workers.GroupOf(w) == group })
		if err != nil {
			to, err = pick(worker, func(w string) bool { return w != worker })
		}
		if err != nil {
			res.Failed++
			if progress != nil {
				progress(move.Result{User: u, From: worker, Outcome: move.Failed}, fmt.Errorf("moving %q: %w", u, err))
			}
			continue
		}
		reqs = append(reqs, move.Request{User: u, To: to})
	}
	s.mover.MoveSet(ctx, reqs, move.Options{Reason: "drain", Parallel: parallel}, tally(&res.Moved, &res.Failed, progress))
	return res, ctx.Err()
}

// tally counts a set's outcomes and passes each on to progress.
func tally(moved, failed *int, progress func(move.Result, error)) func(move.Result, error) {
	return func(r move.Result, err error) {
		if err == nil {
			*moved++
		} else {
			*failed++
		}
		if progress != nil {
			progress(r, err)
		}
	}
}

// lookupLag is how long Lookup gives the local replica to learn of a
// connection it does not know (see Lookup).
const lookupLag = time.Second

// Lookup returns a connection's route from the local replica. The
// connection comes from a signed cookie, so it was made by some front: one
// the replica does not know may have been made a moment ago through
// another server, whose write has not reached this replica yet. The
// replica is given lookupLag to catch up before the connection is called
// unknown (and its person given a new one), unless this server leads: the
// leader's replica has every write acknowledged.
func (s *Supervisor) Lookup(conn string) (placement.Route, bool) {
	if r, ok := s.fsm.Lookup(conn); ok {
		return r, true
	}
	if l, ok := s.raft.(interface{ IsLeader() bool }); ok && l.IsLeader() {
		return placement.Route{}, false
	}
	for deadline := time.Now().Add(lookupLag); time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		if r, ok := s.fsm.Lookup(conn); ok {
			return r, true
		}
	}
	return placement.Route{}, false
}

// Place chooses the worker for a new connection: the ready worker of the
// default group on this host (on any host, if this one has none) holding
// the fewest people, ties broken in turn. Should the default group have no
// ready worker, any ready worker takes the newcomer: a connection is never
// refused for want of its group.
func (s *Supervisor) Place(ctx context.Context) (string, error) {
	if admit := s.admit.Load(); admit != nil {
		if err := (*admit)(); err != nil {
			return "", err
		}
	}
	ready := s.placeable()
	if len(ready) == 0 {
		return "", ErrNoWorkers
	}
	return s.placing.pick(ready, s.fsm.UsersOn, int(s.rr.Add(1)), time.Now()), nil
}

// placeable lists the workers a newcomer may be placed on.
func (s *Supervisor) placeable() []string {
	def := s.DefaultGroup()
	inDefault := func(ws []string) []string {
		var out []string
		for _, w := range ws {
			if def == "" || s.workers.GroupOf(w) == def {
				out = append(out, w)
			}
		}
		return out
	}
	local, all := s.workers.Local(), s.workers.Ready()
	for _, ws := range [][]string{inDefault(local), inDefault(all), local, all} {
		if len(ws) > 0 {
			return ws
		}
	}
	return nil
}

// Connect binds a connection the site just named to its user on worker.
func (s *Supervisor) Connect(ctx context.Context, conn, user, worker string) (placement.Route, error) {
	r, err := s.connects.connect(ctx, fsm.ConnectRequest{Conn: conn, User: user, Worker: worker})
	if err != nil {
		return placement.Route{}, fmt.Errorf("binding connection %q: %w", conn, err)
	}
	if user != "" {
		s.assign(user)
	}
	return r, nil
}

// Login binds a connection to the person the site declared. It returns the
// new route and the worker that held the connection before.
//
// attrs, if not nil, replace what is recorded about the person. A person
// whose group (by the rules, else the default) is not their worker's moves
// there in the background.
func (s *Supervisor) Login(ctx context.Context, conn, user string, attrs map[string]string) (placement.Route, string, error) {
	res, err := s.apply(ctx, fsm.LoginRequestType, fsm.LoginRequest{Conn: conn, User: user, Attrs: attrs})
	if err != nil {
		return placement.Route{}, "", fmt.Errorf("logging in %q on connection %q: %w", user, conn, err)
	}
	lr := res.(fsm.LoginResult)
	s.assign(user)
	return lr.Route, lr.Previous, nil
}

// ForgetUser forgets a person at once (an operator's `user forget`): their
// connections and their place in the maps, what their worker holds of them
// and their parked package.
func (s *Supervisor) ForgetUser(ctx context.Context, user string) (move.Forgotten, error) {
	var (
		out move.Forgotten
		err error
	)
	s.mover.Forget(ctx, []string{user}, func(f move.Forgotten, e error) { out, err = f, e })
	return out, err
}

// SetAdmission makes Place ask admit first: an error refuses the new
// session (placement.ErrDiskFull while the data directory is full).
func (s *Supervisor) SetAdmission(admit func() error) { s.admit.Store(&admit) }

// maxSeen bounds the people and connections of one SeenUsers or
// ForgetConns entry.
const maxSeen = 10000

// Seen records that users and conns were seen at at, many to an entry.
func (s *Supervisor) Seen(ctx context.Context, at time.Time, users, conns []string) error {
	for len(users) > 0 || len(conns) > 0 {
		n := min(len(users), maxSeen)
		m := min(len(conns), maxSeen-n)
		req := fsm.SeenUsersRequest{At: at.Unix(), Users: users[:n], Conns: conns[:m]}
		if _, err := s.apply(ctx, fsm.SeenUsersRequestType, req); err != nil {
			return fmt.Errorf("recording %d people and %d connections as seen: %w", n, m, err)
		}
		users, conns = users[n:], conns[m:]
	}
	return nil
}

// StaleConns returns the connections of live people homed on workers not
// seen since before, each person's newest kept, and those never stamped.
func (s *Supervisor) StaleConns(workers map[string]bool, before time.Time) (stale []fsm.ForgetConn, unstamped []string) {
	return s.fsm.StaleConns(workers, before.Unix())
}

// ForgetConns removes the connections of conns not seen since before (the
// maps check again), many to an entry, and returns those removed.
func (s *Supervisor) ForgetConns(ctx context.Context, before time.Time, conns []fsm.ForgetConn) ([]fsm.ForgottenConn, error) {
	var out []fsm.ForgottenConn
	for len(conns) > 0 {
		n := min(len(conns), maxSeen)
		res, err := s.apply(ctx, fsm.ForgetConnsRequestType, fsm.ForgetConnsRequest{Before: before.Unix(), Conns: conns[:n]})
		if err != nil {
			return out, fmt.Errorf("forgetting %d connections: %w", n, err)
		}
		r, ok := res.(fsm.ForgetConnsResult)
		if !ok {
			return out, fmt.Errorf("forgetting connections: unexpected answer %T", res)
		}
		out = append(out, r.Forgotten...)
		conns = conns[n:]
	}
	return out, nil
}

// Forget removes a connection.
func (s *Supervisor) Forget(ctx context.Context, conn string) error {
	_, err := s.apply(ctx, fsm.ForgetConnRequestType, fsm.ForgetConnRequest{Conn: conn})
	return err
}

func (s *Supervisor) apply(ctx context.Context, t fsm.MessageType, body any) (any, error) {
	entry, err := s.fsm.EncodeEntry(t, body)
	if err != nil {
		return nil, err
	}
	return s.raft.Apply(ctx, entry)
}
