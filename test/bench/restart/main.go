// Command restart measures what a full restart of an agent costs the people
// it holds: how long SIGTERM takes to park N people (10,000 by default), how
// long after the new process is executed its front serves again and serves
// the first parked person with their state, and the latency of the first
// request of a person whose page holds 100 KB, which wakes them from their
// parked package.
//
// The agent is a real `stickyd agent` process: this binary, re-executed with
// STICKYD_BENCH_AGENT=1, runs the command line (internal/command) on an HCL
// configuration with a temporary data dir, free loopback ports, an admin
// token and one group whose workers are this binary again, re-executed as
// the counter worker plugin (STICKYD_BENCH_WORKER=counter).
//
// Every person is a browser of their own (a cookie jar) that loads the site,
// logs in with POST /login?user=NAME, opens one counter page and sends one
// inc, all over plain HTTP: the page ops go to the front's long-poll
// fallback, POST /_stickyd/op, which is far cheaper to create by the
// thousand than a WebSocket per person. A subset (-wakers) then fills its
// page with {"op":"fill","bytes":N} and pulls and acknowledges the big delta.
// The agent is stopped with SIGTERM (it parks everyone) and started again;
// every person's next inc must continue their count, and each waker's page
// must resume without a resync or a notice.
//
//	go run ./test/bench/restart            # full run: 10,000 users, ~1 min on 2 cores
//	go run ./test/bench/restart -quick     # smoke run: 1,000 users, 50 wakers
//
// It prints the machine it ran on and a Markdown table on stdout, progress
// on stderr. Any failed request, a person not served with their state, or
// an agent that does not stop cleanly fails the run with a non-zero exit:
// an error is never counted as a result. It must stay a program that prints
// a table, never a timed assertion.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "restart",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() {
	// The worker check comes first: the workers inherit the agent's
	// environment, agentEnv included.
	if benchkit.ServeWorkerIfAsked() {
		return
	}
	if os.Getenv(agentEnv) == "1" {
		os.Exit(command.Run(os.Args[1:], nil))
	}
	program.Main()
}

