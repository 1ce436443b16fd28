package consul

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/consul/api"
)

// Watch timing. waitTime is the blocking query's wait; Consul adds up to
// 1/16 of jitter and caps it at 10 minutes. minQueryInterval rate-limits
// queries that return at once, as Consul's blocking-query docs ask.
// Backoff after errors grows from backoffMin to backoffMax with jitter.
const (
	waitTime         = 5 * time.Minute
	minQueryInterval = 10 * time.Millisecond
	backoffMin       = 250 * time.Millisecond
	backoffMax       = 30 * time.Second
)

// Watch follows the KV key name under the prefix (see Key) with Consul
// blocking queries and calls fn with its value and whether it exists: once
// at the start, then on every change of value or existence (not on every
// wake-up). Changes closer together than a query round trip may be seen
// only as their last value; the values fn sees are always in the order
// Consul held them. fn runs on Watch's goroutine and should return soon.
//
// Errors reaching Consul are logged and retried with jittered exponential
// backoff; fn is not called until a read succeeds. Watch returns ctx.Err()
// when ctx ends, and at once if name is empty.
func (c *Client) Watch(ctx context.Context, name string, fn func(value []byte, exists bool)) error {
	if name == "" {
		return errors.New("watching consul key: empty key name")
	}
	key := c.Key(name)
	var (
		index   uint64 // 0 asks for an immediate answer
		called  bool
		last    []byte
		existed bool
		backoff time.Duration
	)
	for {
		start := time.Now()
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: waitTime}).WithContext(ctx)
		pair, meta, err := c.api.KV().Get(key, q)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			backoff = nextBackoff(backoff)
			wait := jitter(backoff)
			c.logger.Warn("watching consul key", "key", key, "address", c.addr, "error", err, "retry_in", wait)
			// Start over with an immediate read: Consul may have been
			// restarted with a lower index.
			index = 0
			if !sleepCtx(ctx, wait) {
				return ctx.Err()
			}
			continue
		}
		backoff = 0

		index = nextIndex(index, meta.LastIndex)

		var value []byte
		exists := pair != nil
		if exists {
			value = pair.Value
		}
		if !called || exists != existed || !bytes.Equal(value, last) {
			called, existed, last = true, exists, value
			fn(bytes.Clone(value), exists)
		}

		if d := minQueryInterval - time.Since(start); d > 0 {
			if !sleepCtx(ctx, d) {
				return ctx.Err()
			}
		}
	}
}

// nextIndex applies Consul's blocking-query rules to the index a response
// returned: reset to 0 (an immediate read) when it went backwards, and
// never wait on an index below 1.
func nextIndex(prev, got uint64) uint64 {
	if got < prev {
		return 0
	}
	if got < 1 {
		return 1
	}
	return got
}

// nextBackoff doubles d within [backoffMin, backoffMax].
func nextBackoff(d time.Duration) time.Duration {
	d *= 2
	if d < backoffMin {
		d = backoffMin
	}
	if d > backoffMax {
		d = backoffMax
	}
	return d
}

// jitter returns d ± 25% at random, so many watchers do not retry in step.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// sleepCtx sleeps for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
