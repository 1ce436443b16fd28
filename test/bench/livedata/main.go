// Command livedata measures live data across workers: how long a table
// change takes to reach every subscribed page (fan-out), and how many
// increments per second the global store's grants sustain when everyone
// wants the same key, and when nobody shares one.
//
// One agent runs the counter app on three subprocess (go-plugin) workers,
// with its raft log on disk in a temporary directory. Every person is a
// browser of their own (a cookie jar, a login, a WebSocket, an open counter
// page), placed by the agent, which puts a newcomer on the worker holding
// the fewest people.
//
// Fan-out: for each -subscribers count N (in ascending order; each adds
// pages to those already open), N pages subscribe to the table "t" with the
// counter's "sub" op. A publisher page, subscribed to nothing, first
// publishes -publishes changes of a table nobody watches (its round trip,
// and the agent's metrics must count no send), then one warm-up and
// -publishes measured changes of "t", one at a time. The counter's
// OnTableChange records in each page's tree how many changes it heard and
// when the last arrived (heard_at/t, the worker's clock, on the same
// machine as ours). A page's delivery latency is heard_at minus the time
// just before the publish op was written to the publisher's WebSocket; it
// is reported apart for the publisher's own worker (local) and the others
// (remote). After each publish's answer the collector waits twice the
// slowest delivery seen so far at that count (10 ms to 5 s), so that its
// pulls do not compete with the deliveries (the report says how many were
// recorded after it started anyway), then pulls every page until it has
// heard the change: a page that misses a change or hears it twice fails the
// run, and at the end every page is pulled once more and must have heard
// nothing else.
//
// Grants: for each -people count C, C people (spread over the workers)
// send the counter's "sincr" closed loop for -duration (or -count each): a
// read-modify-write of a number in the global store under a grant on its
// path. "one key": everyone increments bench/counter (every grant conflicts
// with every other); "own keys": person i increments bench/u<i> (none
// conflicts). Afterwards the answers must be exactly the numbers from the
// store's value before plus one upward, each once, and the store must hold
// the value before plus the increments: a lost update fails the run.
//
//	go run ./test/bench/livedata            # full run: 30, 300 and 3,000 subscribers; 1, 10 and 50 people; ~1.5 min on 2 cores
//	go run ./test/bench/livedata -quick     # smoke run: 10 and 60 subscribers, 5 publishes; 1 and 5 people for 1 s; ~10 s
//	go run ./test/bench/livedata -subscribers 1000 -people 20 -duration 10s
//
// It prints the machine it ran on and two Markdown tables on stdout,
// progress on stderr. Any failed request fails the run with a non-zero
// exit: an error is never counted as a result. It must stay a program that
// prints tables, never a timed assertion.
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
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, report]{
	Name:    "livedata",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

// options are the parsed flags.
type options struct {
	subscribers []int // ascending, distinct
	publishes   int
	people      []int
	duration    time.Duration
	count       int // increments per person; 0: for duration
	workers     int
	concurrency int
	logLevel    hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("livedata", "smoke run: -subscribers 10,60 -publishes 5 -people 1,5 -duration 1s unless given", stderr)
	subscribers := fs.String("subscribers", "30,300,3000", "subscribed pages, comma-separated; measured in ascending order, each count adding pages to the last")
	publishes := fs.Int("publishes", 20, "measured publishes per subscriber count, one at a time (and as many of a table nobody watches)")
	people := fs.String("people", "1,10,50", "people incrementing at once, comma-separated")
	duration := fs.Duration("duration", 5*time.Second, "how long each person increments, per case")
	count := fs.Int("count", 0, "increments per person per case instead of -duration (0: use -duration)")
	workers := fs.Int("workers", 3, "subprocess workers of the agent")
	concurrency := fs.Int("concurrency", 32, "pages opened, pulled and closed at once")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{publishes: *publishes, duration: *duration, count: *count, workers: *workers, concurrency: *concurrency}
	subList, peopleList := *subscribers, *people
	if fs.QuickDefault("subscribers") {
		subList = "10,60"
	}
	if fs.QuickDefault("publishes") {
		o.publishes = 5
	}
	if fs.QuickDefault("people") {
		peopleList = "1,5"
	}
	if fs.QuickDefault("duration") {
		o.duration = time.Second
	}
	var err error
	if o.subscribers, err = positiveList("-subscribers", subList); err != nil {
		return nil, err
	}
	slices.Sort(o.subscribers)
	o.subscribers = slices.Compact(o.subscribers)
	if o.people, err = positiveList("-people", peopleList); err != nil {
		return nil, err
	}
	switch {
	case o.publishes < 1:
		return nil, errors.New("-publishes must be at least 1")
	case o.duration <= 0 && o.count == 0:
		return nil, errors.New("-duration must be positive unless -count is given")
	case o.count < 0:
		return nil, errors.New("-count must not be negative")
	case o.workers < 2:
		return nil, errors.New("-workers must be at least 2: a remote delivery needs another worker")
	case o.concurrency < 1:
		return nil, errors.New("-concurrency must be at least 1")
	}
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// positiveList reads a comma-separated list of positive numbers.
func positiveList(flag, list string) ([]int, error) {
	var out []int
	for _, s := range benchkit.SplitList(list) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flag, s)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s needs at least one value", flag)
	}
	return out, nil
}

// report is what a run measured.
type report struct {
	fanOut []fanOutRow
	grants []grantRow
}

