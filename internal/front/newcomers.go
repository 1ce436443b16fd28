package front

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
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
	limit rate.Limit
	burst int
	now   func() time.Time

	mu      sync.Mutex // guards buckets, shared and swept
	buckets map[netip.Prefix]*rate.Limiter
	shared  *rate.Limiter // for addresses past maxNewcomerBuckets
	swept   time.Time

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
	return &newcomerLimiter{limit: rate.Limit(r), burst: burst, now: cfg.Now,
		buckets: map[netip.Prefix]*rate.Limiter{}, shared: rate.NewLimiter(rate.Limit(r), burst), refused: refused}
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
	src, now := sourceOf(remote), l.now()
	if src.IsValid() && src.Addr().IsLoopback() {
		return true
	}
	l.mu.Lock()
	if now.Sub(l.swept) >= sweepEvery || len(l.buckets) >= maxNewcomerBuckets {
		l.sweepLocked(now)
	}
	b := l.buckets[src]
	if b == nil {
		if len(l.buckets) < maxNewcomerBuckets {
			b = rate.NewLimiter(l.limit, l.burst)
			l.buckets[src] = b
		} else {
			b = l.shared
		}
	}
	ok := b.AllowN(now, 1)
	l.mu.Unlock()
	if !ok {
		l.refused.Inc()
	}
	return ok
}

// sweepLocked forgets full buckets: a new one would be the same.
func (l *newcomerLimiter) sweepLocked(now time.Time) {
	for src, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, src)
		}
	}
	l.swept = now
}

// errTooManyNewcomers refuses a newcomer over its address's rate.
var errTooManyNewcomers = &HTTPError{Status: http.StatusTooManyRequests, Retry: true, Code: "rate_limited",
	Message: "too many new sessions from this address: retry shortly"}
