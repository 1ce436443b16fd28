package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// checkLimit bounds the wait for every typist's first round trip after a
// promotion or a rollback returned.
const checkLimit = 2 * time.Minute

// The two measured calls, in order.
const (
	kindPromote  = "promote"
	kindRollback = "rollback"
	// The same two, each person a set of one on the road, parallel at a
	// time (the road as it was before it carried sets), for comparison.
	kindPromoteEach  = "promote, one by one"
	kindRollbackEach = "rollback, one by one"
)

// row is one measured promotion or rollback.
type row struct {
	kind            string
	users, parallel int
	total           time.Duration // the call
	moved, failed   int
	base            []time.Duration // the typists' round trips in the baseline window, sorted
	during          []time.Duration // those overlapping the call, sorted
	moves           []time.Duration // move.Result.Duration of each move, sorted
	check           time.Duration   // every idle page's inc afterwards
}

// sizeResult is what one size measured.
type sizeResult struct {
	users    int
	departed int           // of them, without a WebSocket
	open     time.Duration // opening every page
	rows     []row
}

// measureSize starts a fresh agent with the groups v1 and v2, logs users
// people in on v1, starts the typists and measures the promotion to v2 and
// the rollback; it takes it all down again. The first error of any part
// ends it.
func measureSize(ctx context.Context, o *options, users int, stderr io.Writer) (res sizeResult, err error) {
	res.users = users
	// This process holds the agent's end of every WebSocket and the
	// typists' client ends; the holder the idle people's client ends.
	departed := (users - o.active) * o.departed / 100
	res.departed = departed
	if err := raiseFileLimit(users - departed + o.active + o.concurrency + fileMargin); err != nil {
		return res, err
	}
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	dir, err := os.MkdirTemp("", "stickyd-promote-")
	if err != nil {
		return res, fmt.Errorf("making the data dir: %w", err)
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stderr, "  starting an agent with groups %s and %s, %d subprocess workers each, data in %s\n", oldGroup, newGroup, o.workers, dir)
	a, err := startAgent(ctx, o.workers, dir, log)
	if err != nil {
		return res, fmt.Errorf("starting the agent: %w", err)
	}
	defer func() {
		if serr := benchkit.StopAgent(ctx, a); serr != nil && err == nil {
			err = fmt.Errorf("shutting down the agent: %w", serr)
		}
	}()
	if err := addGroup(ctx, a, newGroup, o.workers); err != nil {
		return res, err
	}

	fail := newFailure()
	// An interrupt stops the run like an error.
	go func() {
		select {
		case <-ctx.Done():
			fail.set(fmt.Errorf("interrupted: %w", ctx.Err()))
		case <-fail.done:
		}
	}()
	defer fail.set(errors.New("the run is over")) // ends the goroutine above

	fmt.Fprintf(stderr, "  opening %d pages, %d at a time: the idle ones in the holder, then %d typists here\n", users, o.concurrency, o.active)
	began := time.Now()
	// The holder's pages first: a typist's page answers no ping until it
	// types, and the front drops a WebSocket silent for 50 s, as long as
	// 100,000 idle pages take to open.
	var h *holder
	if users > o.active {
		if h, err = startHolder(ctx, a.Addr(), o.active, users-o.active, departed, o.concurrency, stderr); err != nil {
			return res, err
		}
	}
	pages := make([]*benchkit.Page, o.active)
	err = benchkit.ForEach(o.active, o.concurrency, func(i int) error {
		p, err := benchkit.OpenPage(ctx, a.Addr(), userName(i), opTimeout)
		if err != nil {
			return fmt.Errorf("opening %s's page: %w", userName(i), err)
		}
		pages[i] = p
		return nil
	})
	if err != nil {
		abortPages(pages)
		if h != nil {
			h.abort()
		}
		return res, err
	}
	res.open = time.Since(began)
	if h != nil {
		// A holder that ends early (its error is on stderr) fails the run.
		go func() {
			select {
			case <-h.exited:
				fail.set(errors.New("the holder of the idle pages ended; its error is above"))
			case <-fail.done:
			}
		}()
	}

	t := startTypists(pages, fail)
	defer func() {
		if err != nil {
			t.kill()
			if h != nil {
				h.abort()
			}
			return
		}
		fmt.Fprintf(stderr, "  closing the pages\n")
		t.halt()
		if cerr := closePages(pages, o.concurrency, userName); cerr != nil {
			err = fmt.Errorf("closing the typists' pages: %w", cerr)
		}
		if h != nil {
			if cerr := h.close(ctx); cerr != nil && err == nil {
				err = cerr
			}
		}
	}()

	if n := a.Supervisor().GroupUsers(oldGroup); n != users {
		return res, fmt.Errorf("%d people placed in %s after logging in, want %d", n, oldGroup, users)
	}
	kinds := []string{kindPromote, kindRollback}
	if o.each {
		kinds = append(kinds, kindPromoteEach, kindRollbackEach)
	}
	for _, kind := range kinds {
		r, err := measureCall(ctx, o, a, t, h, users, kind, fail, stderr)
		if err == nil {
			err = fail.check()
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", kind, err)
		}
		res.rows = append(res.rows, r)
	}
	return res, fail.check()
}

