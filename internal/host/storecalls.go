package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/store"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The global store's calls from workers: reads from this agent's replica,
// acquires, commits and releases as raft entries (forwarded to the leader),
// an acquire answered once the grant is held. A grant is owned by one
// incarnation of a worker ("web-1#3") on behalf of a person.

// storeCall serves one store request of a worker; it may block (an acquire
// waits its turn), so it runs on its own goroutine.
func (c *WorkerCalls) storeCall(worker string, incarnation int, env *protocol.Envelope, r Replier) {
	owner := fmt.Sprintf("%s#%d", worker, incarnation)
	reply := func(body *protocol.Envelope, err error) {
		if err == nil {
			_ = r.Reply(env.Id, body)
			return
		}
		code := protocol.Error_UNAVAILABLE
		switch {
		case fsm.IsStale(err):
			code = protocol.Error_STALE_GRANT
		case errors.Is(err, store.ErrBadPath), errors.Is(err, store.ErrBadValue), errors.Is(err, store.ErrTooManyPaths),
			errors.Is(err, store.ErrValueTooLarge), errors.Is(err, store.ErrOutsideGrant), errors.Is(err, store.ErrNotObject),
			errors.Is(err, store.ErrBadLease), errors.Is(err, store.ErrTooManyWrites):
			code = protocol.Error_BAD_REQUEST
		}
		_ = r.ReplyError(env.Id, code, err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch b := env.Body.(type) {
	case *protocol.Envelope_StoreGet:
		if err := c.caughtUp(ctx, b.StoreGet.MinIndex); err != nil {
			reply(nil, err)
			return
		}
		index := c.cfg.Maps.Index()
		vals, err := c.cfg.Maps.StoreGet(b.StoreGet.Paths)
		reply(&protocol.Envelope{Body: &protocol.Envelope_StoreValues{StoreValues: &protocol.StoreValues{Values: bytesOf(vals), Index: index}}}, err)
	case *protocol.Envelope_GrantAcquire:
		g, err := c.acquire(ctx, owner, b.GrantAcquire)
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantReply{GrantReply: g}}, err)
	case *protocol.Envelope_GrantCommit:
		gc := b.GrantCommit
		err := c.ownGrant(gc.Id, owner)
		if err == nil {
			_, err = c.storeOp(ctx, fsm.StoreCommit, store.CommitOp{ID: gc.Id, Token: gc.Token, Set: rawOf(gc.Set), Delete: gc.Delete, Now: time.Now().UnixNano()})
		}
		// The write went through the leader, and this replica has it
		// (Log.Apply waits for that): its index now is one at which the
		// commit is applied.
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantCommit{GrantCommit: &protocol.GrantCommit{Index: c.cfg.Maps.Index()}}}, err)
	case *protocol.Envelope_GrantRelease:
		id := b.GrantRelease.Id
		var err error
		if c.ownGrant(id, owner) == nil {
			_, err = c.storeOp(ctx, fsm.StoreRelease, store.ReleaseOp{ID: id, Now: time.Now().UnixNano()})
			if errors.Is(err, store.ErrUnknownGrant) {
				err = nil // it ended already
			}
		}
		reply(&protocol.Envelope{Body: &protocol.Envelope_GrantRelease{GrantRelease: &protocol.GrantRelease{}}}, err)
	}
}

// replicaWait bounds a read's wait for this agent's replica to reach the
// index the worker asks for (a commit it made, or one a table change it
// received was published after).
var replicaWait = 5 * time.Second

// errReplicaBehind refuses a read this replica cannot answer fresh enough.
var errReplicaBehind = errors.New("this agent's replica of the store is behind the index the read needs")

