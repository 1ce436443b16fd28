package front

import (
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Defaults of the newcomer limit: generous enough for an office behind
// one address arriving at nine, low enough that a script without cookies
// cannot fill the maps.
const (
	DefaultNewcomerRate  = 50
	defaultNewcomerBurst = 10 // × the rate
	// maxNewcomerBuckets bounds the addresses tracked at once; past it,
	// the addresses not tracked share one bucket.
	maxNewcomerBuckets = 100000
)

// newcomerLimiter is one token bucket per source address (an IPv6 address
// by its /64) for the requests that carry no valid cookie: each may become
// a new connection, a new person in the maps. Over the rate a request is
// refused with 429 and counted; a person with a cookie is never counted
// here, nor a loopback address. Behind a load balancer on another host
// every newcomer has its address: raise the rate or turn it off there. A
// nil *newcomerLimiter allows everything.
type newcomerLimiter struct {
	buckets *bucketSet[netip.Prefix]
	now     func() time.Time

	refused prometheus.Counter
}

func newNewcomerLimiter(cfg Config, reg prometheus.Registerer) *newcomerLimiter {
	refused := prometheus.NewCounter(prometheus.CounterOpts{
		Name: "stickyd_front_newcomers_refused_total",
		Help: "Requests without a valid cookie refused because their source address was over front.newcomer_rate.",
	})
	if reg != nil {
		reg.MustRegister(refused)
	}
	if cfg.NewcomerRate < 0 {
		return nil
	}
	r := cfg.NewcomerRate
	if r == 0 {
		r = DefaultNewcomerRate
	}
	burst := cfg.NewcomerBurst
	if burst <= 0 {
		burst = int(r * defaultNewcomerBurst)
	}
	return &newcomerLimiter{buckets: newBucketSet[netip.Prefix](rate.Limit(r), burst, maxNewcomerBuckets), now: cfg.Now, refused: refused}
}

// sourceOf is the bucket a remote address draws from.
func sourceOf(remote string) netip.Prefix {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// allow takes a token for a newcomer from remote. A loopback address is
// not limited: it is a proxy on this host (whose clients all share it) or
// a test.
func (l *newcomerLimiter) allow(remote string) bool {
	if l == nil {
		return true
	}
	src := sourceOf(remote)
	if src.IsValid() && src.Addr().IsLoopback() {
		return true
	}
	ok := l.buckets.take(src, l.now())
	if !ok {
		l.refused.Inc()
	}
	return ok
}

// errTooManyNewcomers refuses a newcomer over its address's rate.
var errTooManyNewcomers = &HTTPError{Status: http.StatusTooManyRequests, Retry: true, Code: "rate_limited",
	Message: "too many new sessions from this address: retry shortly"}
