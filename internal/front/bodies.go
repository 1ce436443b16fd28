package front

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"
)

// DefaultBodyBudget is Config.BodyBudget unless set: the request bodies a
// front holds at once, all requests together.
const DefaultBodyBudget = 256 << 20

// bodyWait is how long a request waits for room in the body budget before
// it is refused.
const bodyWait = 2 * time.Second

// bodyBudget bounds the bytes of request bodies held at once (being read,
// or on their way to a worker and back): max_body_bytes bounds one
// request, the budget all of them. A request reserves its Content-Length
// (its limit when it sends none) before it reads a byte, and gives back
// what it did not use once read; past the budget it waits up to bodyWait,
// then is refused 503 with Retry-After.
type bodyBudget struct {
	sem      *semaphore.Weighted
	max      int64
	inFlight prometheus.Gauge
	refused  prometheus.Counter
}

func newBodyBudget(max int64, reg prometheus.Registerer) *bodyBudget {
	b := &bodyBudget{sem: semaphore.NewWeighted(max), max: max,
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stickyd_front_body_bytes_reserved",
			Help: "Bytes of request bodies the front holds now (reserved for bodies being read, or held until their answer)."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_front_body_budget_refused_total",
			Help: "Requests refused 503 because the front's body budget (front.body_budget_bytes) stayed full."}),
	}
	if reg != nil {
		reg.MustRegister(b.inFlight, b.refused)
	}
	return b
}

// reserve takes n bytes of the budget; release gives back what is still
// held. shrink gives back what the body turned out not to need.
func (b *bodyBudget) reserve(ctx context.Context, n int64) (shrink func(used int64), release func(), err error) {
	if n <= 0 {
		return func(int64) {}, func() {}, nil
	}
	n = min(n, b.max)
	wctx, cancel := context.WithTimeout(ctx, bodyWait)
	defer cancel()
	if err := b.sem.Acquire(wctx, n); err != nil {
		b.refused.Inc()
		return nil, nil, &HTTPError{Status: http.StatusServiceUnavailable, Retry: true,
			Message: fmt.Sprintf("the front is receiving %d MiB of other requests' bodies, its budget; retry shortly", b.max>>20)}
	}
	b.inFlight.Add(float64(n))
	held := n
	shrink = func(used int64) {
		if used < held {
			b.sem.Release(held - used)
			b.inFlight.Sub(float64(held - used))
			held = used
		}
	}
	release = func() {
		if held > 0 {
			b.sem.Release(held)
			b.inFlight.Sub(float64(held))
			held = 0
		}
	}
	return shrink, release, nil
}