// measure starts the agent, measures the fan-out and then the grants, and
// takes it all down again; the first error ends the run.
func measure(ctx context.Context, o *options, stderr io.Writer) (rep report, err error) {
	// This process holds both ends of every page's WebSocket.
	if err := raiseFileLimit(2*(slices.Max(o.subscribers)+1+slices.Max(o.people)) + fileMargin); err != nil {
		return rep, err
	}
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	dir, err := os.MkdirTemp("", "stickyd-livedata-")
	if err != nil {
		return rep, fmt.Errorf("making the data dir: %w", err)
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stderr, "starting an agent with %d subprocess workers, data in %s\n", o.workers, dir)
	a, err := startAgent(ctx, o.workers, dir, log)
	if err != nil {
		return rep, fmt.Errorf("starting the agent: %w", err)
	}
	defer func() {
		if serr := benchkit.StopAgent(ctx, a); serr != nil && err == nil {
			err = fmt.Errorf("shutting down the agent: %w", serr)
		}
	}()
	if rep.fanOut, err = measureFanOut(ctx, o, a, stderr); err != nil {
		return rep, fmt.Errorf("fan-out: %w", err)
	}
	if rep.grants, err = measureGrants(ctx, o, a, stderr); err != nil {
		return rep, fmt.Errorf("grants: %w", err)
	}
	return rep, nil
}

func printReport(w io.Writer, o *options, rep report) {
	fmt.Fprintln(w, "# stickyd live data: table fan-out latency and grant throughput")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	fmt.Fprintf(w, "- agent: %d subprocess (go-plugin) workers running the counter app; raft log on disk in a temp dir; the clients (every page a browser of its own, with its WebSocket) share its machine\n", o.workers)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Fan-out of a table change")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%d measured publishes of table `t` per row, one at a time, after one warm-up; pages subscribed with the counter's `sub`, the publisher subscribed to nothing.\n", o.publishes)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| subscribers | local / remote | local p50 | local p99 | local max | remote p50 | remote p99 | remote max | publish p50 | publish p99 | unwatched p50 | unwatched p99 | sends / publish |")
	fmt.Fprintln(w, "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range rep.fanOut {
		fmt.Fprintf(w, "| %s | %s / %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f |\n",
			fmtInt(r.n), fmtInt(r.spread[r.pubWorker]), fmtInt(r.n-r.spread[r.pubWorker]),
			fmtDur(pct(r.local, 0.5)), fmtDur(pct(r.local, 0.99)), fmtDur(pct(r.local, 1)),
			fmtDur(pct(r.remote, 0.5)), fmtDur(pct(r.remote, 0.99)), fmtDur(pct(r.remote, 1)),
			fmtDur(pct(r.watched, 0.5)), fmtDur(pct(r.watched, 0.99)),
			fmtDur(pct(r.unwatched, 0.5)), fmtDur(pct(r.unwatched, 0.99)), r.sends)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "local / remote: subscribers on the publisher's worker / on the others; "+
		"local and remote: per subscriber and publish, the page's `heard_at/t` (written by OnTableChange on its worker) − the time just before the publish op was written to the publisher's WebSocket, nearest-rank over subscribers × publishes; "+
		"publish: the `pub` op's round trip to `t` (it returns once the change is queued for the local subscribers and handed to the host); "+
		"unwatched: the same round trip to a table nobody watches, as many times, with the subscribers open; "+
		"sends / publish: the agent's `stickyd_tables_sends_total` per publish of `t` (a publish of the unwatched table must add 0, and did)")
	fmt.Fprintln(w)
	for _, r := range rep.fanOut {
		fmt.Fprintf(w, "- %s subscribers (%s; publisher on %s): new pages opened and subscribed in %.1f s; each round's collection took up to %.2f s after waiting up to %s; %d of %s deliveries were recorded after the collector had started pulling\n",
			fmtInt(r.n), benchkit.Spread(r.spread), r.pubWorker, r.open.Seconds(), r.collect.Seconds(), fmtDur(r.settle),
			r.overlapped, fmtInt(len(r.local)+len(r.remote)))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "## Grants under contention")
	fmt.Fprintln(w)
	what := fmt.Sprintf("for %v", o.duration)
	if o.count > 0 {
		what = fmt.Sprintf("%d times each", o.count)
	}
	fmt.Fprintf(w, "Each person sends the counter's `sincr` closed loop %s: acquire a grant on the key, read it, commit it + 1.\n", what)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| keys | people | spread | increments | increments/s | p50 | p99 | max | store afterwards |")
	fmt.Fprintln(w, "|:--|--:|:--|--:|--:|--:|--:|--:|:--|")
	for _, r := range rep.grants {
		fmt.Fprintf(w, "| %s | %d | %s | %s | %.0f | %s | %s | %s | %s |\n",
			r.kind, r.people, benchkit.Spread(r.spread), fmtInt(r.incs), float64(r.incs)/r.elapsed.Seconds(),
			fmtDur(pct(r.lat, 0.5)), fmtDur(pct(r.lat, 0.99)), fmtDur(pct(r.lat, 1)), r.check)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "keys: one key = everyone increments `bench/counter` under a grant on it (every grant conflicts); own keys = person i increments `bench/u<i>` (none conflicts); "+
		"increments/s: successful increments / time from the start to the last answer; p50, p99, max: one `sincr` round trip (grant acquired, committed, answered), nearest-rank; "+
		"store afterwards: the answers were exactly the values before + 1 upward, each once, and the store holds the value before + the increments")
}

// pct is benchkit.Percentile; q = 1 is the maximum.
func pct(sorted []time.Duration, q float64) time.Duration { return benchkit.Percentile(sorted, q) }

// fmtDur is benchkit.FormatDuration, and seconds from a second on; "–"
// when there was nothing to measure.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "–"
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return benchkit.FormatDuration(d)
}

// fmtInt writes n with a space between thousands.
func fmtInt(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + " " + s[i:]
	}
	return s
}
