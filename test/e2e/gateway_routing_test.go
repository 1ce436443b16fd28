package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// routingLoad is a closed loop of callers of one model of a gateway: each
// calls again as soon as its answer is in, every other call a stream, and
// the log keeps which deployment served each call (its
// X-Stickyd-Deployment), in the order the answers came.
type routingLoad struct {
	mu     sync.Mutex // guards served
	served []servedCall
	failed atomic.Int64
	first  atomic.Value // the first failure, an error
	stop   chan struct{}
	wg     sync.WaitGroup
}

type servedCall struct {
	start      time.Time
	deployment string
}

func startRoutingLoad(t *testing.T, addr, model string, callers int) *routingLoad {
	t.Helper()
	l := &routingLoad{stop: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: callers}}
	call := func(i int, stream bool) (string, error) {
		content := fmt.Sprintf("c%d", i)
		body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, content)
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), content) || strings.Contains(string(b), `"error"`) {
			return "", fmt.Errorf("HTTP %d: %s (%v)", resp.StatusCode, b, err)
		}
		return resp.Header.Get("X-Stickyd-Deployment"), nil
	}
	for c := range callers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				start := time.Now()
				dep, err := call(i, (c+i)%2 == 0)
				if err != nil {
					if l.failed.Add(1) == 1 {
						l.first.Store(err)
					}
					continue
				}
				l.mu.Lock()
				l.served = append(l.served, servedCall{start: start, deployment: dep})
				l.mu.Unlock()
			}
		}()
	}
	t.Cleanup(l.end)
	return l
}

// end stops the callers and waits for them (idempotent).
func (l *routingLoad) end() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
}

// count is how many calls were answered so far.
func (l *routingLoad) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.served)
}

// share is the share of dep among the answers numbered from..to (to
// excluded) of the calls that started at or after since.
func (l *routingLoad) share(dep string, since time.Time, from, to int) (float64, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n, hit int
	for _, c := range l.served {
		if c.start.Before(since) {
			continue
		}
		if n >= from && n < to {
			if c.deployment == dep {
				hit++
			}
		}
		n++
	}
	if min(n, to)-from <= 0 {
		return 0, 0
	}
	return float64(hit) / float64(min(n, to)-from), min(n, to) - from
}

// since counts the answers of the calls that started at or after t.
func (l *routingLoad) since(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.served {
		if !c.start.Before(t) {
			n++
		}
	}
	return n
}

// Least-busy and latency routing (issue 46, acceptance 4): with 8 callers
// in a closed loop on a model of two deployments, one adding 200 ms, at
// least 80 % of the calls go to the faster; once the slow one is fast
// again and the other slow, the calls follow within 30 s, and again at
// least 80 % go to the faster. Ordered routing would send them all to the
// first deployment, the slow one.
func TestGatewayRoutingPrefersTheFaster(t *testing.T) {
	const (
		callers = 8
		slow    = 200 * time.Millisecond
		measure = 400 // answers per measured share
		window  = 100 // answers the recovery is judged on
		atLeast = 0.8
	)
	pa, pb := newProvider(t, time.Millisecond), newProvider(t, time.Millisecond)
	gw := freePort(t)
	deps := fmt.Sprintf(`
    deployment "a" {
      provider = "openai"
      base_url = %q
      model    = "small-v1"
      price {
        free = true
      }
    }
    deployment "b" {
      provider = "openai"
      base_url = %q
      model    = "small-v1"
      price {
        free = true
      }
    }`, pa.srv.URL+"/v1", pb.srv.URL+"/v1")
	startClusterWith(t, 1, func(int) string {
		return fmt.Sprintf(`
gateway {
  address      = %q
  grpc_address = %q
  model "busy" {
    concurrency = 32
    routing     = "least-busy"
%s
  }
  model "quick" {
    concurrency = 32
    routing     = "latency"
%s
  }
}`, gw, freePort(t), deps, deps)
	})

	for _, tc := range []struct{ routing, model string }{{"least-busy", "busy"}, {"latency", "quick"}} {
		t.Run(tc.routing, func(t *testing.T) {
			pa.hold.Store(int64(slow))
			pb.hold.Store(0)
			// a (first in order) is slow: after a warm-up, b answers.
			began := time.Now()
			l := startRoutingLoad(t, gw, tc.model, callers)
			waitFor(t, 30*time.Second, "warm-up answers", func() bool { return l.count() >= 200 })
			mark := l.count()
			waitFor(t, 60*time.Second, "answers to measure", func() bool { return l.count() >= mark+measure })
			toB, n := l.share("b", began, mark, mark+measure)
			t.Logf("%s, a slow: b (fast) served %.1f %% of %d calls", tc.routing, 100*toB, n)
			if toB < atLeast {
				t.Errorf("%s: the fast deployment served %.1f %% of the calls, want at least %.0f %%", tc.routing, 100*toB, 100*atLeast)
			}

			// a becomes fast, b slow: within 30 s, a serves at least 80 %
			// of the last window of answers.
			pa.hold.Store(0)
			pb.hold.Store(int64(slow))
			swapped := time.Now()
			var recovered time.Duration
			var atRecovery float64
			waitFor(t, 30*time.Second, tc.routing+" following the now fast deployment", func() bool {
				n := l.since(swapped)
				if n < window {
					return false
				}
				if s, _ := l.share("a", swapped, n-window, n); s >= atLeast {
					recovered, atRecovery = time.Since(swapped), s
					return true
				}
				return false
			})
			at := l.since(swapped)
			waitFor(t, 60*time.Second, "answers to measure", func() bool { return l.since(swapped) >= at+measure })
			toA, n := l.share("a", swapped, at, at+measure)
			overall, all := l.share("a", swapped, 0, at+measure)
			t.Logf("%s, b slow: a (fast again) served %.1f %% of the last %d calls within %v, then %.1f %% of %d calls (%.1f %% of all %d since the swap)",
				tc.routing, 100*atRecovery, window, recovered.Round(time.Millisecond), 100*toA, n, 100*overall, all)
			if toA < atLeast {
				t.Errorf("%s: after recovering, the fast deployment served %.1f %% of the calls, want at least %.0f %%", tc.routing, 100*toA, 100*atLeast)
			}
			l.end()
			if f := l.failed.Load(); f > 0 {
				t.Errorf("%d calls failed, the first: %v", f, l.first.Load())
			}
		})
	}
}
