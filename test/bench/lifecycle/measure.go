package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

func measure(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	dir, err := os.MkdirTemp("", "stickyd-lifecycle-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	g, err := benchkit.CounterGroup(benchkit.ModeSubprocess, o.workers)
	if err != nil {
		return nil, err
	}
	cfg := benchkit.AgentConfig(log, g)
	cfg.DataDir = dir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	off := 0.0
	cfg.Front.NewcomerRate = &off // every client here comes from one address
	cfg.Lifecycle = &agent.LifecycleConfig{IdlePark: o.idlePark.String(), ForgetAfter: o.forget.String()}
	fmt.Fprintf(stderr, "starting an agent with %d subprocess workers, data in %s\n", o.workers, dir)
	a, err := benchkit.StartAgent(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer benchkit.StopAgent(ctx, a)
	front, admin := a.Addr(), a.AdminAddr()
	const timeout = 30 * time.Second

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg      sync.WaitGroup
		errOnce sync.Once
		runErr  error
	)
	fail := func(err error) {
		errOnce.Do(func() { runErr = err; cancel() })
	}
	r := &report{}
	var visitors, returned, woken, crawled atomic.Int64

	// The stayers.
	for i := range o.stayers {
		p, err := benchkit.OpenPage(ctx, front, "stay"+strconv.Itoa(i), timeout)
		if err != nil {
			return nil, fmt.Errorf("stayer %d: %w", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Close()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for n := 0; ; {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				if _, err := p.Inc(); err != nil && ctx.Err() == nil {
					fail(fmt.Errorf("stayer %d: %w", i, err))
					return
				}
				// Pulling what changed acknowledges it, as client.js does:
				// a page that never pulls keeps up to 4,096 deltas on its
				// worker, which would read here as a slow growth.
				if n++; n%5 == 0 {
					if _, err := p.Ack(); err != nil && ctx.Err() == nil {
						fail(fmt.Errorf("stayer %d acknowledging: %w", i, err))
						return
					}
				}
			}
		}()
	}

	// The visitors, arriving at o.visitors a second.
	pace := func(rate float64, f func(n int64)) {
		defer wg.Done()
		if rate <= 0 {
			return
		}
		every := time.Duration(float64(time.Second) / rate)
		next := time.Now()
		var n int64
		for ctx.Err() == nil {
			next = next.Add(every)
			if d := time.Until(next); d > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(d):
				}
			}
			n++
			f(n)
		}
	}
	var inFlight sync.WaitGroup
	wg.Add(1)
	go pace(o.visitors, func(n int64) {
		inFlight.Go(func() {
			p, err := benchkit.OpenPage(ctx, front, "", timeout)
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("visitor %d: %w", n, err))
				}
				return
			}
			for range 3 {
				if _, err := p.Inc(); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("visitor %d: %w", n, err))
					}
					p.Abort()
					return
				}
			}
			visitors.Add(1)
			if rand.Float64() >= o.returning {
				_ = p.Close()
				return
			}
			// Gone for a while (their person is parked meanwhile), then
			// back once: the inc wakes them with their count.
			p.Detach()
			select {
			case <-ctx.Done():
				return
			case <-time.After(2 * o.idlePark):
			}
			if err := p.Reattach(ctx); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("visitor %d coming back: %w", n, err))
				}
				return
			}
			if _, err := p.Inc(); err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("visitor %d coming back: %w", n, err))
				}
				p.Abort()
				return
			}
			returned.Add(1)
			woken.Add(1)
			_ = p.Close()
		})
	})
	// The crawlers.
	crawler := &http.Client{Timeout: timeout}
	paths := []string{"/", "/assets/app.css", "/robots.txt", "/static/logo.png"}
	wg.Add(1)
	go pace(o.crawl, func(n int64) {
		inFlight.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+front+paths[n%int64(len(paths))], nil)
			resp, err := crawler.Do(req)
			if err != nil {
				if ctx.Err() == nil {
					fail(fmt.Errorf("crawler request %d: %w", n, err))
				}
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 && ctx.Err() == nil {
				fail(fmt.Errorf("crawler request %d: HTTP %d", n, resp.StatusCode))
				return
			}
			crawled.Add(1)
		})
	})

	// The samples.
	began := time.Now()
	last := began
	lastParked, lastForgotten := 0.0, 0.0
	lastWoken := int64(0)
	t := time.NewTicker(o.sample)
	defer t.Stop()
	for time.Since(began) < o.duration && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		s := sample{at: now.Sub(began), interval: now.Sub(last)}
		s.conns, s.people = a.FSM().Counts()
		for _, w := range a.Pool().Workers() {
			s.heap += w.HeapBytes
			s.rss += w.RSSBytes
		}
		if s.snapshot, err = snapshotSize(ctx, admin, a.Token()); err != nil {
			fail(err)
			break
		}
		text, err := metrics(ctx, admin, a.Token())
		if err != nil {
			fail(err)
			break
		}
		parked := metricSum(text, "stickyd_move_moves_total", `reason="idle"`, `outcome="moved"`)
		forgotten := metricSum(text, "stickyd_lifecycle_forgotten_total")
		s.parked, s.forgotten = parked-lastParked, forgotten-lastForgotten
		w := woken.Load()
		s.woken = w - lastWoken
		lastParked, lastForgotten, lastWoken, last = parked, forgotten, w, now
		r.samples = append(r.samples, s)
		fmt.Fprintf(stderr, "  %v: %d people, %d connections, snapshot %d B, workers' heap %d KiB, RSS %d KiB\n",
			s.at.Round(time.Second), s.people, s.conns, s.snapshot, s.heap>>10, s.rss>>10)
	}
	cancel()
	wg.Wait()
	inFlight.Wait()
	if runErr != nil {
		return nil, runErr
	}
	if err := ctx.Err(); err != nil && len(r.samples) == 0 {
		return nil, err
	}
	r.visitors, r.returned, r.crawled = visitors.Load(), returned.Load(), crawled.Load()
	return r, nil
}

func adminGet(ctx context.Context, admin, token, path string) ([]byte, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+path, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	return b, nil
}

// snapshotSize is the size of a raft snapshot of the maps taken now.
func snapshotSize(ctx context.Context, admin, token string) (int, error) {
	b, err := adminGet(ctx, admin, token, "/v1/operator/snapshot")
	if err != nil {
		return 0, fmt.Errorf("taking a snapshot: %w", err)
	}
	return len(b), nil
}

func metrics(ctx context.Context, admin, token string) (string, error) {
	b, err := adminGet(ctx, admin, token, "/v1/metrics")
	if err != nil {
		return "", fmt.Errorf("reading the metrics: %w", err)
	}
	return string(b), nil
}

// metricSum adds up the samples of the metric name whose labels hold every
// one of labels, in the text exposition format.
func metricSum(text, name string, labels ...string) float64 {
	total := 0.0
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) || (len(line) > len(name) && line[len(name)] != '{' && line[len(name)] != ' ') {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			total += v
		}
	}
	return total
}