// options are the parsed flags.
type options struct {
	users       int
	wakers      int
	state       benchkit.Size
	concurrency int // browsers at work at once while creating and waking everyone
	parallel    int // wakers measured at once
	workers     int
	dir         string // where the temp dir with the agent's data goes
	logLevel    hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("restart", "smoke run: -users 1000 -wakers 50 unless given", stderr)
	users := fs.Int("users", 10000, "people parked by the stop, each its own browser with one open counter page")
	wakers := fs.Int("wakers", 200, "people among them whose page holds -state, whose first request after the restart is measured")
	state := fs.String("state", "100KB", "page state of each waker (B, KB, MB; 1KB = 1024 bytes)")
	concurrency := fs.Int("concurrency", 32, "browsers at work at once while creating the people and waking the others")
	parallel := fs.Int("parallel", 4, "wakers whose first request is in flight at once")
	workers := fs.Int("workers", 2, "subprocess workers of the agent's group")
	dir := fs.String("dir", "", "directory the agent's data dir is made in (its raft log and fsynced packages); default the system's temp dir")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{users: *users, wakers: *wakers, concurrency: *concurrency, parallel: *parallel, workers: *workers, dir: *dir}
	if fs.QuickDefault("users") {
		o.users = 1000
	}
	if fs.QuickDefault("wakers") {
		o.wakers = 50
	}
	var err error
	if o.state.Bytes, err = benchkit.ParseSize(*state); err != nil {
		return nil, fmt.Errorf("-state: %w", err)
	}
	o.state.Label = *state
	switch {
	case o.users < 2:
		return nil, errors.New("-users must be at least 2: one person is the first served, the others are woken after")
	case o.wakers < 1 || o.wakers > o.users-1:
		return nil, fmt.Errorf("-wakers must be from 1 to -users minus one (%d)", o.users-1)
	case o.concurrency < 1 || o.parallel < 1:
		return nil, errors.New("-concurrency and -parallel must be at least 1")
	case o.workers < 1:
		return nil, errors.New("-workers must be at least 1")
	}
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// report is what a run measured.
type report struct {
	firstStart time.Duration // exec → health 200 with an empty data dir
	created    time.Duration // creating every person (and filling the wakers)
	filled     time.Duration // of which filling the wakers' pages

	stop       time.Duration // SIGTERM → the process exited
	parkBegin  time.Duration // SIGTERM → "parking everyone" logged; -1 if not seen
	parkEnd    time.Duration // SIGTERM → "parked everyone" logged; -1 if not seen
	packages   int           // package files in the park store after the stop
	parkBytes  int64         // their total size
	raftBytes  int64         // the raft directory's size after the stop
	restartRep restartReport // /_stickyd/health's restart report after the start

	starting     restartTimes  // exec → each part of the start; -1 where a line was not seen
	health       time.Duration // exec → the first GET /_stickyd/health answered 200
	firstServed  time.Duration // exec → the first parked person's inc answered with their count
	firstLatency time.Duration // that inc's own round trip
	firstUser    string

	wakes []time.Duration // the wakers' first requests, sorted

	others     int           // everyone else, woken after the wakers
	othersTime time.Duration // waking them all
	stopAgain  time.Duration // the last stop, with everyone awake again
}

// measure starts the agent, creates the people, restarts the agent and
// measures the wakes; the first error of any part ends the run.
func measure(ctx context.Context, o *options, stderr io.Writer) (rep *report, err error) {
	rep = &report{}
	dir, err := os.MkdirTemp(o.dir, "stickyd-restart-")
	if err != nil {
		return nil, fmt.Errorf("making the temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ag, err := newAgentProc(dir, o.workers, o.logLevel, stderr)
	if err != nil {
		return nil, err
	}
	defer ag.kill() // a no-op once it stopped cleanly

	fmt.Fprintf(stderr, "starting an agent process with %d subprocess workers, data in %s\n", o.workers, dir)
	if rep.firstStart, err = ag.start(ctx); err != nil {
		return nil, fmt.Errorf("first start: %w", err)
	}

	people := newPeople(ag.front, o.users, o.wakers)
	fmt.Fprintf(stderr, "creating %d users, %d at a time ... ", o.users, o.concurrency)
	began := time.Now()
	if err := people.create(ctx, o.concurrency); err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, err
	}
	fmt.Fprintf(stderr, "%.1fs; filling %d pages with %s ... ", time.Since(began).Seconds(), o.wakers, o.state.Label)
	fillStart := time.Now()
	if err := people.fill(ctx, o.concurrency, o.state.Bytes); err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, err
	}
	rep.filled = time.Since(fillStart)
	rep.created = time.Since(began)
	fmt.Fprintf(stderr, "%.1fs\n", rep.filled.Seconds())

	fmt.Fprintf(stderr, "stopping the agent (SIGTERM) ... ")
	st, err := ag.stop(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, fmt.Errorf("stopping the agent with %d people: %w", o.users, err)
	}
	rep.stop, rep.parkBegin, rep.parkEnd = st.total, st.parkBegin, st.parkEnd
	fmt.Fprintf(stderr, "%.1fs\n", rep.stop.Seconds())
	people.dropConnections() // the old process's keep-alive connections are dead
	if rep.packages, rep.parkBytes, err = dirSize(ag.parkDir()); err != nil {
		return nil, err
	}
	if _, rep.raftBytes, err = dirSize(ag.raftDir()); err != nil {
		return nil, err
	}

	fmt.Fprintf(stderr, "starting it again ... ")
	first := people.first()
	rs, err := ag.restart(ctx, func(ctx context.Context) error { return first.incUntilServed(ctx) })
	if err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, fmt.Errorf("restarting with %d parked people: %w", o.users, err)
	}
	rep.starting, rep.health, rep.firstServed = rs, rs.health, rs.probe
	rep.firstLatency, rep.firstUser = first.lastTrip, first.name
	fmt.Fprintf(stderr, "health %.2fs, first person served %.2fs\n", rep.health.Seconds(), rep.firstServed.Seconds())
	if rep.restartRep, err = ag.restartReport(ctx); err != nil {
		return nil, err
	}
	if r := rep.restartRep; r.Parked != o.users || r.Missing != 0 || len(r.Incomplete) != 0 || r.Folder == "" {
		return nil, fmt.Errorf("the restart report says %+v, want %d parked from a complete folder and none missing", r, o.users)
	}

	fmt.Fprintf(stderr, "waking %d people holding %s, %d at a time ... ", o.wakers, o.state.Label, o.parallel)
	if rep.wakes, err = people.wakeFilled(ctx, o.parallel); err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, err
	}
	fmt.Fprintf(stderr, "p50 %s\n", fmtDur(benchkit.Percentile(rep.wakes, 0.5)))

	rest := people.rest()
	rep.others = len(rest)
	fmt.Fprintf(stderr, "waking the other %d people, %d at a time ... ", rep.others, o.concurrency)
	began = time.Now()
	if err := wakeAll(ctx, rest, o.concurrency); err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, err
	}
	rep.othersTime = time.Since(began)
	fmt.Fprintf(stderr, "%.1fs\n", rep.othersTime.Seconds())

	// The last stop parks everyone again, now that they are awake: each
	// must be parked once more, so it is a check as well as a time.
	fmt.Fprintf(stderr, "stopping the agent again ... ")
	st, err = ag.stop(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "error")
		return nil, fmt.Errorf("stopping the agent at the end, with %d people awake: %w", o.users, err)
	}
	rep.stopAgain = st.total
	fmt.Fprintf(stderr, "%.1fs\n", rep.stopAgain.Seconds())
	return rep, nil
}

