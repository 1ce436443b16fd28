package front

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// sweepEvery is how often a bucket set forgets the buckets of keys that
// have been quiet long enough for theirs to be full again.
const sweepEvery = time.Minute

// bucketSet is one token bucket per key. Full buckets are forgotten at
// each sweep (a new one would be the same); with max set, at most max keys
// are tracked and the others share one bucket.
type bucketSet[K comparable] struct {
	limit rate.Limit
	burst int
	max   int

	mu      sync.Mutex // guards buckets, shared and swept
	buckets map[K]*rate.Limiter
	shared  *rate.Limiter
	swept   time.Time
}

func newBucketSet[K comparable](limit rate.Limit, burst, max int) *bucketSet[K] {
	return &bucketSet[K]{limit: limit, burst: burst, max: max, buckets: map[K]*rate.Limiter{}, shared: rate.NewLimiter(limit, burst)}
}

// take takes one token from key's bucket at now; false means refuse.
func (b *bucketSet[K]) take(key K, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock() // a sweep must not forget a bucket being drawn from
	// A full set sweeps early, at most once a second.
	full := b.max > 0 && len(b.buckets) >= b.max
	if since := now.Sub(b.swept); since >= sweepEvery || full && since >= time.Second {
		b.sweepLocked(now)
	}
	l := b.buckets[key]
	if l == nil {
		if b.max > 0 && len(b.buckets) >= b.max {
			l = b.shared
		} else {
			l = rate.NewLimiter(b.limit, b.burst)
			b.buckets[key] = l
		}
	}
	return l.AllowN(now, 1)
}

// size is the number of buckets tracked.
func (b *bucketSet[K]) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}

func (b *bucketSet[K]) sweepLocked(now time.Time) {
	for k, l := range b.buckets {
		if l.TokensAt(now) >= float64(b.burst) {
			delete(b.buckets, k)
		}
	}
	b.swept = now
}
