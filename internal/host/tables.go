package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Live data tables: a worker reports the tables its pages subscribe to
// (recorded in the maps, so every agent knows who watches what), and
// publishes changes, which go to the other workers that watch the table,
// and only to them, wherever they run. Both run on the WorkerCalls' queue,
// in the order the workers said them.

func (c *WorkerCalls) registerTableMetrics(reg prometheus.Registerer) error {
	c.published = prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_tables_published_total",
		Help: "Table changes workers of this agent published."})
	c.unwatched = prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_tables_unwatched_total",
		Help: "Published table changes no other worker watched (nothing sent)."})
	c.sends = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "stickyd_tables_sends_total",
		Help: "Table changes sent to a worker, by destination worker."}, []string{"worker"})
	if reg == nil {
		return nil
	}
	for _, m := range []prometheus.Collector{c.published, c.unwatched, c.sends} {
		if err := reg.Register(m); err != nil {
			return fmt.Errorf("registering table metrics: %w", err)
		}
	}
	return nil
}

// record writes a worker's set of tables in the maps, unless it is there.
func (c *WorkerCalls) record(worker string, set []string) {
	if slices.Equal(c.cfg.Maps.TablesOf(worker), set) {
		return
	}
	entry, err := fsm.Encode(fsm.TableSubsRequestType, fsm.TableSubsRequest{Worker: worker, Tables: set})
	if err != nil {
		c.log.Error("encoding table subscriptions", "error", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.cfg.Log.Apply(ctx, entry); err != nil {
		c.log.Error("recording table subscriptions", "worker", worker, "error", err)
	}
}

// fanOut sends a change published by origin to every other worker that
// watches its table.
func (c *WorkerCalls) fanOut(origin string, p *protocol.Publish) {
	c.published.Inc()
	var to []string
	for _, w := range c.cfg.Maps.Subscribers(p.Table) {
		if w != origin {
			to = append(to, w)
		}
	}
	if len(to) == 0 {
		c.unwatched.Inc()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var calls sync.WaitGroup
	for _, w := range to {
		env := &protocol.Envelope{Body: &protocol.Envelope_TableChange{TableChange: &protocol.TableChange{Table: p.Table, Data: p.Data, Origin: origin, StoreIndex: p.StoreIndex}}}
		call, err := c.cfg.Router.start(ctx, w, env)
		if err != nil {
			c.log.Warn("sending a table change", "table", p.Table, "to", w, "error", err)
			continue
		}
		c.sends.WithLabelValues(w).Inc()
		calls.Add(1)
		go func() {
			defer calls.Done()
			if _, err := call.Wait(ctx); err != nil {
				c.log.Warn("a worker did not take a table change", "table", p.Table, "worker", w, "error", err)
			}
		}()
	}
	go func() {
		calls.Wait()
		cancel()
	}()
}