func printReport(w io.Writer, o *options, rep *report) {
	filler := len(rep.wakes)
	fmt.Fprintf(w, "# stickyd restart with %s parked people\n", fmtInt(o.users))
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	where := o.dir
	if where == "" {
		where = os.TempDir()
	}
	fmt.Fprintf(w, "- agent: a real `stickyd agent` process (this binary re-executed) with %d subprocess (go-plugin) workers, its raft log and parked packages in a temp dir under %s; the clients share its machine\n", o.workers, where)
	fmt.Fprintf(w, "- people: each its own browser (cookie jar): `GET /`, `POST /login?user=NAME`, then `open` and one `inc` over `POST /_stickyd/op`; %d browsers at a time\n", o.concurrency)
	fmt.Fprintf(w, "- wakers: %d of them filled their page with `{\"op\":\"fill\",\"bytes\":%d}` and pulled and acknowledged the delta before the stop; after the start each sends one `inc` (its first request, which wakes it), %d at a time\n", filler, o.state.Bytes, o.parallel)
	fmt.Fprintln(w, "- every person's next `inc` after the start must answer count 2; every waker's page must then reopen without resync or notice and pull exactly that one delta")
	fmt.Fprintln(w, "- times from the agent's log are when this program read the line; percentiles are nearest-rank")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| step | time | detail |")
	fmt.Fprintln(w, "|---|--:|---|")
	fmt.Fprintf(w, "| create %s people (before; not part of the restart) | %s | %.0f people/s, %d pages filled with %s in %s |\n",
		fmtInt(o.users), fmtDur(rep.created), float64(o.users)/(rep.created-rep.filled).Seconds(), filler, o.state.Label, fmtDur(rep.filled))
	fmt.Fprintf(w, "| stop: SIGTERM → process exited | %s | parking %s people: %s → %s after SIGTERM (%s, %.0f people/s); %s packages, %s MB; raft dir %s MB; the last stop, everyone awake again, took %s |\n",
		fmtDur(rep.stop), fmtInt(o.users), fmtMark(rep.parkBegin), fmtMark(rep.parkEnd), fmtSpan(rep.parkBegin, rep.parkEnd),
		rate(o.users, rep.parkBegin, rep.parkEnd), fmtInt(rep.packages), fmtMB(rep.parkBytes), fmtMB(rep.raftBytes), fmtDur(rep.stopAgain))
	st := rep.starting
	fmt.Fprintf(w, "| start: exec → `GET /_stickyd/health` 200 | %s | raft log open at %s, leader at %s, maps applied and packages checked at %s, front listening at %s; the first start (empty data dir) took %s |\n",
		fmtDur(rep.health), fmtMark(st.raftOpen), fmtMark(st.leader), fmtMark(st.mapsBack), fmtMark(st.frontUp), fmtDur(rep.firstStart))
	fmt.Fprintf(w, "| start: exec → first parked person served with their state | %s | %s's `inc` answered count 2; its own round trip (the wake) %s |\n",
		fmtDur(rep.firstServed), rep.firstUser, fmtDur(rep.firstLatency))
	fmt.Fprintf(w, "| wake from a %s page: first request p50 | %s | %d people, %d at a time |\n",
		o.state.Label, fmtDur(benchkit.Percentile(rep.wakes, 0.5)), filler, o.parallel)
	fmt.Fprintf(w, "| wake from a %s page: first request p99 | %s | max %s |\n",
		o.state.Label, fmtDur(benchkit.Percentile(rep.wakes, 0.99)), fmtDur(benchkit.Percentile(rep.wakes, 1)))
	fmt.Fprintf(w, "| wake everyone else | %s | %s people, %d at a time: %.0f wakes/s |\n",
		fmtDur(rep.othersTime), fmtInt(rep.others), o.concurrency, float64(rep.others)/rep.othersTime.Seconds())
	fmt.Fprintln(w)
	r := rep.restartRep
	fmt.Fprintf(w, "- restart report (`/_stickyd/health`): folder %s, %s parked, %d missing, %d incomplete folders, %d aborted moves\n",
		r.Folder, fmtInt(r.Parked), r.Missing, len(r.Incomplete), len(r.AbortedMoves))
}

// fmtDur is benchkit.FormatDuration, and seconds from a second on.
func fmtDur(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return benchkit.FormatDuration(d)
}

// fmtMark is an offset read from the agent's log, or "?" if the line was
// never seen (its wording changed, or the agent logs above info).
func fmtMark(d time.Duration) string {
	if d < 0 {
		return "?"
	}
	return fmtDur(d)
}

// fmtSpan is the time from a to b, both marks.
func fmtSpan(a, b time.Duration) string {
	if a < 0 || b < 0 {
		return "?"
	}
	return fmtDur(b - a)
}

// rate is n per second from mark a to mark b; zero if either is missing.
func rate(n int, a, b time.Duration) float64 {
	if a < 0 || b <= a {
		return 0
	}
	return float64(n) / (b - a).Seconds()
}

func fmtMB(n int64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<20)) }

// fmtInt writes n with a space between thousands.
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}
