package gateway

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Routing is how a model picks the deployment a call tries first. A
// routing only orders the model's healthy deployments free of a rate
// limit: those under a rate limit come after them (soonest free first),
// degraded ones are tried only when no healthy one is left, and a failed
// attempt fails over to the next in the order, whatever the routing.
type Routing string

const (
	// RoutingOrdered tries the deployments in the order configured.
	RoutingOrdered Routing = "ordered"
	// RoutingWeighted draws the first at random, each deployment in
	// proportion to its Weight, then tries the rest in the order
	// configured.
	RoutingWeighted Routing = "weighted"
	// RoutingLeastBusy tries first the deployment with the fewest calls
	// in flight: this node's, plus the other servers' a cluster reports
	// (Router.SetRemoteInFlight). Ties go in the order configured.
	RoutingLeastBusy Routing = "least-busy"
	// RoutingLatency tries first the deployment with the lowest recent
	// latency (latencyEstimate says how it is measured), and sends a few
	// calls to the others so that one that became fast is seen to.
	RoutingLatency Routing = "latency"
)

// ParseRouting reads a routing's name ("" is RoutingOrdered).
func ParseRouting(s string) (Routing, error) {
	switch r := Routing(s); r {
	case "":
		return RoutingOrdered, nil
	case RoutingOrdered, RoutingWeighted, RoutingLeastBusy, RoutingLatency:
		return r, nil
	}
	return "", fmt.Errorf("routing %q: want ordered, weighted, least-busy or latency", s)
}

// series is what a latency sample times, kept apart so that calls of one
// shape are compared with calls of the same shape.
type series uint8

const (
	// seriesComplete times a whole answer (Complete).
	seriesComplete series = iota
	// seriesStream times a stream's first chunk: how long the answer is
	// does not count.
	seriesStream
	// seriesEmbed times an embedding.
	seriesEmbed
	numSeries
)

const (
	// latencyStale is how old a deployment's last sample may be before
	// its estimate says nothing of now: the next sample replaces the
	// estimate instead of moving it. It is also how often a deployment
	// the estimates rank below the best gets a call to measure it (a
	// probe).
	latencyStale = 5 * time.Second
	// probeShare bounds the probes: at most one call in probeShare of a
	// model goes to a deployment only to measure it (5 %).
	probeShare = 20
	// latencyWeight is the weight of the newest sample in the moving
	// average (1/5: about the last ten calls count).
	latencyWeight = 5
)

// latencyEstimate is a deployment's recent latency for one series: an
// exponentially weighted moving average of the samples (the newest weighs
// 1/5), each the time from the attempt's start (its wait for the
// deployment's own concurrency bound included: the caller waits it too)
// to the answer, or to a stream's first chunk. Only answers are timed: a
// failure counts against the deployment's health, not its latency. A
// sample that follows none for latencyStale starts the average afresh.
type latencyEstimate struct {
	mu    sync.Mutex    // guards the rest
	mean  time.Duration // 0 until the first sample
	at    time.Time     // the last sample's time
	probe time.Time     // when the last probe was sent
}

// add takes one sample, taken at now.
func (e *latencyEstimate) add(now time.Time, took time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at.IsZero() || now.Sub(e.at) >= latencyStale {
		e.mean = took
	} else {
		e.mean += (took - e.mean) / latencyWeight
	}
	e.at = now
}

// rank is the estimate as a sort key: a deployment never measured ranks
// after every measured one.
func (e *latencyEstimate) rank() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.at.IsZero() {
		return math.MaxInt64
	}
	return int64(e.mean)
}

// claimProbe reports whether a call may be sent to measure the
// deployment, and if so counts it sent: when neither a sample nor a
// probe came in the last latencyStale (one probe at a time: a probe
// still running, or one that failed, holds it for as long), and share
// says the model's share of probes allows one or the deployment was
// never measured.
func (e *latencyEstimate) claimProbe(now time.Time, share bool) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !share && !e.at.IsZero() || now.Sub(e.at) < latencyStale || now.Sub(e.probe) < latencyStale {
		return false
	}
	e.probe = now
	return true
}

