package front

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// frameLimiter is one token bucket per person for the frames that reach
// this front from browsers: ops on the WebSocket, POST /_stickyd/op, and
// site requests of a known connection. All of a person's connections draw
// from the one bucket. A frame over the limit is refused (never dropped in
// silence, never queued) and counted. A nil *frameLimiter allows everything.
type frameLimiter struct {
	buckets *bucketSet[string]
	// now is the clock; tests replace it.
	now func() time.Time

	refused *prometheus.CounterVec
}

// newFrameLimiter returns the limiter of cfg, nil when cfg sets no rate.
// The refusal counter is registered on reg either way, so the series
// exists (at zero) on every front.
func newFrameLimiter(cfg Config, reg prometheus.Registerer) *frameLimiter {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_front_rate_limited_frames_total",
		Help: "Frames refused because their person was over front.frame_rate, by how they came (websocket, op, site).",
	}, []string{"via"})
	for _, via := range []string{viaWebSocket, viaOp, viaSite} {
		refused.WithLabelValues(via)
	}
	if reg != nil {
		reg.MustRegister(refused)
	}
	if cfg.FrameRate <= 0 {
		return nil
	}
	return &frameLimiter{buckets: newBucketSet[string](rate.Limit(cfg.FrameRate), cfg.FrameBurst, 0), now: time.Now, refused: refused}
}

// How a frame came, the label of the refusal counter.
const (
	viaWebSocket = "websocket"
	viaOp        = "op"
	viaSite      = "site"
)

// allow takes one token from user's bucket; false means the frame must be
// refused.
func (l *frameLimiter) allow(user, via string) bool {
	if l == nil {
		return true
	}
	ok := l.buckets.take(user, l.now())
	if !ok {
		l.refused.WithLabelValues(via).Inc()
	}
	return ok
}

// errRateLimited refuses a frame over its person's rate.
var errRateLimited = &HTTPError{Status: http.StatusTooManyRequests, Retry: true, Code: "rate_limited",
	Message: "too many requests from this session: slow down and retry"}

// allowFrame applies the rate limit to a frame of conn; user is the
// person's key when the caller already has the route, else it is looked up.
func (f *Front) allowFrame(conn, user, via string) bool {
	if f.limiter == nil {
		return true
	}
	if user == "" {
		if rt, ok := f.cfg.Directory.Lookup(conn); ok && rt.User != "" {
			user = rt.User
		} else {
			user = conn // not in the maps (yet): the connection stands for its person
		}
	}
	return f.limiter.allow(user, via)
}
