package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// oneTab is the size of the live part's one-tab cell, which measures the
// round trip of a tab alone on the server.
var oneTab = benchkit.Size{Label: "1KB", Bytes: 1 << 10}

// liveResult is one cell of the live part: one system, one grid size, a
// number of tabs, and what the servers' processes spent over its drive.
type liveResult struct {
	key   string // sysStickyd, sysInProcess or sysRedis + codec
	label string
	size  benchkit.Size
	tabs  int
	loadResult
	// framesOut and framesIn are the WebSocket frames the tabs wrote and
	// read over the whole drive (loadResult.total round trips).
	framesOut, framesIn int
	// costs are the server processes' counters over the whole drive.
	costs []procCost
	// perWorker counts the tabs by the worker that answered their open.
	perWorker map[string]int
}

// perMsg is n divided by the drive's round trips.
func (r *liveResult) perMsg(n float64) float64 {
	if r.total == 0 {
		return 0
	}
	return n / float64(r.total)
}

// measureLive runs the live part: at each grid size, o.pages tabs on
// stickyd, on the Redis app with each codec and on the in-process app, in
// turn; then one tab alone at 1KB on each.
func measureLive(ctx context.Context, e *runEnv) (rs []liveResult, err error) {
	systems, procs, err := startSystems(ctx, e, "edit")
	defer func() {
		if serr := stopAll(procs); serr != nil && err == nil {
			err = serr
		}
	}()
	if err != nil {
		return nil, err
	}
	type cell struct {
		size benchkit.Size
		tabs int
	}
	var cells []cell
	for _, size := range e.o.sizes {
		cells = append(cells, cell{size, e.o.pages})
	}
	cells = append(cells, cell{oneTab, 1})
	for _, c := range cells {
		for _, s := range systems {
			if err := ctx.Err(); err != nil {
				return rs, fmt.Errorf("interrupted: %w", err)
			}
			fmt.Fprintf(e.stderr, "  live %s, %d tabs: %s ... ", c.size.Label, c.tabs, s.label)
			r, err := runLiveCell(ctx, e, s, c.tabs, c.size)
			if err != nil {
				fmt.Fprintln(e.stderr, "error")
				if note := s.srv.exited(); note != "" {
					err = fmt.Errorf("%w (%s)", err, note)
				}
				return rs, fmt.Errorf("%s, %s grid, %d tabs: %w", s.label, c.size.Label, c.tabs, err)
			}
			fmt.Fprintf(e.stderr, "%.0f msgs/s, p50 %s, p99 %s, CPU %.0f µs/msg\n", r.rate(),
				benchkit.FormatDuration(r.p(0.50)), benchkit.FormatDuration(r.p(0.99)), r.perMsg(float64(sumCosts(r.costs, "").cpu.Microseconds())))
			rs = append(rs, r)
		}
	}
	return rs, nil
}

// runLiveCell opens tabs tabs on s, each a grid of size bytes with a pull
// waiting, drives them closed loop sending edit while reading the servers'
// counters before and after, and closes them, so the next cell starts with
// nothing held.
func runLiveCell(ctx context.Context, e *runEnv, s stateSystem, tabs int, size benchkit.Size) (liveResult, error) {
	r := liveResult{key: s.key, label: s.label, size: size, tabs: tabs, perWorker: map[string]int{}}
	hc := newSiteClient()
	defer hc.CloseIdleConnections()
	ts := make([]*liveTab, tabs)
	abort := func() {
		for _, t := range ts {
			if t != nil {
				t.abort()
			}
		}
	}
	batch := e.o.batch && s.key == sysStickyd // the peers know no batching
	err := benchkit.ForEach(tabs, 8, func(i int) error {
		t, err := openLiveTab(ctx, hc, s.srv.addr, fmt.Sprintf("tab%d", i), batch, size.Bytes)
		if err != nil {
			return fmt.Errorf("tab %d: %w", i, err)
		}
		ts[i] = t
		return nil
	})
	if err != nil {
		abort()
		return r, err
	}
	for _, t := range ts {
		r.perWorker[t.worker]++
		t.resetFrames()
	}
	procs, err := systemProcs(e, s)
	if err != nil {
		abort()
		return r, err
	}
	span, err := startCosts(ctx, procs)
	if err != nil {
		abort()
		return r, err
	}
	r.loadResult, err = drive(ctx, tabs, e.o.warmup, e.o.duration, func(i int) error { return ts[i].edit() }, abort)
	if err != nil {
		abort()
		return r, err
	}
	if r.costs, err = span.end(ctx); err != nil {
		abort()
		return r, err
	}
	for _, t := range ts {
		r.framesOut += t.framesOut
		r.framesIn += t.framesIn
	}
	err = benchkit.ForEach(tabs, 8, func(i int) error { return ts[i].close() })
	if err != nil {
		abort()
		return r, errors.Join(errors.New("closing the tabs"), err)
	}
	return r, nil
}

// systemProcs are the processes of s whose counters a live cell reads.
func systemProcs(e *runEnv, s stateSystem) ([]costProc, error) {
	switch {
	case s.key == sysStickyd:
		return stickydProcs(s.srv, e.allocsDir())
	case s.redis != nil:
		return []costProc{
			{name: "Redis app", stand: standFront, pid: s.srv.pid(), allocs: s.srv.goAllocs},
			{name: "redis-server", stand: standBehind, pid: s.redis.pid()},
		}, nil
	}
	return []costProc{{name: "in-process app", stand: standFront, pid: s.srv.pid(), allocs: s.srv.goAllocs}}, nil
}

// sumCosts adds up the costs of the processes that stand where stand says
// ("": all of them).
func sumCosts(cs []procCost, stand string) procCounters {
	var sum procCounters
	for _, c := range cs {
		if stand == "" || c.stand == stand {
			sum.cpu += c.cpu
			sum.writes += c.writes
			sum.allocs += c.allocs
		}
	}
	return sum
}

// behind says whether any process of cs stands behind the front, and
// whether all of those are Go processes (have allocations to report).
func behind(cs []procCost) (has, allGo bool) {
	allGo = true
	for _, c := range cs {
		if c.stand == standBehind {
			has = true
			allGo = allGo && c.isGo
		}
	}
	return has, has && allGo
}
