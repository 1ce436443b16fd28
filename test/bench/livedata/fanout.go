package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// The tables: the one every subscriber watches, and one nobody watches.
const (
	watchedTable   = "t"
	unwatchedTable = "nobody"
)

// The paths where the counter app's OnTableChange records what the page
// heard of the watched table: how many changes, when the last one arrived
// (the worker's clock, unix nanoseconds) and what it said.
const (
	heardPath     = "heard/" + watchedTable
	heardAtPath   = "heard_at/" + watchedTable
	heardDataPath = "heard_data/" + watchedTable
)

const (
	// minSettle and maxSettle bound the wait between a publish's answer and
	// the collector's first pull (see fanOut.measure).
	minSettle = 10 * time.Millisecond
	maxSettle = 5 * time.Second
	// collectLimit bounds how long the collector waits for one page to
	// hear one change before the page counts as having missed it.
	collectLimit = time.Minute
	// indexLimit bounds the wait for the maps to record that a worker
	// watches the table, and for the agent to count the publishes.
	indexLimit = 30 * time.Second
)

// subscriber is a page subscribed to the watched table, and how many of
// its changes it must have heard. Only the collector touches expect, one
// goroutine per page at a time.
type subscriber struct {
	*page
	expect int
}

// fanOutRow is what one subscriber count measured.
type fanOutRow struct {
	n          int
	pubWorker  string
	spread     map[string]int  // subscribers per worker
	local      []time.Duration // delivery latencies on the publisher's worker, sorted
	remote     []time.Duration // on the other workers, sorted
	watched    []time.Duration // the measured publishes' round trips, sorted
	unwatched  []time.Duration // the round trips of publishes nobody watches, sorted
	overlapped int             // deliveries recorded after the collector's first pull
	settle     time.Duration   // the longest wait before collecting
	open       time.Duration   // opening and subscribing the new pages
	collect    time.Duration   // the longest collection of a round
	sends      float64         // the agent's sends to workers per measured publish
	unwCounts  tableCounts     // the metrics' change over the unwatched publishes
}

// fanOut is the fan-out measurement's state: the agent, the publisher and
// the subscribers so far (each count adds pages to those already open).
type fanOut struct {
	o      *options
	a      *agent.Agent
	pub    *page
	subs   []*subscriber
	seq    int // the last change published; each change carries its number
	stderr io.Writer
}

// measureFanOut measures every subscriber count in turn, in ascending
// order, on the agent a, and closes every page it opened.
func measureFanOut(ctx context.Context, o *options, a *agent.Agent, stderr io.Writer) (rows []fanOutRow, err error) {
	f := &fanOut{o: o, a: a, stderr: stderr}
	pubs, err := openPages(ctx, a.Addr(), []string{"publisher"}, 1, "publisher page", ackAll(ctx), stderr)
	if err != nil {
		return nil, err
	}
	f.pub = pubs[0]
	defer func() {
		pages := []*page{f.pub}
		for _, s := range f.subs {
			pages = append(pages, s.page)
		}
		if err != nil {
			abortPages(pages)
			return
		}
		fmt.Fprintf(stderr, "  closing %d pages\n", len(pages))
		if cerr := closePages(ctx, pages, o.concurrency); cerr != nil {
			err = fmt.Errorf("closing the fan-out pages: %w", cerr)
		}
	}()
	for _, n := range o.subscribers {
		fmt.Fprintf(stderr, "fan-out to %d subscribers:\n", n)
		r, err := f.measure(ctx, n)
		if err != nil {
			return rows, fmt.Errorf("%d subscribers: %w", n, err)
		}
		rows = append(rows, r)
	}
	return rows, f.verifyQuiet(ctx)
}

// ackAll pulls and acknowledges a new page's first deltas (its zero
// counter), so that what the page pulls later is only what it heard.
func ackAll(ctx context.Context) func(*page) error {
	return func(p *page) error {
		_, err := p.pull(ctx, 0)
		return err
	}
}

