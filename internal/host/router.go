package host

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/tlsutil"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Any front reaches any worker. Workers of this agent are reached through its
// pool; a worker of another agent through a peer link: one gRPC stream of
// envelopes per pair of agents (the same Envelope and Channel RPC a worker
// speaks), each envelope naming its target worker. The far agent hands each
// envelope to its pool in arrival order (LinkServer), so a page's frames
// keep their order across hosts. Every agent registers its workers in the
// maps, so any server knows where a worker runs.

// RouterConfig is what a Router is built from.
type RouterConfig struct {
	// Name is this agent's name in the maps: its own workers are reached
	// through Pool, never over a link.
	Name string
	Pool *Pool
	// Maps say which agent runs a worker, and at which addresses.
	Maps *fsm.FSM
	// TLS, if set, is the mutual TLS the peer links are dialled with.
	TLS *tlsutil.Manager
	// Fetch calls another agent's admin API (method, its address, path,
	// body) and returns the answer's body; Deliver puts packages with it.
	Fetch func(ctx context.Context, method, addr, path string, body []byte) ([]byte, error)
}

// Router is the agent's front.Dispatcher, and what the supervisor and the
// mover know of workers (move.Workers, move.Precopier, move.Dropper,
// supervisor.Workers): local ones directly, remote ones over peer links.
// It dials the links it needs on first use; Close closes them.
type Router struct {
	cfg RouterConfig

	mu    sync.Mutex // guards links
	links map[string]*link
}

// NewRouter returns a router with no link dialled yet.
func NewRouter(cfg RouterConfig) *Router {
	return &Router{cfg: cfg}
}

// start sends env to worker, wherever it runs.
func (r *Router) start(ctx context.Context, worker string, env *protocol.Envelope) (*channel.Call, error) {
	if r.cfg.Pool.Has(worker) {
		return r.cfg.Pool.StartEnvelope(ctx, worker, env)
	}
	for {
		p, err := r.peerFor(ctx, worker)
		if err != nil {
			return nil, err
		}
		env.Target = worker
		c, err := p.Start(env)
		if err == nil {
			return c, nil
		}
		// The link broke: the next peerFor dials again, within ctx.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *Router) call(ctx context.Context, worker string, env *protocol.Envelope) (*protocol.Envelope, error) {
	c, err := r.start(ctx, worker, env)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx)
}

// Send implements front.Dispatcher.
func (r *Router) Send(ctx context.Context, worker string, f *protocol.Frame) (*channel.Call, error) {
	if r.cfg.Pool.Has(worker) {
		// The frame goes in its envelope there, once.
		return r.cfg.Pool.Send(ctx, worker, f)
	}
	return r.start(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
}

// Freeze, Thaw, Evict and Ready implement move.Workers.
func (r *Router) Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error) {
	return r.FreezeWith(ctx, worker, &protocol.Freeze{User: user, Epoch: epoch})
}

// FreezeWith, Precopy and Stage implement move.Precopier.
func (r *Router) FreezeWith(ctx context.Context, worker string, fz *protocol.Freeze) (*protocol.Frozen, error) {
	env, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: fz}})
	if err != nil {
		return nil, err
	}
	frozen := env.GetFrozen()
	if frozen == nil {
		return nil, fmt.Errorf("worker %s answered a freeze with %T", worker, env.Body)
	}
	return frozen, nil
}

// Precopy implements move.Precopier.
func (r *Router) Precopy(ctx context.Context, worker, user string) (*protocol.Precopied, error) {
	env, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Precopy{Precopy: &protocol.Precopy{User: user}}})
	if err != nil {
		return nil, err
	}
	pc := env.GetPrecopied()
	if pc == nil {
		return nil, fmt.Errorf("worker %s answered a precopy with %T", worker, env.Body)
	}
	return pc, nil
}

// Stage implements move.Precopier.
func (r *Router) Stage(ctx context.Context, worker, user, digest string, pkg []byte) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{User: user, Digest: digest, Package: pkg}}})
	return err
}

// Thaw implements move.Workers.
func (r *Router) Thaw(ctx context.Context, worker, user string, epoch uint64) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Thaw{Thaw: &protocol.Thaw{User: user, Epoch: epoch}}})
	return err
}

// Evict implements move.Workers.
func (r *Router) Evict(ctx context.Context, worker, user string) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: user}}})
	return err
}

// Drop implements move.Dropper: an eviction that leaves no fence.
func (r *Router) Drop(ctx context.Context, worker, user string) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: user, Forget: true}}})
	return err
}

// Ready lists this agent's ready workers and every worker other agents
// registered (their own hosts restart them; a frame waits if one is down).
func (r *Router) Ready() []string {
	out := r.cfg.Pool.Ready()
	for _, ag := range r.cfg.Maps.Agents() {
		if ag.Name == r.cfg.Name || ag.Draining {
			continue
		}
		for w := range ag.Workers {
			out = append(out, w)
		}
	}
	return out
}

// deliverTimeout bounds handing a package to the destination's host.
const deliverTimeout = 10 * time.Second

// Deliver hands a moved person's package to the agent of the worker they
// are moving to, before the maps point there: the package travels from
// memory to the host that wakes them, and the one that froze them may go
// away. A local worker's agent has it already; an agent not in the maps
// fetches it at the wake as before.
func (r *Router) Deliver(ctx context.Context, worker, digest string, pkg []byte) error {
	if r.cfg.Pool.GroupOf(worker) != "" {
		return nil
	}
	ag, ok := r.cfg.Maps.AgentOf(worker)
	if !ok || ag.Name == r.cfg.Name || ag.AdminAddr == "" {
		return nil
	}
	// Bounded: a destination host that does not take it in time (stopped,
	// cut off) rolls the move back, and the person stays home.
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	if _, err := r.cfg.Fetch(ctx, "PUT", ag.AdminAddr, "/v1/internal/park/"+digest, pkg); err != nil {
		return fmt.Errorf("delivering the package to %s: %w", ag.Name, err)
	}
	return nil
}

// Local lists this agent's ready workers.
func (r *Router) Local() []string { return r.cfg.Pool.Ready() }

// GroupOf implements supervisor.Workers.
func (r *Router) GroupOf(worker string) string {
	if g := r.cfg.Pool.GroupOf(worker); g != "" {
		return g
	}
	if ag, ok := r.cfg.Maps.AgentOf(worker); ok {
		return ag.Workers[worker]
	}
	return ""
}
