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
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
)

func main() {
	if serveWorkerIfAsked() {
		return
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the parsed flags.
type options struct {
	duration time.Duration
	warmup   time.Duration
	modes    []string
	sizes    []size
	pages    []int
	workers  int
	logLevel hclog.Level
}

// size is a page-state size as the user wrote it and in bytes.
type size struct {
	label string
	bytes int
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := flag.NewFlagSet("roundtrip", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 3*time.Second, "measured time per cell")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up per cell, before the measured time")
	quick := fs.Bool("quick", false, "smoke run: -duration 500ms -warmup 100ms unless given")
	modes := fs.String("modes", "inprocess,subprocess", "worker modes, comma-separated: inprocess, subprocess")
	sizes := fs.String("sizes", "1KB,1MB,10MB", "page-state sizes for the 1-page cells, comma-separated (B, KB, MB; 1KB = 1024 bytes); the many-page cells use the first")
	pages := fs.String("pages", "1,100", "concurrent pages per cell, comma-separated; each page is its own browser with its own cookie and WebSocket")
	workers := fs.Int("workers", 2, "workers in the group the pages are spread over")
	logLevel := fs.String("log", "warn", "agent log level on stderr: trace, debug, info, warn, error or off")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o := &options{duration: *duration, warmup: *warmup, workers: *workers}
	if *quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["duration"] {
			o.duration = 500 * time.Millisecond
		}
		if !set["warmup"] {
			o.warmup = 100 * time.Millisecond
		}
	}
	if o.duration <= 0 || o.warmup < 0 {
		return nil, errors.New("-duration must be positive and -warmup not negative")
	}
	if o.workers < 1 {
		return nil, errors.New("-workers must be at least 1")
	}
	for _, m := range splitList(*modes) {
		if m != modeInproc && m != modeSubprocess {
			return nil, fmt.Errorf("-modes: unknown mode %q (want %s or %s)", m, modeInproc, modeSubprocess)
		}
		o.modes = append(o.modes, m)
	}
	for _, s := range splitList(*sizes) {
		n, err := parseSize(s)
		if err != nil {
			return nil, fmt.Errorf("-sizes: %w", err)
		}
		o.sizes = append(o.sizes, size{label: s, bytes: n})
	}
	for _, s := range splitList(*pages) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-pages: %q is not a positive count", s)
		}
		o.pages = append(o.pages, n)
	}
	if len(o.modes) == 0 || len(o.sizes) == 0 || len(o.pages) == 0 {
		return nil, errors.New("-modes, -sizes and -pages each need at least one value")
	}
	if o.logLevel = hclog.LevelFromString(*logLevel); o.logLevel == hclog.NoLevel {
		return nil, fmt.Errorf("-log: unknown level %q", *logLevel)
	}
	return o, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseSize reads "512", "512B", "1KB", "10MB" (binary multiples).
func parseSize(s string) (int, error) {
	u := strings.ToUpper(s)
	mult := 1
	switch {
	case strings.HasSuffix(u, "KB"):
		mult, u = 1<<10, strings.TrimSuffix(u, "KB")
	case strings.HasSuffix(u, "MB"):
		mult, u = 1<<20, strings.TrimSuffix(u, "MB")
	case strings.HasSuffix(u, "B"):
		u = strings.TrimSuffix(u, "B")
	}
	n, err := strconv.Atoi(strings.TrimSpace(u))
	if err != nil || n < 0 || n > (256<<20)/mult {
		return 0, fmt.Errorf("%q is not a size of 0 to 256MB", s)
	}
	return n * mult, nil
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

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "roundtrip: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "roundtrip: FAILED: %v\n", err)
		return 1
	}
	printReport(stdout, o, results)
	return 0
}

// measure runs every cell, one agent per mode, and shuts each agent down
// before the next starts.
func measure(ctx context.Context, o *options, stderr io.Writer) ([]result, error) {
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: o.logLevel, Output: stderr})
	var results []result
	byMode := map[string][]cell{}
	for _, c := range o.cells() {
		byMode[c.mode] = append(byMode[c.mode], c)
	}
	for _, mode := range o.modes {
		rs, err := measureMode(ctx, o, mode, byMode[mode], log, stderr)
		results = append(results, rs...)
		if err != nil {
			return results, err
		}
	}
	return results, nil
}

func measureMode(ctx context.Context, o *options, mode string, cells []cell, log hclog.Logger, stderr io.Writer) (rs []result, err error) {
	fmt.Fprintf(stderr, "starting an agent with %d %s workers\n", o.workers, mode)
	a, err := startAgent(ctx, mode, o.workers, log)
	if err != nil {
		return nil, fmt.Errorf("starting the %s agent: %w", mode, err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := a.Shutdown(sctx); serr != nil && err == nil {
			err = fmt.Errorf("shutting down the %s agent: %w", mode, serr)
		}
	}()
	for _, c := range cells {
		if err := ctx.Err(); err != nil {
			return rs, fmt.Errorf("interrupted: %w", err)
		}
		fmt.Fprintf(stderr, "  %s: %d page(s), %s state ... ", c.mode, c.pages, c.size.label)
		r, err := runCell(ctx, a, c, o.warmup, o.duration)
		if err != nil {
			fmt.Fprintln(stderr, "error")
			return rs, fmt.Errorf("%s, %d page(s), %s state: %w", c.mode, c.pages, c.size.label, err)
		}
		fmt.Fprintf(stderr, "%.0f frames/s\n", r.rate())
		rs = append(rs, r)
	}
	return rs, nil
}

func printReport(w io.Writer, o *options, results []result) {
	fmt.Fprintln(w, "# stickyd round trip: front → worker → front")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s, %d logical CPUs, GOMAXPROCS=%d, %s %s/%s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "- load: closed loop; every page sends `{\"op\":\"msg\",\"data\":{\"op\":\"inc\"}}` on its own WebSocket and waits for the reply; %s measured per cell after %s warm-up\n",
		o.duration, o.warmup)
	fmt.Fprintf(w, "- %d workers per agent; the state is filled with `{\"op\":\"fill\"}` and its deltas pulled before measuring; the clients share the agent's machine (and, in-process, its process)\n", o.workers)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workers | pages | state/page | frames/s | p50 | p99 | max | pages per worker |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|---|")
	for _, r := range results {
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %s | %s | %s |\n",
			r.mode, r.pages, r.size.label, r.rate(),
			fmtDur(r.percentile(0.50)), fmtDur(r.percentile(0.99)), fmtDur(r.percentile(1)),
			r.spread())
	}
}

func fmtDur(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
