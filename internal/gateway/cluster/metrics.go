package cluster

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// collector publishes the gateway's counters (the total and
// today; sessions are on the API, not here: unbounded labels), each
// model's limit, this server's share of it and its calls, each
// deployment's health as this server sees it, and the lease.
type collector struct {
	g                                            *Gateway
	cost, calls, tokens, dayCost                 *prometheus.Desc
	inFlight, queued, capacity, degraded, reqWin *prometheus.Desc
	share, leaseOK                               *prometheus.Desc
	held, ceilings, ceilWrites, seen, holds      *prometheus.Desc
	trips, tripItems                             *prometheus.Desc
	catchUps, catchUpWaits                       *prometheus.Desc
}

var _ prometheus.Collector = (*collector)(nil)

func newCollector(g *Gateway) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{g: g,
		cost:     d("stickyd_gateway_cost_dollars_total", "What the gateway's answers cost, all sessions and days."),
		calls:    d("stickyd_gateway_calls_total", "Answers charged."),
		tokens:   d("stickyd_gateway_tokens_total", "Tokens charged, by kind (input, cached_input, cache_write, output).", "kind"),
		dayCost:  d("stickyd_gateway_day_cost_dollars", "What today's answers cost (the gateway's day zone).", "day"),
		inFlight: d("stickyd_gateway_in_flight", "Calls of a model running now on this server.", "model"),
		queued:   d("stickyd_gateway_queued", "Calls of a model waiting for a slot on this server.", "model"),
		share:    d("stickyd_gateway_share", "This server's share of a model's concurrency limit (the leader grants it).", "model"),
		leaseOK:  d("stickyd_gateway_lease_valid", "1 while this server's share of the limits stands; 0 when it lapsed (no call starts here)."),
		capacity: d("stickyd_gateway_concurrency_limit", "A model's aggregate concurrency limit.", "model"),
		degraded: d("stickyd_gateway_deployment_degraded", "1 while a deployment is degraded (skipped and probed).", "model", "deployment"),
		reqWin:   d("stickyd_gateway_deployment_failure_ratio", "A deployment's failures over its outcomes in the health window.", "model", "deployment"),
		held:     d("stickyd_gateway_reservations_held", "Budget reservations this server's ledger holds (its calls', and on the leader the followers' calls'); each expires with its call's bound."),
		ceilings: d("stickyd_gateway_budget_ceilings", "Budget scopes this server's ledger keeps a ceiling for in the log; one unused lapses after about 30 s."),
		ceilWrites: d("stickyd_gateway_budget_ceiling_writes_total",
			"Entries of budget ceilings this server's ledger wrote (a raise or a renewal; none a call within its ceilings)."),
		seen:  d("stickyd_gateway_remote_charges_remembered", "Charges from other servers the leader remembers to take each once (kept 2 minutes)."),
		holds: d("stickyd_gateway_limit_holds", "Holds of keys' and tenants' limits the leader keeps for calls running on other servers (each ends with its call, at the latest its bound)."),
		trips: d("stickyd_gateway_leader_trips_total",
			"Batches this server sent the leader for its calls (a call's limits and reservation as it starts, its charge and the end of its hold as it ends; the calls of the moment share one)."),
		tripItems: d("stickyd_gateway_leader_trip_items_total", "Items in the batches this server sent the leader."),
		catchUps: d("stickyd_gateway_key_catch_ups_total",
			"Times this server caught its replica up with the leader's before deciding on an API key of stickyd's format it did not know (the callers of the moment share one)."),
		catchUpWaits: d("stickyd_gateway_key_catch_up_waits_total", "Calls that waited for such a catch-up."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cost, c.calls, c.tokens, c.dayCost, c.inFlight, c.queued, c.capacity, c.degraded, c.reqWin, c.share, c.leaseOK, c.held, c.ceilings, c.ceilWrites, c.seen, c.holds, c.trips, c.tripItems, c.catchUps, c.catchUpWaits} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	// The ledger's counters: the replica's, with the charges this server
	// took that the log has not applied yet (so they never go back).
	k := c.g.ledger.Counters()
	ch <- prometheus.MustNewConstMetric(c.cost, prometheus.CounterValue, float64(k.Total.Micros)/1e6)
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(k.Total.Calls))
	u := k.Total.Usage
	for kind, n := range map[string]int64{"input": u.Input, "cached_input": u.CachedInput, "cache_write": u.CacheWrite, "output": u.Output} {
		ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.CounterValue, float64(n), kind)
	}
	day := time.Now().In(c.g.zone()).Format(time.DateOnly)
	ch <- prometheus.MustNewConstMetric(c.dayCost, prometheus.GaugeValue, float64(k.Days[day].Micros)/1e6, day)
	valid := 0.0
	if c.g.lease.valid() == nil {
		valid = 1
	}
	ch <- prometheus.MustNewConstMetric(c.leaseOK, prometheus.GaugeValue, valid)
	l := c.g.ledger
	l.mu.Lock()
	held, ceils, writes, seen := len(l.held), len(l.ceils), l.ceilWrites, len(l.remoteSeen)
	l.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(held))
	ch <- prometheus.MustNewConstMetric(c.ceilings, prometheus.GaugeValue, float64(ceils))
	ch <- prometheus.MustNewConstMetric(c.ceilWrites, prometheus.CounterValue, float64(writes))
	ch <- prometheus.MustNewConstMetric(c.seen, prometheus.GaugeValue, float64(seen))
	ch <- prometheus.MustNewConstMetric(c.trips, prometheus.CounterValue, float64(l.trips.Load()))
	ch <- prometheus.MustNewConstMetric(c.tripItems, prometheus.CounterValue, float64(l.tripItems.Load()))
	ch <- prometheus.MustNewConstMetric(c.catchUps, prometheus.CounterValue, float64(c.g.catchUp.rounds.Load()))
	ch <- prometheus.MustNewConstMetric(c.catchUpWaits, prometheus.CounterValue, float64(c.g.catchUp.waited.Load()))
	lk := c.g.limitKeeper
	lk.mu.Lock()
	holds := len(lk.holds)
	lk.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.holds, prometheus.GaugeValue, float64(holds))
	limits := c.g.limits()
	for model, h := range c.g.router.Health() {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(limits[model]), model)
		ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, float64(h.Slots.Capacity), model)
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(h.Slots.InFlight), model)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(h.Slots.Queued), model)
		for dep, s := range h.Deployments {
			v, ratio := 0.0, 0.0
			if s.Degraded {
				v = 1
			}
			if s.Requests > 0 {
				ratio = float64(s.Failures) / float64(s.Requests)
			}
			ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, v, model, dep)
			ch <- prometheus.MustNewConstMetric(c.reqWin, prometheus.GaugeValue, ratio, model, dep)
		}
	}
}

// zone is the calendar of the day counters.
func (g *Gateway) zone() *time.Location {
	if z := g.cfg.DayZone; z != "" {
		if loc, err := time.LoadLocation(z); err == nil {
			return loc
		}
	}
	return time.UTC
}
