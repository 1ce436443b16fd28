package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/lifecycle"
	"github.com/stickyd/stickyd/internal/protocol"
)

// tables carries table changes between workers (and runs the other work an
// agent does for its workers in order, such as letting go of a dead
// worker's grants): a worker reports the tables
// its pages subscribe to (recorded in the maps, so every agent knows who
// watches what), and publishes changes, which go to the other workers that
// watch the table, and only to them. One goroutine does the work, in the
// order the workers said it, so a worker's changes reach each subscriber in
// the order it published them.
type tables struct {
	a *Agent

	mu    sync.Mutex // guards queue
	queue []func()
	kick  chan struct{}
	done  chan struct{} // closed when run returns

	published, unwatched prometheus.Counter
	sends                *prometheus.CounterVec
}

func newTables(a *Agent, reg prometheus.Registerer) (*tables, error) {
	t := &tables{a: a, kick: make(chan struct{}, 1), done: make(chan struct{}),
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_tables_published_total",
			Help: "Table changes workers of this agent published."}),
		unwatched: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_tables_unwatched_total",
			Help: "Published table changes no other worker watched (nothing sent)."}),
		sends: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stickyd_tables_sends_total",
			Help: "Table changes sent to a worker, by destination worker."}, []string{"worker"}),
	}
	for _, c := range []prometheus.Collector{t.published, t.unwatched, t.sends} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering table metrics: %w", err)
		}
	}
	return t, nil
}

// run does the queued work until stop; what is queued then is dropped (the
// agent is stopping: its workers' subscriptions go with it).
func (t *tables) run(stop <-chan struct{}) {
	defer close(t.done)
	for {
		select {
		case <-stop:
			return
		case <-t.kick:
		}
		for {
			t.mu.Lock()
			q := t.queue
			t.queue = nil
			t.mu.Unlock()
			if len(q) == 0 {
				break
			}
			for _, f := range q {
				select {
				case <-stop:
					return
				default:
				}
				f()
			}
		}
	}
}

func (t *tables) push(f func()) {
	t.mu.Lock()
	t.queue = append(t.queue, f)
	t.mu.Unlock()
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// record writes a worker's set of tables in the maps, unless it is there.
func (t *tables) record(worker string, set []string) {
	if slices.Equal(t.a.fsm.TablesOf(worker), set) {
		return
	}
	entry, err := fsm.Encode(fsm.TableSubsRequestType, fsm.TableSubsRequest{Worker: worker, Tables: set})
	if err != nil {
		t.a.log.Error("encoding table subscriptions", "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := t.a.cluster.Apply(ctx, entry); err != nil {
		t.a.log.Error("recording table subscriptions", "worker", worker, "error", err)
	}
}

// fanOut sends a change published by origin to every other worker that
// watches its table.
func (t *tables) fanOut(origin string, p *protocol.Publish) {
	t.published.Inc()
	var to []string
	for _, w := range t.a.fsm.Subscribers(p.Table) {
		if w != origin {
			to = append(to, w)
		}
	}
	if len(to) == 0 {
		t.unwatched.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var calls sync.WaitGroup
	for _, w := range to {
		env := &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: p.Table, Data: p.Data, Origin: origin}}}
		c, err := t.a.router.start(ctx, w, env)
		if err != nil {
			t.a.log.Warn("sending a table change", "table", p.Table, "to", w, "error", err)
			continue
		}
		t.sends.WithLabelValues(w).Inc()
		calls.Add(1)
		go func() {
			defer calls.Done()
			if _, err := c.Wait(ctx); err != nil {
				t.a.log.Warn("a worker did not take a table change", "table", p.Table, "worker", w, "error", err)
			}
		}()
	}
	go func() {
		calls.Wait()
		cancel()
	}()
}

// fromWorker handles what a worker sends its host unasked.
func (a *Agent) fromWorker(worker string, incarnation int, env *protocol.Envelope, r host.Replier) {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Tables:
		set := b.Tables.Tables
		a.tables.push(func() { a.tables.record(worker, set) })
	case *protocol.Envelope_Publish:
		p := b.Publish
		a.tables.push(func() { a.tables.fanOut(worker, p) })
	case *protocol.Envelope_StoreGet, *protocol.Envelope_GrantAcquire, *protocol.Envelope_GrantCommit, *protocol.Envelope_GrantRelease:
		go a.storeCall(worker, incarnation, env, r)
	case *protocol.Envelope_GatewayCall:
		go a.gatewayFromWorker(worker, env, r)
	case *protocol.Envelope_Forget:
		go lifecycle.ForgetLoggedOut(a.sup, a.log, worker, b.Forget.User)
	default:
		if env.Id != 0 {
			_ = r.ReplyError(env.Id, protocol.Error_BAD_REQUEST, fmt.Sprintf("the host does not handle %T", env.Body))
		}
	}
}

// workerEnded lets go of what a worker's ended process held for others.
func (a *Agent) workerEnded(worker string, incarnation int) {
	a.tables.push(func() {
		a.tables.record(worker, nil)
		a.releaseWorker(worker, incarnation)
	})
}