// caughtUp waits until this agent's replica has applied the log up to
// index (0: no wait), polling, at most replicaWait.
func (c *WorkerCalls) caughtUp(ctx context.Context, index uint64) error {
	if index == 0 || c.cfg.Maps.Index() >= index {
		return nil
	}
	deadline := time.Now().Add(replicaWait)
	for c.cfg.Maps.Index() < index {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%w (%d, applied %d)", errReplicaBehind, index, c.cfg.Maps.Index())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// ownGrant checks that grant id belongs to owner: a worker commits or
// releases only its own grants (a grant that ended is stale).
func (c *WorkerCalls) ownGrant(id uint64, owner string) error {
	g, ok := c.cfg.Maps.Grant(id)
	if !ok {
		return fmt.Errorf("grant %d: %w", id, store.ErrStaleGrant)
	}
	if g.Owner.Worker != owner {
		return fmt.Errorf("grant %d belongs to %s, not %s: %w", id, g.Owner.Worker, owner, store.ErrStaleGrant)
	}
	return nil
}

// acquire asks for a grant and waits until it is held, it ends, or the
// request's wait runs out (the request is then withdrawn).
func (c *WorkerCalls) acquire(ctx context.Context, owner string, req *protocol.GrantAcquire) (*protocol.GrantReply, error) {
	lease := time.Duration(req.LeaseMs) * time.Millisecond
	res, err := c.storeOp(ctx, fsm.StoreAcquire, store.AcquireOp{Owner: store.Owner{Worker: owner, User: req.User},
		Paths: req.Paths, Lease: lease, Now: time.Now().UnixNano()})
	if err != nil {
		return nil, err
	}
	wait := time.Duration(req.WaitMs) * time.Millisecond
	if wait <= 0 || wait > 10*time.Minute {
		wait = 30 * time.Second
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		changed := c.cfg.Maps.WatchGrant(res.ID)
		g, ok := c.cfg.Maps.Grant(res.ID)
		switch {
		case !ok:
			return nil, fmt.Errorf("grant %d ended before it was held (its worker or person left)", res.ID)
		case g.State == store.StateHeld:
			return &protocol.GrantReply{Id: g.ID, Token: g.Token, Values: bytesOf(g.Content), LeaseMs: g.Lease.Milliseconds()}, nil
		}
		select {
		case <-changed:
		case <-timeout.C:
			rctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_, _ = c.storeOp(rctx, fsm.StoreRelease, store.ReleaseOp{ID: res.ID, Now: time.Now().UnixNano()})
			cancel()
			if g, ok := c.cfg.Maps.Grant(res.ID); ok && g.State == store.StateHeld {
				// Granted just as the wait ran out: released again above.
				return nil, fmt.Errorf("no grant on %v within %v (granted too late; given back)", req.Paths, wait)
			}
			return nil, fmt.Errorf("no grant on %v within %v: earlier requests still hold or wait for those paths", req.Paths, wait)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// storeOp applies one store operation through the leader.
func (c *WorkerCalls) storeOp(ctx context.Context, kind string, op any) (fsm.StoreResult, error) {
	entry, err := fsm.EncodeStoreOp(kind, op)
	if err != nil {
		return fsm.StoreResult{}, err
	}
	v, err := c.cfg.Log.Apply(ctx, entry)
	if err != nil {
		return fsm.StoreResult{}, err
	}
	res, _ := v.(fsm.StoreResult)
	return res, nil
}

// releaseWorker ends the grants of a worker's ended incarnation.
func (c *WorkerCalls) releaseWorker(worker string, incarnation int) {
	owner := fmt.Sprintf("%s#%d", worker, incarnation)
	if len(c.cfg.Maps.GrantsOf(owner)) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.storeOp(ctx, fsm.StoreReleaseWorker, store.ReleaseWorkerOp{Worker: owner, Now: time.Now().UnixNano()}); err != nil {
		c.log.Error("releasing the grants of an ended worker", "worker", owner, "error", err)
	}
}

// ExpireGrants has the leader end the grants whose lease ran out, until
// stop: a leader task. The expiries run on the queue, one at a time.
func (c *WorkerCalls) ExpireGrants(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	pending := false
	done := make(chan struct{}, 1)
	for {
		select {
		case <-stop:
			return
		case <-done:
			pending = false
		case <-t.C:
			next := c.cfg.Maps.NextExpiry()
			if pending || next == 0 || time.Now().UnixNano() < next {
				continue
			}
			pending = true
			c.push(func() {
				defer func() { done <- struct{}{} }()
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if _, err := c.storeOp(ctx, fsm.StoreExpire, store.ExpireOp{Now: time.Now().UnixNano()}); err != nil {
					c.log.Warn("expiring grants", "error", err)
				}
			})
		}
	}
}

func bytesOf(m map[string]json.RawMessage) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func rawOf(m map[string][]byte) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