// route puts first in ds (the deployments a call may try now, in the
// order configured) the one m's routing picks for a call of series s,
// and orders the rest as its failover goes.
func route(m *model, ds []*deployment, s series, now time.Time) {
	if len(ds) < 2 {
		return
	}
	switch m.Routing {
	case RoutingWeighted:
		pickWeighted(ds)
	case RoutingLeastBusy:
		sortByKey(ds, func(d *deployment) int64 { return d.inFlight.Load() + d.remoteInFlight.Load() })
	case RoutingLatency:
		sortByKey(ds, func(d *deployment) int64 { return d.latency[s].rank() })
		// Exploration: the deployments ranked below the best get no call
		// and so no sample; one never measured, or whose estimate grew
		// stale, gets this call first (the stale ones at most one call
		// in probeShare).
		calls := m.calls.Add(1)
		share := calls-m.probed.Load() >= probeShare
		for i := 1; i < len(ds); i++ {
			if ds[i].latency[s].claimProbe(now, share) {
				m.probed.Store(calls)
				toFront(ds, i)
				return
			}
		}
	}
}

// pickWeighted moves to the front one deployment drawn in proportion to
// the weights; the others keep their order.
func pickWeighted(ds []*deployment) {
	total := 0
	for _, d := range ds {
		total += d.weight()
	}
	n := rand.N(total)
	for i, d := range ds {
		if n -= d.weight(); n < 0 {
			toFront(ds, i)
			return
		}
	}
}

// weight is the deployment's weight, 1 when unset.
func (d *deployment) weight() int { return max(d.Weight, 1) }

// toFront moves ds[i] to the front, the others keeping their order.
func toFront(ds []*deployment, i int) {
	d := ds[i]
	copy(ds[1:i+1], ds[:i])
	ds[0] = d
}

// sortByKey sorts ds by key, lowest first, stably (ties keep the order
// configured). Each key is read once: the counters it reads move while
// the sort runs. A model has a few deployments: an insertion sort with
// the keys on the stack.
func sortByKey(ds []*deployment, key func(*deployment) int64) {
	var buf [8]int64
	keys := buf[:0]
	for _, d := range ds {
		keys = append(keys, key(d))
	}
	for i := 1; i < len(ds); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
			ds[j], ds[j-1] = ds[j-1], ds[j]
		}
	}
}

// SetRemoteInFlight records how many calls the other servers of a
// cluster run on a model's deployment, which least-busy routing adds to
// this node's own count. A node alone never calls it (0). Unknown names
// are ignored.
func (r *Router) SetRemoteInFlight(model, deployment string, n int) {
	m, ok := r.models[model]
	if !ok {
		return
	}
	for _, d := range m.deps {
		if d.Name == deployment {
			d.remoteInFlight.Store(int64(n))
			return
		}
	}
}

// InFlight counts the calls this node runs on each deployment, by model
// and deployment: what a cluster tells the other servers, for their
// least-busy routing. A call counts from its attempt's start (its wait
// for the deployment's own bound included) to its answer, or its
// stream's end.
func (r *Router) InFlight() map[string]map[string]int {
	out := make(map[string]map[string]int, len(r.models))
	for name, m := range r.models {
		ds := make(map[string]int, len(m.deps))
		for _, d := range m.deps {
			ds[d.Name] = int(d.inFlight.Load())
		}
		out[name] = ds
	}
	return out
}

// begin counts an attempt on d in flight until end, and returns when it
// began.
func (r *Router) begin(d *deployment) time.Time {
	d.inFlight.Add(1)
	return r.cfg.Clock()
}

// end ends an attempt begin counted.
func (d *deployment) end() { d.inFlight.Add(-1) }

// answered records that an attempt on d begun at start was answered now,
// for latency routing.
func (r *Router) answered(d *deployment, s series, start time.Time) {
	if !d.timed {
		return
	}
	now := r.cfg.Clock()
	d.latency[s].add(now, now.Sub(start))
}
