package consul

import (
	"context"
	"errors"
	"maps"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// WatchTree follows every key under the folder name (relative to the
// prefix, "maintenance/") with blocking queries, as Watch does one key, and
// calls fn with the whole folder, key names relative to it: once at the
// start, then on every change of any key's value, or of the set of keys.
// The same rules hold: values in Consul's order, retries with jittered
// backoff, ctx.Err() when ctx ends.
func (c *Client) WatchTree(ctx context.Context, name string, fn func(kv map[string][]byte)) error {
	if name == "" || !strings.HasSuffix(name, "/") {
		return errors.New("watching a consul folder: the name must end in \"/\"")
	}
	folder := c.Key(name)
	var (
		index   uint64
		called  bool
		last    map[string][]byte
		backoff time.Duration
	)
	for {
		start := time.Now()
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: waitTime}).WithContext(ctx)
		pairs, meta, err := c.api.KV().List(folder, q)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			backoff = nextBackoff(backoff)
			wait := jitter(backoff)
			c.logger.Warn("watching a consul folder", "folder", folder, "address", c.addr, "error", err, "retry_in", wait)
			index = 0
			if !sleepCtx(ctx, wait) {
				return ctx.Err()
			}
			continue
		}
		backoff = 0
		index = nextIndex(index, meta.LastIndex)
		kv := make(map[string][]byte, len(pairs))
		for _, p := range pairs {
			k := strings.TrimPrefix(p.Key, folder)
			if k == "" || strings.HasSuffix(k, "/") {
				continue // the folder itself, or a sub-folder marker
			}
			kv[k] = p.Value
		}
		if !called || !maps.EqualFunc(kv, last, func(a, b []byte) bool { return string(a) == string(b) }) {
			called, last = true, kv
			fn(maps.Clone(kv))
		}
		if d := minQueryInterval - time.Since(start); d > 0 {
			if !sleepCtx(ctx, d) {
				return ctx.Err()
			}
		}
	}
}
