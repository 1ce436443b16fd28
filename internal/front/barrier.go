package front

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// barrier holds the frames of people who are between homes. A held frame
// waits until the maps say where the person lives again, within a deadline;
// the number held per person and in all is capped. Past either bound the
// caller gets a clear, retryable refusal, and a metric counts it.
type barrier struct {
	dir            Directory
	wait           time.Duration
	perUser, total int
	// rolledBack is rolledBackRetry (tests lengthen it).
	rolledBack        time.Duration
	mu                sync.Mutex // guards held and heldTotal
	held              map[string]int
	heldTotal         int
	waits, rejections *prometheus.CounterVec
	waitTime          prometheus.Histogram
}

func newBarrier(dir Directory, cfg Config, reg prometheus.Registerer) *barrier {
	b := &barrier{dir: dir, wait: cfg.BarrierWait, perUser: cfg.MaxHeldPerUser, total: cfg.MaxHeld, held: map[string]int{}, rolledBack: rolledBackRetry}
	b.waits = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_barrier_waits_total",
		Help: "Frames held on the barrier while their person was between homes.",
	}, nil)
	b.rejections = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_barrier_rejections_total",
		Help: "Frames refused at the barrier, by reason (timeout, per_user_cap, total_cap).",
	}, []string{"reason"})
	b.waitTime = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "stickyd_front_barrier_wait_seconds",
		Help:    "How long held frames waited on the barrier.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
	})
	if reg != nil {
		reg.MustRegister(b.waits, b.rejections, b.waitTime)
	}
	return b
}

var (
	errBarrierTimeout = &HTTPError{Status: http.StatusServiceUnavailable, Retry: true,
		Message: "this session is moving between workers and took too long; retry"}
	errBarrierFull = &HTTPError{Status: http.StatusServiceUnavailable, Retry: true,
		Message: "too many requests are waiting while this session moves; retry"}
)

// route returns the connection's route once its person is not moving,
// waiting on the barrier if they are. minEpoch > 0 also waits for the maps
// to reach that epoch (a worker answered MOVED at an older one).
func (b *barrier) route(ctx context.Context, conn string, minEpoch uint64) (placement.Route, error) {
	rt, ok := b.dir.Lookup(conn)
	if !ok {
		return rt, errNoConnection
	}
	if !rt.Moving && rt.Epoch >= minEpoch {
		return rt, nil
	}
	if err := b.hold(rt.User); err != nil {
		return rt, err
	}
	defer b.release(rt.User)
	b.waits.WithLabelValues().Inc()
	start := time.Now()
	defer func() { b.waitTime.Observe(time.Since(start).Seconds()) }()
	timer := time.NewTimer(b.wait)
	defer timer.Stop()
	for {
		changed := b.dir.Watch(rt.User)
		// Look again after subscribing: a change between the first look
		// and the subscription must not be missed.
		if rt, ok = b.dir.Lookup(conn); !ok {
			return rt, errNoConnection
		}
		if !rt.Moving && rt.Epoch >= minEpoch {
			return rt, nil
		}
		// A worker refused a frame at the epoch the maps still show, and
		// the person is not moving: their move rolled back and the thaw is
		// on its way to that worker behind the late freeze. No newer epoch
		// will come; send again shortly, within the same barrier_wait.
		var again <-chan time.Time
		if minEpoch > 0 && !rt.Moving && rt.Epoch == minEpoch-1 {
			again = time.After(b.rolledBack)
		}
		select {
		case <-changed:
		case <-again:
			return rt, nil
		case <-timer.C:
			b.rejections.WithLabelValues("timeout").Inc()
			return rt, errBarrierTimeout
		case <-ctx.Done():
			return rt, ctx.Err()
		}
	}
}

// rolledBackRetry is how long a frame refused MOVED waits before it is sent
// again to the worker the maps still name at the same epoch (a rolled-back
// move, whose thaw has not reached the worker yet).
const rolledBackRetry = 25 * time.Millisecond

func (b *barrier) hold(user string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.held[user] >= b.perUser {
		b.rejections.WithLabelValues("per_user_cap").Inc()
		return errBarrierFull
	}
	if b.heldTotal >= b.total {
		b.rejections.WithLabelValues("total_cap").Inc()
		return errBarrierFull
	}
	b.held[user]++
	b.heldTotal++
	return nil
}

func (b *barrier) release(user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.heldTotal--
	if b.held[user]--; b.held[user] <= 0 {
		delete(b.held, user)
	}
}

// movedEpoch reports whether err is a worker's MOVED answer.
func isMoved(err error) bool {
	if err == nil {
		return false
	}
	var re *channel.RemoteError
	return errors.As(err, &re) && re.Code == protocol.Error_MOVED
}

// stamp fills a frame's routing fields from a route.
func stamp(f *protocol.Frame, rt placement.Route) {
	f.User, f.Conn, f.Epoch, f.WakePackage = rt.User, rt.Conn, rt.Epoch, rt.Package
}

// deliver sends a frame for a known connection and waits for its answer,
// following the person through a move: a frame held on the barrier goes to
// the new home; a frame a worker refused with MOVED (it never ran) is sent
// again to the new home. Used by every path that has one frame in flight at
// a time; the WebSocket keeps its own order (ws.go).
func (f *Front) deliver(ctx context.Context, conn string, fr *protocol.Frame, timeout time.Duration) (*protocol.FrameReply, placement.Route, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var minEpoch uint64
	for {
		rt, err := f.barrier.route(ctx, conn, minEpoch)
		if err != nil {
			return nil, rt, err
		}
		stamp(fr, rt)
		c, err := f.cfg.Dispatcher.Send(ctx, rt.Worker, fr)
		if err != nil {
			return nil, rt, frameErr(err)
		}
		env, err := c.Wait(ctx)
		if isMoved(err) {
			minEpoch = rt.Epoch + 1
			continue
		}
		if err != nil {
			return nil, rt, frameErr(err)
		}
		rep := env.GetFrameReply()
		if rep == nil {
			return nil, rt, &HTTPError{Status: http.StatusBadGateway, Message: "worker answered with an unexpected envelope"}
		}
		return rep, rt, nil
	}
}