// measureCall measures one promotion to v2 (kind promote) or rollback to
// v1: a baseline window, then the call, then the checks that everyone is
// in the new group.
// promoteEach makes to the default (a promotion from to itself moves
// nobody) and then moves everyone misplaced one by one, parallel at a time.
func promoteEach(ctx context.Context, sup *supervisor.Supervisor, to string, parallel int, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
	if _, err := sup.Promote(ctx, to, to, parallel, nil); err != nil {
		return supervisor.ReconcileResult{}, err
	}
	users := sup.Misplaced(nil)
	rr := supervisor.ReconcileResult{Users: len(users)}
	var (
		mu  sync.Mutex
		wg  sync.WaitGroup
		sem = make(chan struct{}, parallel)
	)
	for _, u := range users {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r, err := sup.MoveToGroup(ctx, u.User, to, "promote")
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				rr.Moved++
			} else {
				rr.Failed++
			}
			progress(r, err)
		}()
	}
	wg.Wait()
	return rr, ctx.Err()
}

func measureCall(ctx context.Context, o *options, a *agent.Agent, t *typists, h *holder, users int, kind string, fail *failure, stderr io.Writer) (row, error) {
	r := row{kind: kind, users: users, parallel: o.parallel}
	to := newGroup
	if kind == kindRollback || kind == kindRollbackEach {
		to = oldGroup
	}
	sup := a.Supervisor()

	fmt.Fprintf(stderr, "  %s: baseline %v, ", kind, o.baseline)
	b0 := time.Now()
	select {
	case <-time.After(o.baseline):
	case <-fail.done:
		return r, fail.err
	}

	var (
		firstErr  error
		done      int
		lastPrint = time.Now()
	)
	// Reconcile calls progress from one goroutine at a time, and returns
	// only after the last call.
	progress := func(m move.Result, err error) {
		done++
		if err != nil {
			r.failed++
			if firstErr == nil {
				firstErr = fmt.Errorf("moving %q from %s: outcome %q: %w", m.User, m.From, m.Outcome, err)
			}
		} else {
			r.moves = append(r.moves, m.Duration)
		}
		if time.Since(lastPrint) >= 2*time.Second {
			fmt.Fprintf(stderr, "%d ", done)
			lastPrint = time.Now()
		}
	}
	fmt.Fprintf(stderr, "moving: ")
	var (
		rr  supervisor.ReconcileResult
		err error
	)
	t0 := time.Now()
	switch kind {
	case kindPromote:
		rr, err = sup.Promote(ctx, newGroup, "", o.parallel, progress)
	case kindPromoteEach, kindRollbackEach:
		rr, err = promoteEach(ctx, sup, to, o.parallel, progress)
	default:
		var prev string
		prev, rr, err = sup.Rollback(ctx, o.parallel, progress)
		if err == nil && prev != oldGroup {
			err = fmt.Errorf("rolled back to %q, want %q", prev, oldGroup)
		}
	}
	t1 := time.Now()
	r.total = t1.Sub(t0)
	fmt.Fprintf(stderr, "%d in %.2f s\n", done, r.total.Seconds())
	if err != nil {
		return r, err
	}
	if firstErr != nil {
		return r, fmt.Errorf("%d of %d moves failed, the first: %w", r.failed, rr.Users, firstErr)
	}
	if rr.Users != users || rr.Moved != users || rr.Failed != 0 {
		return r, fmt.Errorf("%d people to move, %d moved, %d failed; want all %d moved", rr.Users, rr.Moved, rr.Failed, users)
	}
	r.moved = rr.Moved
	slices.Sort(r.moves)

	// The maps: the default, and everyone placed in it.
	if d := sup.DefaultGroup(); d != to {
		return r, fmt.Errorf("the default group is %q, want %q", d, to)
	}
	for i := range users {
		u, ok := sup.User(userName(i))
		switch {
		case !ok:
			return r, fmt.Errorf("%s is not in the maps", userName(i))
		case a.Pool().GroupOf(u.Worker) != to:
			return r, fmt.Errorf("%s is on %s, in group %q, want %q", userName(i), u.Worker, a.Pool().GroupOf(u.Worker), to)
		case u.State == placement.StateMoving:
			return r, fmt.Errorf("%s is still moving", userName(i))
		}
	}

	// The typists: answered by the new group from then on.
	inGroup := func(w string) bool { return a.Pool().GroupOf(w) == to }
	if err := t.checkMoved(ctx, fail, t0, t1, inGroup, checkLimit); err != nil {
		return r, err
	}
	r.base, r.during = t.baseline(b0, t0), t.overlapping(t0, t1)
	if len(r.base) == 0 || len(r.during) == 0 {
		return r, fmt.Errorf("the typists made %d round trips in the baseline and %d during the call", len(r.base), len(r.during))
	}

	// The idle people: their next inc answered by the new group, count
	// continued.
	c0 := time.Now()
	if h != nil {
		if err := h.incAll(ctx, groupWorkers(a, to)); err != nil {
			return r, err
		}
	}
	r.check = time.Since(c0)
	fmt.Fprintf(stderr, "  %s: %.0f moves/s, move p99 %s; typists p99 %s before, %s during; idle pages checked in %.1f s\n",
		kind, float64(r.moved)/r.total.Seconds(), fmtDur(benchkit.Percentile(r.moves, 0.99)),
		fmtDur(benchkit.Percentile(r.base, 0.99)), fmtDur(benchkit.Percentile(r.during, 0.99)), r.check.Seconds())
	return r, nil
}
