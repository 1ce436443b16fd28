// Package lifecycle owns a session's life on one agent after its first
// frame: parking everyone on the way down and finding them again on the
// way up (Parker), parking with no quorum (OfflineParks), moving people to
// the groups' other hosts before a host stops (rehoming), parking the
// people who sent no frame for lifecycle.idle_park (IdleParker), and
// forgetting the people and connections no front saw for
// lifecycle.forget_after (Forgetter, ForgetLoggedOut).
//
// Every change of a person's place goes by the one road (move.Mover) and
// every write to the maps through the leader: the package decides who and
// when, never how a person is moved. It sees the agent only through its
// Configs (the components the agent built, plain configuration values and
// a few functions for what only the agent can do, such as registering
// itself): it never holds the agent and never reads its configuration
// file.
package lifecycle

import (
	"context"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Log writes entries to the maps through the leader, from any server (the
// agent's forwarding log): a write waits for a leader within ctx, and
// returns once the local replica applied it.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Leader tells who leads raft now (*raftnode.Node): id is "" while nobody
// is known to.
type Leader interface {
	Leader() (addr, id string)
}

// Router reaches the workers of the cluster, local or over a peer link
// (the agent's router).
type Router interface {
	// Freeze freezes user on worker at epoch and returns their package.
	Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error)
	// Ready lists the ready workers of every agent.
	Ready() []string
}

// ticking calls f every interval until stop closes, with a context that
// ends when it does.
func ticking(stop <-chan struct{}, every time.Duration, f func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f(ctx)
	}
}
