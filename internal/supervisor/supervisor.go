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
	"sync/atomic"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// Workers is what the supervisor needs of the hosts.
type Workers interface {
	// Ready lists the workers that can take frames now.
	Ready() []string
}

// Log is the replicated log the maps are written through.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Supervisor writes and reads the maps.
type Supervisor struct {
	fsm     *fsm.FSM
	log     Log
	workers Workers
	rr      atomic.Uint64
}

// ErrNoWorkers is returned when no worker is ready to take a new connection.
var ErrNoWorkers = errors.New("no worker is ready")

// New returns a supervisor over the given replica, log and workers.
func New(f *fsm.FSM, log Log, workers Workers) *Supervisor {
	return &Supervisor{fsm: f, log: log, workers: workers}
}

// Lookup returns a connection's route from the local replica.
func (s *Supervisor) Lookup(conn string) (placement.Route, bool) { return s.fsm.Lookup(conn) }

// Place chooses the worker for a new connection: the ready worker holding the
// fewest people, ties broken in turn.
func (s *Supervisor) Place(ctx context.Context) (string, error) {
	ready := s.workers.Ready()
	if len(ready) == 0 {
		return "", ErrNoWorkers
	}
	load := s.fsm.UsersOn()
	start := int(s.rr.Add(1))
	best := ""
	for i := range ready {
		w := ready[(start+i)%len(ready)]
		if best == "" || load[w] < load[best] {
			best = w
		}
	}
	return best, nil
}

// Connect binds a connection the site just named to its user on worker.
func (s *Supervisor) Connect(ctx context.Context, conn, user, worker string) (placement.Route, error) {
	res, err := s.apply(ctx, fsm.ConnectRequestType, fsm.ConnectRequest{Conn: conn, User: user, Worker: worker})
	if err != nil {
		return placement.Route{}, fmt.Errorf("binding connection %q: %w", conn, err)
	}
	return res.(placement.Route), nil
}

// Login binds a connection to the person the site declared. It returns the
// new route and the worker that held the connection before.
func (s *Supervisor) Login(ctx context.Context, conn, user string) (placement.Route, string, error) {
	res, err := s.apply(ctx, fsm.LoginRequestType, fsm.LoginRequest{Conn: conn, User: user})
	if err != nil {
		return placement.Route{}, "", fmt.Errorf("logging in %q on connection %q: %w", user, conn, err)
	}
	lr := res.(fsm.LoginResult)
	return lr.Route, lr.Previous, nil
}

// Forget removes a connection.
func (s *Supervisor) Forget(ctx context.Context, conn string) error {
	_, err := s.apply(ctx, fsm.ForgetConnRequestType, fsm.ForgetConnRequest{Conn: conn})
	return err
}

func (s *Supervisor) apply(ctx context.Context, t fsm.MessageType, body any) (any, error) {
	entry, err := fsm.Encode(t, body)
	if err != nil {
		return nil, err
	}
	return s.log.Apply(ctx, entry)
}
