package main

import (
	"context"
	"fmt"
	"os"
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
	// costs are what each server process and the client (standClient)
	// spent over the cell's drive.
	costs []procCost
}

// proxySystem is what the proxy part measures: where its clients connect
// (client i to addrs[i % len(addrs)]).
type proxySystem struct {
	key, label string
	addrs      []string
	srv        *serverProc // checked when a cell fails
	// procs lists the system's processes whose CPU a cell reads.
	procs func() ([]costProc, error)
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
	echoes := procs[:o.workers]
	echoProcs := func(stand string) []costProc {
		var cs []costProc
		for i, p := range echoes {
			cs = append(cs, costProc{name: fmt.Sprintf("echo server %d", i+1), stand: stand, pid: p.pid()})
		}
		return cs
	}
	systems := []proxySystem{
		{proxyStickyd, fmt.Sprintf("stickyd: front → %d workers (echo op)", o.workers), []string{agent.addr}, agent,
			func() ([]costProc, error) { return stickydProcs(agent, e.allocsDir()) }},
		{proxyNginx, fmt.Sprintf("nginx (hash $cookie_sid) → %d Go echo servers", o.workers), []string{ngx.addr}, ngx,
			func() ([]costProc, error) {
				cs := []costProc{{name: "nginx master", stand: standFront, pid: ngx.pid()}}
				for _, pid := range childrenOf(ngx.pid()) {
					cs = append(cs, costProc{name: fmt.Sprintf("nginx worker %d", pid), stand: standFront, pid: pid})
				}
				return append(cs, echoProcs(standBehind)...), nil
			}},
		{proxyDirect, fmt.Sprintf("Go echo servers, no proxy (%d)", o.workers), backends, procs[0],
			func() ([]costProc, error) { return echoProcs(standFront), nil }},
	}
	for _, n := range o.conns {
		for _, s := range systems {
			if err := ctx.Err(); err != nil {
				return rs, fmt.Errorf("interrupted: %w", err)
			}
			fmt.Fprintf(e.stderr, "  proxy, %d connections: %s ... ", n, s.label)
			cps, err := s.procs()
			if err != nil {
				return rs, err
			}
			// The client's own CPU is read too: it shares the machine's cores
			// with the servers, and what it spends bounds what they can reach.
			cps = append(cps, costProc{name: "client (this program)", stand: standClient, pid: os.Getpid()})
			r, costs, err := runEchoCell(ctx, s.addrs, n, o.payload, o.warmup, o.duration, cps)
			if err != nil {
				fmt.Fprintln(e.stderr, "error")
				if note := s.srv.exited(); note != "" {
					err = fmt.Errorf("%w (%s)", err, note)
				}
				return rs, fmt.Errorf("%s, %d connections: %w", s.label, n, err)
			}
			fmt.Fprintf(e.stderr, "%.0f msgs/s, p50 %s, p99 %s\n", r.rate(),
				benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)))
			rs = append(rs, proxyResult{key: s.key, label: s.label, conns: n, loadResult: r, costs: costs})
		}
	}
	return rs, nil
}

// runEchoCell opens conns browsers (client i at addrs[i % len(addrs)]),
// each with a WebSocket and a page, runs them closed loop sending echo
// messages of payload bytes, and closes them. It returns what each of procs
// spent over the drive.
func runEchoCell(ctx context.Context, addrs []string, conns, payload int, warmup, window time.Duration, procs []costProc) (loadResult, []procCost, error) {
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
		return loadResult{}, nil, err
	}
	span, err := startCosts(ctx, procs)
	if err != nil {
		return loadResult{}, nil, err
	}
	r, err := drive(ctx, conns, warmup, window, func(i int) error { return cs[i].roundTrip() }, abort)
	if err != nil {
		return r, nil, err
	}
	costs, err := span.end(ctx)
	if err != nil {
		return r, nil, err
	}
	for _, c := range cs {
		c.close()
	}
	return r, costs, nil
}

// cpuPerMsg is the CPU the cell's processes that stand where stand says
// spent per round trip of its drive, in µs.
func (r *proxyResult) cpuPerMsg(stand string) float64 {
	if r.total == 0 {
		return 0
	}
	return float64(sumCosts(r.costs, stand).cpu.Microseconds()) / float64(r.total)
}

// cpuSplit writes the servers' CPU per message as "all (front + behind)",
// or the front's alone for a system with nothing behind it.
func (r *proxyResult) cpuSplit() string {
	front, back := r.cpuPerMsg(standFront), r.cpuPerMsg(standBehind)
	if has, _ := behind(r.costs); !has {
		return perMsgNum(front)
	}
	return fmt.Sprintf("%s (%s + %s)", perMsgNum(front+back), perMsgNum(front), perMsgNum(back))
}
