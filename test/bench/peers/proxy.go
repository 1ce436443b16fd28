package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// Keys of the proxy part's systems, as the CSV file names them.
const (
	proxyStickyd = "stickyd"
	proxyNginx   = "nginx"
	proxyDirect  = "direct"
)

// proxyResult is one cell of the proxy part: one system, one number of
// connections.
type proxyResult struct {
	key   string // proxyStickyd, proxyNginx or proxyDirect
	label string
	conns int
	loadResult
}

// proxySystem is what the proxy part measures: where its clients connect
// (client i to addrs[i % len(addrs)]).
type proxySystem struct {
	key, label string
	addrs      []string
	srv        *serverProc // checked when a cell fails
}

// measureProxy runs every connection count against stickyd's front, nginx
// and the Go echo servers without a proxy, in turn at each count.
func measureProxy(ctx context.Context, e *runEnv) (rs []proxyResult, err error) {
	o := e.o
	var procs []*serverProc
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			if serr := procs[i].stop(); serr != nil && err == nil {
				err = serr
			}
		}
	}()
	fmt.Fprintf(e.stderr, "starting %d Go echo servers\n", o.workers)
	var backends []string
	for range o.workers {
		p, err := startGoServer(ctx, roleEcho, nil, e.stderr)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		backends = append(backends, p.addr)
	}
	fmt.Fprintln(e.stderr, "starting nginx")
	ngx, err := startNginx(ctx, filepath.Join(e.tmp, "nginx-proxy"), backends, e.stderr)
	if err != nil {
		return nil, err
	}
	procs = append(procs, ngx)
	agent, err := e.sharedAgent(ctx)
	if err != nil {
		return nil, err
	}
	systems := []proxySystem{
		{proxyStickyd, fmt.Sprintf("stickyd: front → %d workers (echo op)", o.workers), []string{agent.addr}, agent},
		{proxyNginx, fmt.Sprintf("nginx (hash $cookie_sid) → %d Go echo servers", o.workers), []string{ngx.addr}, ngx},
		{proxyDirect, fmt.Sprintf("Go echo servers, no proxy (%d)", o.workers), backends, procs[0]},
	}
	for _, n := range o.conns {
		for _, s := range systems {
			if err := ctx.Err(); err != nil {
				return rs, fmt.Errorf("interrupted: %w", err)
			}
			fmt.Fprintf(e.stderr, "  proxy, %d connections: %s ... ", n, s.label)
			r, err := runEchoCell(ctx, s.addrs, n, o.payload, o.warmup, o.duration)
			if err != nil {
				fmt.Fprintln(e.stderr, "error")
				if note := s.srv.exited(); note != "" {
					err = fmt.Errorf("%w (%s)", err, note)
				}
				return rs, fmt.Errorf("%s, %d connections: %w", s.label, n, err)
			}
			fmt.Fprintf(e.stderr, "%.0f msgs/s, p50 %s, p99 %s\n", r.rate(),
				benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)))
			rs = append(rs, proxyResult{key: s.key, label: s.label, conns: n, loadResult: r})
		}
	}
	return rs, nil
}

// runEchoCell opens conns browsers (client i at addrs[i % len(addrs)]),
// each with a WebSocket and a page, runs them closed loop sending echo
// messages of payload bytes, and closes them.
func runEchoCell(ctx context.Context, addrs []string, conns, payload int, warmup, window time.Duration) (loadResult, error) {
	hc := newSiteClient()
	defer hc.CloseIdleConnections()
	cs := make([]*echoClient, conns)
	abort := func() {
		for _, c := range cs {
			if c != nil {
				c.abort()
			}
		}
	}
	defer abort()
	err := benchkit.ForEach(conns, 32, func(i int) error {
		c, err := openEchoClient(ctx, hc, addrs[i%len(addrs)], payload)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		cs[i] = c
		return nil
	})
	if err != nil {
		return loadResult{}, err
	}
	r, err := drive(ctx, conns, warmup, window, func(i int) error { return cs[i].roundTrip() }, abort)
	if err != nil {
		return r, err
	}
	for _, c := range cs {
		c.close()
	}
	return r, nil
}