// measure opens and subscribes the pages up to n, checks that the maps
// know every worker with subscribers, times publishes of a table nobody
// watches, then runs one warm-up round and o.publishes measured rounds.
func (f *fanOut) measure(ctx context.Context, n int) (fanOutRow, error) {
	r := fanOutRow{n: n, pubWorker: f.pub.worker}
	var names []string
	for i := len(f.subs); i < n; i++ {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	began := time.Now()
	pages, err := openPages(ctx, f.a.Addr(), names, f.o.concurrency, "subscriber pages", func(p *page) error {
		if _, _, err := p.msg(ctx, map[string]any{"op": "sub", "table": watchedTable}); err != nil {
			return err
		}
		return ackAll(ctx)(p)
	}, f.stderr)
	if err != nil {
		return r, err
	}
	for _, p := range pages {
		f.subs = append(f.subs, &subscriber{page: p})
	}
	r.open = time.Since(began)
	r.spread = map[string]int{}
	for _, s := range f.subs {
		r.spread[s.worker]++
	}
	if err := f.awaitIndex(ctx, r.spread); err != nil {
		return r, err
	}

	// Publishes nobody watches: the publisher's round trip, and no send.
	before, err := readTableCounts(ctx, f.a)
	if err != nil {
		return r, err
	}
	for range f.o.publishes {
		f.seq++
		_, sent, err := f.pub.msg(ctx, map[string]any{"op": "pub", "table": unwatchedTable, "v": f.seq})
		if err != nil {
			return r, fmt.Errorf("publishing a change of %q: %w", unwatchedTable, err)
		}
		r.unwatched = append(r.unwatched, time.Since(sent))
	}
	k := float64(f.o.publishes)
	if r.unwCounts, err = f.countsSince(ctx, before, k); err != nil {
		return r, err
	}
	if r.unwCounts.published != k || r.unwCounts.unwatched != k || r.unwCounts.sends != 0 {
		return r, fmt.Errorf("%v publishes of %q: the agent counted %v published, %v unwatched, %v sends",
			k, unwatchedTable, r.unwCounts.published, r.unwCounts.unwatched, r.unwCounts.sends)
	}

	// The watched table: one warm-up round, then the measured rounds. The
	// wait before collecting is twice the slowest delivery seen so far at
	// this count, the warm-up's included.
	fmt.Fprintf(f.stderr, "  %d publishes of %q (one warm-up): ", f.o.publishes+1, watchedTable)
	warm, err := f.round(ctx, 0)
	if err != nil {
		return r, fmt.Errorf("warm-up publish: %w", err)
	}
	slowest := warm.slowest
	before, err = readTableCounts(ctx, f.a)
	if err != nil {
		return r, err
	}
	for i := range f.o.publishes {
		settle := min(max(2*slowest, minSettle), maxSettle)
		res, err := f.round(ctx, settle)
		if err != nil {
			return r, fmt.Errorf("publish %d: %w", i+1, err)
		}
		slowest = max(slowest, res.slowest)
		r.settle = max(r.settle, settle)
		r.collect = max(r.collect, res.collect)
		r.local = append(r.local, res.local...)
		r.remote = append(r.remote, res.remote...)
		r.watched = append(r.watched, res.rtt)
		r.overlapped += res.overlapped
		fmt.Fprintf(f.stderr, "%d ", i+1)
	}
	fmt.Fprintln(f.stderr)
	got, err := f.countsSince(ctx, before, k)
	if err != nil {
		return r, err
	}
	others := 0
	for w := range r.spread {
		if w != f.pub.worker {
			others++
		}
	}
	if got.published != k || got.unwatched != 0 || got.sends != k*float64(others) {
		return r, fmt.Errorf("%v publishes of %q watched on %d other workers: the agent counted %v published, %v unwatched, %v sends",
			k, watchedTable, others, got.published, got.unwatched, got.sends)
	}
	r.sends = got.sends / k
	for _, d := range [][]time.Duration{r.local, r.remote, r.watched, r.unwatched} {
		slices.Sort(d)
	}
	fmt.Fprintf(f.stderr, "  local p50 %s, remote p50 %s, publish round trip p50 %s (unwatched %s)\n",
		fmtDur(pct(r.local, 0.5)), fmtDur(pct(r.remote, 0.5)), fmtDur(pct(r.watched, 0.5)), fmtDur(pct(r.unwatched, 0.5)))
	return r, nil
}

// countsSince waits until the agent has counted published more changes
// than in before (its workers tell it of a publish after answering it, and
// it counts them in order, in a goroutine of its own), and returns the
// metrics' change since before.
func (f *fanOut) countsSince(ctx context.Context, before tableCounts, published float64) (tableCounts, error) {
	deadline := time.Now().Add(indexLimit)
	for {
		now, err := readTableCounts(ctx, f.a)
		if err != nil {
			return tableCounts{}, err
		}
		d := now.minus(before)
		if d.published >= published || time.Now().After(deadline) {
			return d, nil
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return d, err
		}
	}
}

// awaitIndex waits until the maps record that every worker with
// subscribers watches the table: before, a publish would not be carried to
// it.
func (f *fanOut) awaitIndex(ctx context.Context, workers map[string]int) error {
	deadline := time.Now().Add(indexLimit)
	for {
		subs := f.a.FSM().Subscribers(watchedTable)
		missing := ""
		for w := range workers {
			if !slices.Contains(subs, w) {
				missing = w
			}
		}
		if missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the maps do not record %s as watching %q after %v (they list %v)", missing, watchedTable, indexLimit, subs)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
}

// roundResult is one publish to every subscriber.
type roundResult struct {
	rtt           time.Duration   // the publish op's round trip
	local, remote []time.Duration // delivery latencies
	slowest       time.Duration
	overlapped    int
	collect       time.Duration // from the collector's first pull to its last answer
}

// round publishes one change of the watched table, carrying the next
// number, waits settle so that the collector's pulls do not compete with
// the deliveries, then pulls every subscriber until it has heard the
// change. Each page's delivery latency is its heard_at (written by
// OnTableChange on the worker, same machine, same clock) minus the time
// just before the publish op was written to the publisher's WebSocket.
// A page that hears the change more than once, or misses it, fails the
// round.
func (f *fanOut) round(ctx context.Context, settle time.Duration) (roundResult, error) {
	var r roundResult
	f.seq++
	v := f.seq
	_, sent, err := f.pub.msg(ctx, map[string]any{"op": "pub", "table": watchedTable, "v": v})
	if err != nil {
		return r, fmt.Errorf("publishing change %d: %w", v, err)
	}
	r.rtt = time.Since(sent)
	if err := sleep(ctx, settle); err != nil {
		return r, err
	}
	start := time.Now()
	lat := make([]time.Duration, len(f.subs))
	err = benchkit.ForEach(len(f.subs), f.o.concurrency, func(i int) error {
		s := f.subs[i]
		s.expect++
		at, err := s.await(ctx, v)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", s.user, s.worker, err)
		}
		lat[i] = at.Sub(sent)
		if lat[i] < 0 {
			return fmt.Errorf("%s on %s heard change %d at %v, before it was published (%v)", s.user, s.worker, v, at, sent)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	r.collect = time.Since(start)
	for i, s := range f.subs {
		if s.worker == f.pub.worker {
			r.local = append(r.local, lat[i])
		} else {
			r.remote = append(r.remote, lat[i])
		}
		r.slowest = max(r.slowest, lat[i])
		if sent.Add(lat[i]).After(start) {
			r.overlapped++
		}
	}
	return r, nil
}

// await pulls the page until it has heard change v and returns when the
// worker recorded it. The page must have heard exactly s.expect changes
// by then; the only deltas it may receive are OnTableChange's.
func (s *subscriber) await(ctx context.Context, v int) (time.Time, error) {
	deadline := time.Now().Add(collectLimit)
	var (
		heard, data float64
		at          int64
		seen        bool // heard, heard_at and heard_data of this round
	)
	for {
		wait := time.Until(deadline)
		if wait <= 0 {
			return time.Time{}, fmt.Errorf("change %d not heard within %v (heard %v changes, the last %v)", v, collectLimit, heard, data)
		}
		ds, err := s.pull(ctx, min(wait, 20*time.Second))
		if err != nil {
			return time.Time{}, err
		}
		for _, d := range ds {
			if d.Op != "set" {
				return time.Time{}, fmt.Errorf("unexpected delta %s %q (seq %d)", d.Op, d.Path, d.Seq)
			}
			var x float64
			if err := json.Unmarshal(d.Value, &x); err != nil {
				return time.Time{}, fmt.Errorf("delta %q: %s is not a number", d.Path, d.Value)
			}
			switch d.Path {
			case heardPath:
				heard = x
			case heardAtPath:
				at = int64(x)
			case heardDataPath:
				data, seen = x, heard != 0 && at != 0
			default:
				return time.Time{}, fmt.Errorf("unexpected delta %s %q (seq %d)", d.Op, d.Path, d.Seq)
			}
		}
		if data == float64(v) && seen {
			break
		}
	}
	if heard != float64(s.expect) {
		return time.Time{}, fmt.Errorf("the page has heard %v changes of %q, want %d (a change missed or heard twice)", heard, watchedTable, s.expect)
	}
	return time.Unix(0, at), nil
}

// verifyQuiet pulls every page once more: none may have heard anything
// since its last round (a change delivered twice, late), and the
// publisher, which subscribes to nothing, nothing at all.
func (f *fanOut) verifyQuiet(ctx context.Context) error {
	pages := []*page{f.pub}
	for _, s := range f.subs {
		pages = append(pages, s.page)
	}
	var mu sync.Mutex
	heard := map[int]int{} // pages by changes heard
	err := benchkit.ForEach(len(pages), f.o.concurrency, func(i int) error {
		p := pages[i]
		ds, err := p.pull(ctx, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", p.user, err)
		}
		if len(ds) > 0 {
			return fmt.Errorf("%s on %s: %d deltas after its last round, the first %s %q = %s",
				p.user, p.worker, len(ds), ds[0].Op, ds[0].Path, ds[0].Value)
		}
		if i > 0 {
			mu.Lock()
			heard[f.subs[i-1].expect]++
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("checking the pages at the end: %w", err)
	}
	fmt.Fprintf(f.stderr, "  every page checked at the end, none heard anything more (subscribers by changes heard: %v)\n", heard)
	return nil
}
