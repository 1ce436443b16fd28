package host

import (
	"context"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Log writes entries to the maps through the leader, from any agent (the
// agent's forwarding log): a write waits out an election within ctx.
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// WorkerCallsConfig is what WorkerCalls are built from.
type WorkerCallsConfig struct {
	// Maps are read for subscribers and grants, and written through Log.
	Maps *fsm.FSM
	Log  Log
	// Router carries table changes to the workers that watch them.
	Router *Router
	// Gateway serves one GatewayCall of worker, on its own goroutine; stop
	// is closed when the WorkerCalls stop. Nil: a call is refused as one
	// the host does not handle.
	Gateway func(stop <-chan struct{}, worker string, env *protocol.Envelope, r Replier)
	// Forget forgets a person the site asked to forget (a logout), on its
	// own goroutine. Nil: a logout is dropped (it is a notice).
	Forget   func(worker, user string)
	Logger   hclog.Logger
	Registry prometheus.Registerer
}

// WorkerCalls serve what workers send their host unasked (the pool's
// FromWorker and Ended): table subscriptions and publishes, the global
// store's calls and grants, gateway calls and logouts. Tables' work, and
// letting go of an ended worker's grants, runs on one goroutine in the
// order the workers said it, so a worker's changes reach each subscriber
// in the order it published them; the calls that may block (the store's,
// the gateway's) run on their own.
type WorkerCalls struct {
	cfg WorkerCallsConfig
	log hclog.Logger

	mu    sync.Mutex // guards queue
	queue []func()
	kick  chan struct{}

	stopOnce sync.Once
	stop     chan struct{} // closed by Stop
	done     chan struct{} // closed when run returns

	published, unwatched prometheus.Counter
	sends                *prometheus.CounterVec
}

// NewWorkerCalls registers the tables' metrics on cfg.Registry; Start
// runs the queue.
func NewWorkerCalls(cfg WorkerCallsConfig) (*WorkerCalls, error) {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	c := &WorkerCalls{cfg: cfg, log: cfg.Logger, kick: make(chan struct{}, 1),
		stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.registerTableMetrics(cfg.Registry); err != nil {
		return nil, err
	}
	return c, nil
}

// Start runs the queued work on its own goroutine until Stop.
func (c *WorkerCalls) Start() { go c.run() }

// Stop stops the queue and waits for the work running, if any: what is
// queued then is dropped (the agent is stopping: its workers'
// subscriptions go with it), and no table work reaches the maps after.
// Gateway calls are told through Stopping. Stop after Start; idempotent.
func (c *WorkerCalls) Stop() {
	c.stopOnce.Do(func() { close(c.stop) })
	<-c.done
}

// Stopping is closed when Stop begins.
func (c *WorkerCalls) Stopping() <-chan struct{} { return c.stop }

// run does the queued work until stop.
func (c *WorkerCalls) run() {
	defer close(c.done)
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		for {
			c.mu.Lock()
			q := c.queue
			c.queue = nil
			c.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, f := range q {
				select {
				case <-c.stop:
					return
				default:
				}
				f()
			}
		}
	}
}

func (c *WorkerCalls) push(f func()) {
	c.mu.Lock()
	c.queue = append(c.queue, f)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// FromWorker handles what a worker sends its host unasked (the pool's
// FromWorker): it does not block.
func (c *WorkerCalls) FromWorker(worker string, incarnation int, env *protocol.Envelope, r Replier) {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Tables:
		set := b.Tables.Tables
		c.push(func() { c.record(worker, set) })
	case *protocol.Envelope_Publish:
		p := b.Publish
		c.push(func() { c.fanOut(worker, p) })
	case *protocol.Envelope_StoreGet, *protocol.Envelope_GrantAcquire, *protocol.Envelope_GrantCommit, *protocol.Envelope_GrantRelease:
		go c.storeCall(worker, incarnation, env, r)
	case *protocol.Envelope_GatewayCall:
		if c.cfg.Gateway == nil {
			c.refuse(env, r)
			return
		}
		go c.cfg.Gateway(c.stop, worker, env, r)
	case *protocol.Envelope_Forget:
		if c.cfg.Forget == nil {
			c.refuse(env, r)
			return
		}
		go c.cfg.Forget(worker, b.Forget.User)
	default:
		c.refuse(env, r)
	}
}

// refuse answers a request the host does not handle (a notice is dropped).
func (c *WorkerCalls) refuse(env *protocol.Envelope, r Replier) {
	if env.Id != 0 {
		_ = r.ReplyError(env.Id, protocol.Error_BAD_REQUEST, fmt.Sprintf("the host does not handle %T", env.Body))
	}
}

// Ended lets go of what a worker's ended process held for others (the
// pool's Ended): its table subscriptions and its grants.
func (c *WorkerCalls) Ended(worker string, incarnation int) {
	c.push(func() {
		c.record(worker, nil)
		c.releaseWorker(worker, incarnation)
	})
}
