// Command roundtrip measures what one small WebSocket message costs on its way
// front → worker → front: frames per second and p50/p99 round-trip latency
// of the counter app's "inc" op, closed loop (every page waits for its reply
// before it sends the next), with in-process and subprocess (go-plugin)
// workers, with 1 and 100 concurrent pages, and with 1 KB, 1 MB and 10 MB of
// page state. Its point is that the cost of a message does not grow with the
// state the worker holds: the state stays in the worker, only the message and
// its small delta travel.
//
//	go run ./test/bench/roundtrip            # full run, ~3 s per cell
//	go run ./test/bench/roundtrip -quick     # smoke run, ~0.5 s per cell
//
// It prints the machine it ran on and a Markdown table on stdout, progress on
// stderr. Any failed operation fails the run with a non-zero exit: an error is
// never counted as a frame. It must stay a program that prints a table, never
// a timed assertion.
//
// Run with STICKYD_BENCH_WORKER=counter in its environment, the binary is the
// counter worker plugin instead; the subprocess mode starts it that way.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "roundtrip",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

// options are the parsed flags.
type options struct {
	duration time.Duration
	warmup   time.Duration
	modes    []string
	sizes    []benchkit.Size
	pages    []int
	workers  int
	logLevel hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("roundtrip", "smoke run: -duration 500ms -warmup 100ms unless given", stderr)
	duration := fs.Duration("duration", 3*time.Second, "measured time per cell")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up per cell, before the measured time")
	modes := fs.String("modes", "inprocess,subprocess", "worker modes, comma-separated: inprocess, subprocess")
	sizes := fs.String("sizes", "1KB,1MB,10MB", "page-state sizes for the 1-page cells, comma-separated (B, KB, MB; 1KB = 1024 bytes); the many-page cells use the first")
	pages := fs.String("pages", "1,100", "concurrent pages per cell, comma-separated; each page is its own browser with its own cookie and WebSocket")
	workers := fs.Int("workers", 2, "workers in the group the pages are spread over")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{duration: *duration, warmup: *warmup, workers: *workers}
	if fs.QuickDefault("duration") {
		o.duration = 500 * time.Millisecond
	}
	if fs.QuickDefault("warmup") {
		o.warmup = 100 * time.Millisecond
	}
	if o.duration <= 0 || o.warmup < 0 {
		return nil, errors.New("-duration must be positive and -warmup not negative")
	}
	if o.workers < 1 {
		return nil, errors.New("-workers must be at least 1")
	}
	for _, m := range benchkit.SplitList(*modes) {
		if m != benchkit.ModeInProcess && m != benchkit.ModeSubprocess {
			return nil, fmt.Errorf("-modes: unknown mode %q (want %s or %s)", m, benchkit.ModeInProcess, benchkit.ModeSubprocess)
		}
		o.modes = append(o.modes, m)
	}
	var err error
	if o.sizes, err = benchkit.ParseSizes(*sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %w", err)
	}
	for _, s := range benchkit.SplitList(*pages) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-pages: %q is not a positive count", s)
		}
		o.pages = append(o.pages, n)
	}
	if len(o.modes) == 0 || len(o.sizes) == 0 || len(o.pages) == 0 {
		return nil, errors.New("-modes, -sizes and -pages each need at least one value")
	}
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// cells lists what to measure: for each mode, every page count at every size.
func (o *options) cells() []cell {
	var out []cell
	for _, m := range o.modes {
		for _, p := range o.pages {
			for _, s := range o.sizes {
				out = append(out, cell{mode: m, pages: p, size: s})
			}
		}
	}
	return out
}

// measure runs every cell, one agent per mode, and shuts each agent down
// before the next starts.
func measure(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	r := &report{}
	byMode := map[string][]cell{}
	for _, c := range o.cells() {
		byMode[c.mode] = append(byMode[c.mode], c)
	}
	for _, mode := range o.modes {
		rs, ds, err := measureMode(ctx, o, mode, byMode[mode], log, stderr)
		r.results = append(r.results, rs...)
		r.deliveries = append(r.deliveries, ds...)
		if err != nil {
			return r, err
		}
	}
	return r, nil
}

