package agent

import (
	"context"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/server"
)

// The cluster's membership, forwarding and autopilot are internal/server's
// (server.Cluster); this file says what this agent is to the others.

// Self is what an agent says of itself to the others.
type Self = server.Self

func (a *Agent) self() Self {
	s := Self{Name: a.cfg.Name, AdminAddr: a.AdminAddr(), FrontAddr: a.Addr(), NewestEntry: int(fsm.NewestEntryType)}
	if r := a.raftNode(); r != nil {
		s.RaftAddr = r.Addr()
		_, s.Leader = r.Leader()
		s.Established = s.Leader != "" && r.Health().Member
	}
	s.RPCAddr = a.rpcAddress()
	return s
}

// register records this agent's workers in the maps, so every server can
// route to them.
func (a *Agent) register(ctx context.Context) error {
	// One at a time: a list read before a retirement must not be applied
	// after the list read after it.
	a.registerMu.Lock()
	defer a.registerMu.Unlock()
	e := fsm.AgentEntry{Name: a.cfg.Name, AdminAddr: a.AdminAddr(), Workers: map[string]string{}, Draining: a.draining.Load()}
	e.RPCAddr = a.rpcAddress()
	for _, w := range a.pool.Workers() {
		e.Workers[w.ID] = w.Group
	}
	entry, err := fsm.Encode(fsm.RegisterAgentRequestType, e)
	if err != nil {
		return err
	}
	_, err = a.cluster.Apply(ctx, entry)
	return err
}

// establishLeadership is the first leader task of every term: moves the
// last leader was making cannot finish, so they are rolled back, and the
// cookie key ring is seeded if the maps hold none (or this server's files
// are its successor).
func (a *Agent) establishLeadership(stop <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	aborted, err := a.abortStuckMoves(ctx)
	if err != nil {
		a.log.Warn("rolling back interrupted moves", "error", err)
		return
	}
	// The barrier of abortStuckMoves is behind: the ring read is the last
	// leader's.
	a.keyring.Seed(ctx)
	if len(aborted) > 0 {
		a.log.Info("rolled back the moves the last leader left", "users", len(aborted))
		a.mu.Lock()
		a.restart.AbortedMoves = append(a.restart.AbortedMoves, aborted...)
		a.mu.Unlock()
	}
}

// abortStuckMoves rolls back every move in the maps, once this server's
// replica has every entry (a barrier); called by a new leader, which runs
// no move yet.
func (a *Agent) abortStuckMoves(ctx context.Context) ([]string, error) {
	if err := a.raft.Barrier(ctx); err != nil {
		return nil, err
	}
	return a.mover.RollBackStuck(ctx, a.fsm.Users())
}
