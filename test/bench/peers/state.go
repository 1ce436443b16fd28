package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// Keys of the state part's systems, as the CSV file names them.
const (
	sysStickyd   = "stickyd"
	sysInProcess = "in-process"
	sysRedis     = "redis-" // + the codec
)

// stateResult is one cell of the state part: one system, one state size.
type stateResult struct {
	key   string // sysStickyd, sysInProcess or sysRedis + codec
	label string
	size  benchkit.Size
	pages int
	loadResult
}

// stateSystem is a server the state and live parts measure.
type stateSystem struct {
	key, label string
	srv        *serverProc
	redis      *serverProc // the Redis app's redis-server; nil for the others
}

// measureState runs every state size against stickyd, the Redis app with
// each codec and the in-process app, in turn at each size, so that all of
// them see the machine in the same state.
func measureState(ctx context.Context, e *runEnv) (rs []stateResult, err error) {
	o := e.o
	systems, procs, err := startSystems(ctx, e, "apply")
	defer func() {
		if serr := stopAll(procs); serr != nil && err == nil {
			err = serr
		}
	}()
	if err != nil {
		return nil, err
	}
	for _, size := range o.sizes {
		for _, s := range systems {
			if err := ctx.Err(); err != nil {
				return rs, fmt.Errorf("interrupted: %w", err)
			}
			fmt.Fprintf(e.stderr, "  state %s, %d pages: %s ... ", size.Label, o.pages, s.label)
			r, err := runStateCell(ctx, s.srv.addr, o.pages, size, o.warmup, o.duration)
			if err != nil {
				fmt.Fprintln(e.stderr, "error")
				if note := s.srv.exited(); note != "" {
					err = fmt.Errorf("%w (%s)", err, note)
				}
				return rs, fmt.Errorf("%s, %s state: %w", s.label, size.Label, err)
			}
			fmt.Fprintf(e.stderr, "%.0f msgs/s, p50 %s, p99 %s\n", r.rate(),
				benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)))
			rs = append(rs, stateResult{key: s.key, label: s.label, size: size, pages: o.pages, loadResult: r})
		}
	}
	return rs, nil
}

// startSystems starts what the state and live parts compare: beside the
// shared stickyd agent, redis-server and the Redis app with each codec, and
// the in-process app. verb is what the Redis app does with a message
// between decoding and encoding the page ("apply"), for the labels. The
// caller stops procs (stopAll), also when err is set.
func startSystems(ctx context.Context, e *runEnv, verb string) (systems []stateSystem, procs []*serverProc, err error) {
	o := e.o
	fmt.Fprintln(e.stderr, "starting redis-server")
	rds, err := startRedis(ctx, filepath.Join(e.tmp, "redis"), e.stderr)
	if err != nil {
		return nil, procs, err
	}
	procs = append(procs, rds)
	agent, err := e.sharedAgent(ctx)
	if err != nil {
		return nil, procs, err
	}
	systems = []stateSystem{{key: sysStickyd, label: "stickyd: state in the worker", srv: agent}}
	for _, c := range o.codecs {
		fmt.Fprintf(e.stderr, "starting the Redis app (%s)\n", c)
		// A connection per page and a few spare: no page waits for the pool.
		p, err := startGoServer(ctx, roleRedisApp, []string{"-redis", rds.addr, "-codec", c, "-pool", fmt.Sprint(o.pages + 8)}, e.stderr)
		if err != nil {
			return nil, procs, err
		}
		procs = append(procs, p)
		systems = append(systems, stateSystem{key: sysRedis + c, label: "Redis app (" + c + "): GET, decode, " + verb + ", encode, SET", srv: p, redis: rds})
	}
	fmt.Fprintln(e.stderr, "starting the in-process app")
	mem, err := startGoServer(ctx, roleInProcess, nil, e.stderr)
	if err != nil {
		return nil, procs, err
	}
	procs = append(procs, mem)
	systems = append(systems, stateSystem{key: sysInProcess, label: "in-process: state in the server's memory, no hop", srv: mem})
	return systems, procs, nil
}

// stopAll stops procs, the last started first, and returns the first error.
func stopAll(procs []*serverProc) error {
	var first error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// runStateCell opens pages pages at addr (each its own browser), fills
// each with size bytes of state and acknowledges the fill's deltas, runs
// them closed loop sending inc, and closes them, so the next cell starts
// with nothing held.
func runStateCell(ctx context.Context, addr string, pages int, size benchkit.Size, warmup, window time.Duration) (loadResult, error) {
	ps := make([]*benchkit.Page, pages)
	abort := func() {
		for _, p := range ps {
			if p != nil {
				p.Abort()
			}
		}
	}
	err := benchkit.ForEach(pages, 8, func(i int) error {
		p, err := benchkit.OpenPage(ctx, addr, "", opTimeout)
		if err != nil {
			return fmt.Errorf("page %d: %w", i, err)
		}
		ps[i] = p
		if err := p.Fill(size.Bytes); err != nil {
			return fmt.Errorf("page %d: filling %s: %w", i, size.Label, err)
		}
		return nil
	})
	if err != nil {
		abort()
		return loadResult{}, err
	}
	r, err := drive(ctx, pages, warmup, window, func(i int) error { return ps[i].IncHome() }, abort)
	if err != nil {
		abort()
		return r, err
	}
	err = benchkit.ForEach(pages, 8, func(i int) error { return ps[i].Close() })
	if err != nil {
		abort()
		return r, errors.Join(errors.New("closing the pages"), err)
	}
	return r, nil
}