// report is a whole run: the cells, then each mode's delivery.
type report struct {
	results    []result
	deliveries []delivery
}

func measureMode(ctx context.Context, o *options, mode string, cells []cell, log hclog.Logger, stderr io.Writer) (rs []result, ds []delivery, err error) {
	fmt.Fprintf(stderr, "starting an agent with %d %s workers\n", o.workers, mode)
	a, err := startAgent(ctx, mode, o.workers, log)
	if err != nil {
		return nil, nil, fmt.Errorf("starting the %s agent: %w", mode, err)
	}
	defer func() {
		if serr := benchkit.StopAgent(ctx, a); serr != nil && err == nil {
			err = fmt.Errorf("shutting down the %s agent: %w", mode, serr)
		}
	}()
	for _, c := range cells {
		if err := ctx.Err(); err != nil {
			return rs, nil, fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(stderr, "  %s: %d page(s), %s state ... ", c.mode, c.pages, c.size.Label)
		r, err := runCell(ctx, a, c, o.warmup, o.duration)
		if err != nil {
			fmt.Fprintln(stderr, "error")
			return rs, nil, fmt.Errorf("%s, %d page(s), %s state: %w", c.mode, c.pages, c.size.Label, err)
		}
		fmt.Fprintf(stderr, "%.0f frames/s\n", r.rate())
		rs = append(rs, r)
	}
	fmt.Fprintf(stderr, "  %s: delivery, %d messages with a pull waiting ... ", mode, deliveryMessages)
	d, err := runDelivery(ctx, a, mode)
	if err != nil {
		fmt.Fprintln(stderr, "error")
		return rs, nil, fmt.Errorf("%s, delivery: %w", mode, err)
	}
	fmt.Fprintf(stderr, "%.2f pulls per message\n", float64(d.pulls)/float64(d.messages))
	return rs, []delivery{d}, nil
}

// startAgent starts an agent whose one group runs the counter app on
// workers workers in mode, with a 10 s frame timeout.
func startAgent(ctx context.Context, mode string, workers int, log hclog.Logger) (*agent.Agent, error) {
	g, err := benchkit.CounterGroup(mode, workers)
	if err != nil {
		return nil, err
	}
	cfg := benchkit.AgentConfig(log, g)
	cfg.Front.FrameTimeout = "10s"
	return benchkit.StartAgent(ctx, cfg, log)
}

func printReport(w io.Writer, o *options, r *report) {
	results := r.results
	fmt.Fprintln(w, "# stickyd round trip: front → worker → front")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	fmt.Fprintf(w, "- load: closed loop; every page sends `{\"op\":\"msg\",\"data\":{\"op\":\"inc\"}}` on its own WebSocket and waits for the reply; %s measured per cell after %s warm-up\n",
		o.duration, o.warmup)
	fmt.Fprintf(w, "- %d workers per agent; the state is filled with `{\"op\":\"fill\"}` and its deltas pulled before measuring; the clients share the agent's machine (and, in-process, its process)\n", o.workers)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workers | pages | state/page | frames/s | p50 | p99 | max | pages per worker |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %s | %s | %s |\n",
			r.mode, r.pages, r.size.Label, r.rate(),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 0.50)),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 0.99)),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 1)),
			benchkit.Spread(r.perWorker))
	}

	fmt.Fprintln(w)
	fmt.Fprintf(w, "Delivery: one page (1 KB of state) sends %d notes (two tree writes each) with a pull always waiting, as client.js does; pulls per message (goal 1) and the delay from a message's reply to its last delta (negative: the delta came first; goal ≤ 0):\n\n", deliveryMessages)
	fmt.Fprintln(w, "| workers | messages | pulls per message | reply → delta p50 | p99 | max |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|")
	for _, d := range r.deliveries {
		fmt.Fprintf(w, "| %s | %d | %.2f | %s | %s | %s |\n", d.mode, d.messages, float64(d.pulls)/float64(d.messages),
			signed(benchkit.Percentile(d.delays, 0.50)), signed(benchkit.Percentile(d.delays, 0.99)), signed(benchkit.Percentile(d.delays, 1)))
	}
}
