// Command promote measures a group promotion: a new group (a new build of
// the app) becomes the default and everyone moves over to it hot (barrier,
// freeze, park, reassign, wake), a bounded number of moves at a time, while
// people keep working; then the rollback, which moves everyone back.
//
// For each -users size, a fresh agent runs the group v1 (the counter app on
// -workers subprocess workers, this very binary re-executed) with its raft
// log and its parked packages on disk in a temporary directory, and the
// catalog group v2 (the same app, as many workers) is created. N people
// (u0 … uN-1) log in, each a browser of their own with a WebSocket and an
// open counter page. -active of them type inc, closed loop, the whole time,
// every round trip recorded. The others sit idle; their pages are held by a
// second process, this binary re-executed with STICKYD_BENCH_PROMOTE_HOLDER=1,
// so that neither process needs more open files than the usual 20,000 (the
// agent's side of every WebSocket is in this one). Each idle page sends a
// pull every 30 s, which keeps its WebSocket open as a browser answering the
// front's pings would.
//
// After a baseline window, Supervisor().Promote("v2") runs with -parallel
// moves at a time; then everyone must be placed in v2, each typist's
// requests must be answered by v2 from then on, and each idle page's next
// inc must be answered by v2 and continue its count. Rollback is then
// measured the same way, back to v1.
//
//	go run ./test/bench/promote            # full run: 1,000 and 10,000 users, ~5 min on 2 cores
//	go run ./test/bench/promote -quick     # smoke run: 200 users, ~10 s
//	go run ./test/bench/promote -users 1000 -parallel 64
//
// It prints the machine it ran on and a Markdown table on stdout, progress
// on stderr. Any failed request or move fails the run with a non-zero exit:
// an error is never counted as a result. It must stay a program that prints
// a table, never a timed assertion.
//
// Run with STICKYD_BENCH_WORKER=counter in its environment, the binary is
// the counter worker plugin instead; the agent starts its workers that way.
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

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, report]{
	Name:    "promote",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() {
	// The worker check comes first: the workers are started by the agent,
	// in this process, never by the holder.
	if benchkit.ServeWorkerIfAsked() {
		return
	}
	if os.Getenv(holderEnv) == "1" {
		os.Exit(runHolder(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	program.Main()
}

// options are the parsed flags.
type options struct {
	users       []int
	active      int
	departed    int // of each size's people, detached once open (percent)
	parallel    int
	each        bool // also the road one person at a time
	workers     int
	concurrency int // pages opened (and closed) at once
	baseline    time.Duration
	logLevel    hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("promote", "smoke run: -users 200 -baseline 1s unless given", stderr)
	users := fs.String("users", "1000,10000", "people online during the promotion, comma-separated: one fresh agent per value")
	active := fs.Int("active", 50, "people among them typing inc closed loop on their WebSockets, whose round trips are measured")
	departed := fs.Int("departed", 0, "percent of the idle people whose WebSocket is dropped once their page is open and has one inc (a closed laptop: page and person stay in the worker, no file held); each check reattaches them")
	parallel := fs.Int("parallel", 64, "people on the road at a time during the promotion and the rollback")
	each := fs.Bool("each", true, "also promote and roll back one person at a time (each a set of one, -parallel at a time), for comparison")
	workers := fs.Int("workers", 2, "subprocess workers of each group, v1 and v2")
	concurrency := fs.Int("concurrency", 32, "pages opened and closed at once")
	baseline := fs.Duration("baseline", 3*time.Second, "window of the typists' round trips measured before each promotion and rollback")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{each: *each, active: *active, departed: *departed, parallel: *parallel, workers: *workers, concurrency: *concurrency, baseline: *baseline}
	list := *users
	if fs.QuickDefault("users") {
		list = "200"
	}
	if fs.QuickDefault("baseline") {
		o.baseline = time.Second
	}
	for _, s := range benchkit.SplitList(list) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-users: %q is not a positive number", s)
		}
		o.users = append(o.users, n)
	}
	switch {
	case len(o.users) == 0:
		return nil, errors.New("-users needs at least one value")
	case o.active < 1:
		return nil, errors.New("-active must be at least 1: the typists are what is measured")
	case o.parallel < 1 || o.workers < 1 || o.concurrency < 1:
		return nil, errors.New("-parallel, -workers and -concurrency must be at least 1")
	case o.baseline <= 0:
		return nil, errors.New("-baseline must be positive")
	case o.departed < 0 || o.departed > 100:
		return nil, errors.New("-departed is a percentage: 0 to 100")
	}
	for _, n := range o.users {
		if n < o.active {
			return nil, fmt.Errorf("-users %d is below -active %d", n, o.active)
		}
	}
	var err error
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// report is what a run measured: two rows per size.
type report struct {
	sizes []sizeResult
}

// measure measures every size in turn, each on a fresh agent; the first
// error ends the run.
func measure(ctx context.Context, o *options, stderr io.Writer) (rep report, err error) {
	for _, n := range o.users {
		fmt.Fprintf(stderr, "%d users:\n", n)
		r, err := measureSize(ctx, o, n, stderr)
		if err != nil {
			return rep, fmt.Errorf("%d users: %w", n, err)
		}
		rep.sizes = append(rep.sizes, r)
	}
	return rep, nil
}

func printReport(w io.Writer, o *options, rep report) {
	fmt.Fprintln(w, "# stickyd group promotion: everyone moved hot to a new group, and back")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	fmt.Fprintf(w, "- agent: group v1 (the default) and catalog group v2, %d subprocess (go-plugin) workers each, all running the counter app; raft log and parked packages on disk in a temp dir; one fresh agent per size; the clients share its machine\n", o.workers)
	fmt.Fprintf(w, "- people: each a browser with a WebSocket and an open counter page; %d of them type `inc` closed loop throughout (a pull acknowledging their deltas every %d incs, not counted); the others are idle, their pages held by a second process, each sending a pull every %v, evenly spread, to keep its WebSocket open (as a browser's answers to the front's pings would)\n", o.active, ackEvery, keepEvery)
	fmt.Fprintf(w, "- promote: `Supervisor().Promote(\"v2\")`; rollback: `Supervisor().Rollback()`, back to v1; both hand the road one set, at most %d people on it at a time; baseline: the typists' round trips in the %v before\n", o.parallel, o.baseline)
	if o.each {
		fmt.Fprintf(w, "- one by one: the same promotion and rollback with each person a set of one (`Supervisor().MoveToGroup`), %d at a time: the road as it was before it carried sets\n", o.parallel)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| kind | users | parallel | total | moves/s | failed | base p50 | base p99 | during p50 | during p99 | during max | p99 added | move p50 | move p99 |")
	fmt.Fprintln(w, "|:--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, s := range rep.sizes {
		for _, r := range s.rows {
			basep99, durp99 := benchkit.Percentile(r.base, 0.99), benchkit.Percentile(r.during, 0.99)
			fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n",
				r.kind, fmtInt(r.users), r.parallel, fmtDur(r.total), float64(r.moved)/r.total.Seconds(), r.failed,
				fmtDur(benchkit.Percentile(r.base, 0.5)), fmtDur(basep99),
				fmtDur(benchkit.Percentile(r.during, 0.5)), fmtDur(durp99), fmtDur(r.during[len(r.during)-1]),
				fmtSigned(durp99-basep99),
				fmtDur(benchkit.Percentile(r.moves, 0.5)), fmtDur(benchkit.Percentile(r.moves, 0.99)))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "total: the call to Promote or Rollback, default switched and everyone moved; moves/s: users / total; "+
		"base and during: the typists' inc round trips in the baseline window and those overlapping the call (nearest-rank); "+
		"p99 added: during p99 − base p99; move: `move.Result.Duration`, barrier up → reassigned, per person")
	fmt.Fprintln(w)
	for _, s := range rep.sizes {
		fmt.Fprintf(w, "- %s users: pages opened in %.1f s (%d at a time)", fmtInt(s.users), s.open.Seconds(), o.concurrency)
		if s.departed > 0 {
			fmt.Fprintf(w, "; %s of them departed (page open, WebSocket dropped; each check reattaches them)", fmtInt(s.departed))
		}
		for _, r := range s.rows {
			fmt.Fprintf(w, "; %s: %s round trips in the baseline, %s during, then every idle page's next inc checked in %.1f s",
				r.kind, fmtInt(len(r.base)), fmtInt(len(r.during)), r.check.Seconds())
		}
		fmt.Fprintln(w)
	}
}

// fmtDur is benchkit.FormatDuration, and seconds from a second on.
func fmtDur(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return benchkit.FormatDuration(d)
}

// fmtSigned is fmtDur with a sign: the added p99 may be negative when the
// baseline's tail was the longer.
func fmtSigned(d time.Duration) string {
	if d < 0 {
		return "−" + fmtDur(-d)
	}
	return "+" + fmtDur(d)
}

// fmtInt writes n with a space between thousands.
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}
