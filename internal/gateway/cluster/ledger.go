package cluster

import (
	"context"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// raftLedger keeps the cost counters in the maps. A charge is taken at
// once, in the path that returns the answer, into a pending batch that
// budgets already see; the batch reaches the log within flushEvery, as one
// entry. A charge is applied once even if its batch is sent twice.
//
// On the leader it holds the reservations of every server's calls (a
// follower sends its own, remote_reserve.go) and writes them to the log
// before their calls start, group-committed: a new leader counts the reservations of the
// calls an old one still runs until their charges settle them or they
// expire (reservations.go).
type raftLedger struct {
	srv  Server
	maps *fsm.FSM
	log  hclog.Logger
	// id names this ledger in the log (the server and this process's
	// start), and batch numbers its batches, so a batch sent again after
	// it was applied is skipped.
	id    string
	batch uint64

	mu       sync.Mutex // guards pending, inflight, their sums, held and the ceilings
	pending  []gateway.Charge
	inflight *fsm.GatewayChargesRequest // sent, not known applied
	// pendingSums and inflightSums add up pending's and inflight's
	// charges by scope (sums.go).
	pendingSums, inflightSums chargeSums
	kick                      chan struct{}
	// held are the reservations taken here and not yet settled or
	// released, by id.
	held map[string]gateway.Reservation
	// taken counts the charges taken here, applied those the log has
	// applied (in order); appliedCh is closed as applied grows.
	taken, applied uint64
	appliedCh      chan struct{}
	// remoteSeen are the charges followers sent lately, by request (one
	// sent twice counts once), swept each minute (remoteSwept).
	remoteSeen  map[string]time.Time
	remoteSwept time.Time

	// The ceilings over the reservations held here (ceilings.go), by
	// scope; the next batch of them, its writer's wake-up, whether it
	// stopped, how many batches it wrote, and the longest bound of a call
	// seen; slack is ceilSlack but in tests.
	slack       time.Duration
	ceils       map[gateway.Scope]*scopeCeil
	ceilNext    *ceilBatch
	ckick       chan struct{}
	ceilStopped bool
	ceilWrites  uint64
	bound       time.Duration

	// The reservations' road to the log (reservations.go).
	rmu       sync.Mutex // guards next, stopped and staleSent
	next      *reserveBatch
	stopped   bool
	staleGone bool
	rkick     chan struct{}

	// The road of a follower's reservations, charges and holds to the
	// leader (remote_reserve.go); post posts to the leader's admin API
	// (Gateway.postLeader).
	remoteNext *remoteBatch
	remoteKick chan struct{}
	// trips counts the batches sent, tripItems their items.
	trips, tripItems atomic.Uint64
	post             func(ctx context.Context, path string, body []byte) ([]byte, error)
}

var _ gateway.Ledger = (*raftLedger)(nil)

// follower says whether this server's calls are counted on another
// server's ledger, the leader's (remote_reserve.go).
func (l *raftLedger) follower() bool {
	rn := l.srv.Raft()
	return rn != nil && !rn.IsLeader() && l.post != nil
}

// flushEvery bounds how long a charge waits for the log; maxBatch how
// many charges one entry carries.
const (
	flushEvery = 100 * time.Millisecond
	maxBatch   = 512
)

func newRaftLedger(srv Server, maps *fsm.FSM, log hclog.Logger) *raftLedger {
	return &raftLedger{srv: srv, maps: maps, log: log, id: srv.Name() + "/" + newID(), kick: make(chan struct{}, 1),
		held: map[string]gateway.Reservation{}, slack: ceilSlack, ceils: map[gateway.Scope]*scopeCeil{}, ckick: make(chan struct{}, 1), rkick: make(chan struct{}, 1), remoteKick: make(chan struct{}, 1),
		appliedCh: make(chan struct{})}
}

// Add takes a charge; one naming a reservation settles it. On the leader
// it counts at once; elsewhere (a call that ran where it arrived) the
// answer waits until the leader's ledger has it (chargeRemote), so that
// the usage read on any server (the leader's) counts it.
func (l *raftLedger) Add(ctx context.Context, c gateway.Charge) error {
	if l.follower() {
		l.mu.Lock()
		delete(l.held, c.Reservation)
		l.mu.Unlock()
		l.chargeRemote(ctx, c)
		return nil
	}
	l.mu.Lock()
	l.addPendingLocked(c)
	delete(l.held, c.Reservation)
	full := len(l.pending) >= maxBatch
	l.mu.Unlock()
	if full {
		select {
		case l.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// chargeWait bounds how long an answer waits for its charge to reach the
// log.
const chargeWait = 5 * time.Second

// Counters are the cost counters with every charge taken here counted:
// the leader's answer is exact at once (every call runs on the leader).
func (l *raftLedger) Counters() gateway.Counters {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, applied := l.maps.GatewayCountersOf(l.id)
	for _, ch := range l.unappliedLocked(applied) {
		c.Apply(ch)
	}
	return c
}

// Sessions are the named sessions' counters with every charge taken here
// counted.
func (l *raftLedger) Sessions(names iter.Seq[string]) map[string]gateway.Tally {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, applied := l.maps.GatewaySessions(names, l.id)
	unapplied := map[string]gateway.Tally{} // a batch's worth at most
	for _, ch := range l.unappliedLocked(applied) {
		t := unapplied[ch.Session]
		t.Micros += ch.Micros
		t.Calls++
		t.Usage = t.Usage.Add(ch.Usage)
		unapplied[ch.Session] = t
	}
	if len(unapplied) == 0 {
		return out
	}
	for n := range names {
		if u, ok := unapplied[n]; ok {
			t := out[n]
			t.Micros, t.Calls, t.Usage = t.Micros+u.Micros, t.Calls+u.Calls, t.Usage.Add(u.Usage)
			out[n] = t
		}
	}
	return out
}

// TenantAccounts are the tenants' counters with every charge taken here
// counted.
func (l *raftLedger) TenantAccounts() map[string]gateway.Account {
	l.mu.Lock()
	defer l.mu.Unlock()
	accts, applied := l.maps.GatewayTenantAccounts(l.id)
	c := gateway.Counters{Tenants: accts}
	for _, ch := range l.unappliedLocked(applied) {
		if ch.Tenant != "" {
			c.Apply(ch)
		}
	}
	return c.Tenants
}

// addPendingLocked takes a charge into the next batch.
func (l *raftLedger) addPendingLocked(c gateway.Charge) {
	l.pending = append(l.pending, c)
	l.pendingSums.add(&l.pending[len(l.pending)-1], 1)
	l.taken++
}

// unappliedLocked are the charges taken here that the replica has not
// applied, given the last batch it applied.
func (l *raftLedger) unappliedLocked(applied uint64) []gateway.Charge {
	if l.inflight == nil || l.inflight.Batch <= applied {
		return l.pending
	}
	return append(slices.Clip(l.inflight.Charges), l.pending...)
}

// run sends the pending charges to the log until stop closes, then sends
// what is left.
func (l *raftLedger) run(stop <-chan struct{}) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			for l.flush(ctx) {
			}
			cancel()
			return
		case <-t.C:
		case <-l.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		for l.flush(ctx) {
		}
		cancel()
	}
}

// flush sends one batch; it reports whether it sent a full one (more may
// wait). A batch that failed is sent again as it was, under its number,
// before any new one.
func (l *raftLedger) flush(ctx context.Context) bool {
	l.mu.Lock()
	if l.inflight == nil {
		n := min(len(l.pending), maxBatch)
		if n == 0 {
			l.mu.Unlock()
			return false
		}
		l.batch++
		l.inflight = &fsm.GatewayChargesRequest{Ledger: l.id, Batch: l.batch, At: time.Now().UTC(),
			Charges: slices.Clone(l.pending[:n])}
		l.pending = l.pending[n:]
		for i := range l.inflight.Charges {
			l.pendingSums.add(&l.inflight.Charges[i], -1)
			l.inflightSums.add(&l.inflight.Charges[i], 1)
		}
	}
	req := l.inflight
	l.mu.Unlock()
	entry, err := fsm.Encode(fsm.GatewayChargesRequestType, req)
	if err == nil {
		_, err = l.srv.Apply(ctx, entry)
	}
	if err != nil {
		l.log.Warn("recording gateway charges; kept to send again", "charges", len(req.Charges), "error", err)
		return false
	}
	l.mu.Lock()
	l.inflight, l.inflightSums = nil, chargeSums{}
	l.applied += uint64(len(req.Charges))
	close(l.appliedCh)
	l.appliedCh = make(chan struct{})
	l.mu.Unlock()
	return len(req.Charges) == maxBatch
}
