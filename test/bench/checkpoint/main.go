// Command checkpoint measures what crash checkpoints cost a person typing
// (P1: a message's round trip front → worker → front): the counter app's
// "inc" sent closed loop by pages of 1 KB, 1 MB and 10 MB of state, with
// checkpoints off and every 5 s and 1 s. Every inc changes its page, so
// every round packages every page: a 1 KB page whole, in its person's
// mailbox; a page of 64 KB or more whole once (from a view, encoded outside
// the mailbox) and then as the writes since (increments). Beside p50, p99
// and max it prints the rounds the window saw, the pieces and bytes they
// parked and a round's mean duration.
//
//	go run ./test/bench/checkpoint            # full run, ~10 s per cell
//	go run ./test/bench/checkpoint -quick     # smoke run, ~3 s per cell
//
// It prints the machine and a Markdown table on stdout, progress on stderr.
// Any failed operation fails the run with a non-zero exit. It must stay a
// program that prints a table, never a timed assertion.
//
// Run with STICKYD_BENCH_WORKER=counter in its environment, the binary is the
// counter worker plugin instead; the subprocess mode starts it that way.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, []result]{
	Name:    "checkpoint",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() { program.Main() }

// opTimeout bounds one op's write and its answer.
const opTimeout = 30 * time.Second

// ackEvery is how many incs a page sends between two pulls (not measured):
// like client.js, it keeps its deltas read, so the worker never folds them.
const ackEvery = 200

type options struct {
	duration  time.Duration
	warmup    time.Duration
	intervals []string
	sizes     []benchkit.Size
	pages     int
	workers   int
	mode      string
	repeat    int
	logLevel  hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("checkpoint", "smoke run: -duration 3s -warmup 300ms unless given", stderr)
	duration := fs.Duration("duration", 10*time.Second, "measured time per cell (keep it above the longest interval)")
	warmup := fs.Duration("warmup", time.Second, "unmeasured warm-up per cell")
	intervals := fs.String("intervals", "off,5s,1s", "checkpoint_interval settings, comma-separated (off, or a duration)")
	sizes := fs.String("sizes", "1KB,1MB,10MB", "page-state sizes, comma-separated (B, KB, MB)")
	pages := fs.Int("pages", 10, "concurrent pages per cell, each its own browser")
	workers := fs.Int("workers", 2, "workers in the group")
	mode := fs.String("mode", benchkit.ModeSubprocess, "worker mode: subprocess or inprocess")
	repeat := fs.Int("repeat", 1, "times to run the whole sequence of intervals; the cells of one interval and size are pooled (interleaving them spreads the machine's other load over all)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o := &options{duration: *duration, warmup: *warmup, pages: *pages, workers: *workers, mode: *mode, repeat: *repeat}
	if fs.QuickDefault("duration") {
		o.duration = 3 * time.Second
	}
	if fs.QuickDefault("warmup") {
		o.warmup = 300 * time.Millisecond
	}
	if o.duration <= 0 || o.warmup < 0 || o.pages < 1 || o.workers < 1 || o.repeat < 1 {
		return nil, errors.New("-duration, -pages, -workers and -repeat must be positive, -warmup not negative")
	}
	if o.mode != benchkit.ModeSubprocess && o.mode != benchkit.ModeInProcess {
		return nil, fmt.Errorf("-mode: unknown mode %q", o.mode)
	}
	o.intervals = benchkit.SplitList(*intervals)
	var err error
	if o.sizes, err = benchkit.ParseSizes(*sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %w", err)
	}
	if len(o.intervals) == 0 || len(o.sizes) == 0 {
		return nil, errors.New("-intervals and -sizes each need at least one value")
	}
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// result is one measured cell.
type result struct {
	interval  string
	size      benchkit.Size
	frames    int
	window    time.Duration
	latencies []time.Duration // sorted
	// What the checkpoint rounds did during the window.
	rounds, pieces, bytes int64
	roundSeconds          float64 // summed duration of the rounds
}

func (r *result) rate() float64 { return float64(r.frames) / r.window.Seconds() }

// measure runs one agent per interval (it is a group setting), every size
// on it, and stops it before the next; -repeat times over, pooling the
// repeats of a cell.
func measure(ctx context.Context, o *options, stderr io.Writer) ([]result, error) {
	log := benchkit.NewAgentLogger(o.logLevel, stderr)
	var out []result
	for rep := 0; rep < o.repeat; rep++ {
		for _, iv := range o.intervals {
			rs, err := measureInterval(ctx, o, iv, log, stderr)
			if err != nil {
				return out, err
			}
			for _, r := range rs {
				out = pool(out, r)
			}
		}
	}
	for i := range out {
		slices.Sort(out[i].latencies)
	}
	return out, nil
}

// pool adds r to the result of its cell in rs, or appends it.
func pool(rs []result, r result) []result {
	for i := range rs {
		if rs[i].interval == r.interval && rs[i].size == r.size {
			p := &rs[i]
			p.frames += r.frames
			p.window += r.window
			p.latencies = append(p.latencies, r.latencies...)
			p.rounds, p.pieces, p.bytes = p.rounds+r.rounds, p.pieces+r.pieces, p.bytes+r.bytes
			p.roundSeconds += r.roundSeconds
			return rs
		}
	}
	return append(rs, r)
}

func measureInterval(ctx context.Context, o *options, interval string, log hclog.Logger, stderr io.Writer) (rs []result, err error) {
	dir, err := os.MkdirTemp("", "stickyd-checkpoint-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	g, err := benchkit.CounterGroup(o.mode, o.workers)
	if err != nil {
		return nil, err
	}
	g.CheckpointInterval = interval
	cfg := benchkit.AgentConfig(log, g)
	// The pieces are parked on disk, as in production.
	cfg.DataDir = dir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	cfg.Front.FrameTimeout = "30s"
	fmt.Fprintf(stderr, "starting an agent with %d %s workers, checkpoint_interval %s\n", o.workers, o.mode, interval)
	a, err := benchkit.StartAgent(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("starting the agent (checkpoint_interval %s): %w", interval, err)
	}
	defer func() {
		if serr := benchkit.StopAgent(ctx, a); serr != nil && err == nil {
			err = fmt.Errorf("shutting down the agent: %w", serr)
		}
	}()
	for _, size := range o.sizes {
		fmt.Fprintf(stderr, "  %d pages of %s, checkpoint_interval %s ... ", o.pages, size.Label, interval)
		r, err := runCell(ctx, a, o, interval, size)
		if err != nil {
			fmt.Fprintln(stderr, "error")
			return rs, fmt.Errorf("%s state, checkpoint_interval %s: %w", size.Label, interval, err)
		}
		fmt.Fprintf(stderr, "%.0f frames/s, %d rounds\n", r.rate(), r.rounds)
		rs = append(rs, r)
	}
	return rs, nil
}

// checkpointStats sums the workers' checkpoint counters and reads the
// round-duration sum from the admin API's metrics.
type checkpointStats struct {
	rounds, pieces, bytes int64
	seconds               float64
}

func statsOf(ctx context.Context, a *agent.Agent) (checkpointStats, error) {
	var s checkpointStats
	for _, w := range a.Pool().Workers() {
		s.rounds += w.CheckpointRounds
		s.pieces += w.CheckpointPieces
		s.bytes += w.CheckpointBytes
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.AdminAddr()+"/v1/metrics", nil)
	if err != nil {
		return s, err
	}
	req.Header.Set("X-Stickyd-Token", a.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return s, fmt.Errorf("reading the metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("reading the metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "stickyd_checkpoint_round_duration_seconds_sum "); ok {
			if s.seconds, err = strconv.ParseFloat(strings.TrimSpace(v), 64); err != nil {
				return s, fmt.Errorf("reading the round durations: %w", err)
			}
		}
	}
	return s, sc.Err()
}

// runCell opens the pages, fills their state, types closed loop for the
// warm-up and the window, and closes the pages.
func runCell(ctx context.Context, a *agent.Agent, o *options, interval string, size benchkit.Size) (res result, err error) {
	res = result{interval: interval, size: size, window: o.duration}
	var pages []*benchkit.Page
	defer func() {
		for _, p := range pages {
			p.Abort()
		}
	}()
	for i := 0; i < o.pages; i++ {
		p, err := benchkit.OpenPage(ctx, a.Addr(), "", opTimeout)
		if err != nil {
			return res, fmt.Errorf("page %d: %w", i, err)
		}
		pages = append(pages, p)
		if err := p.Fill(size.Bytes); err != nil {
			return res, fmt.Errorf("page %d: filling %s: %w", i, size.Label, err)
		}
	}
	// The window's checkpoint work: the counters at its ends.
	var (
		before   checkpointStats
		statsErr error
	)
	statsDone := make(chan struct{})
	go func() {
		defer close(statsDone)
		select {
		case <-time.After(o.warmup):
			before, statsErr = statsOf(ctx, a)
		case <-ctx.Done():
			statsErr = ctx.Err()
		}
	}()
	sent := make([]int, len(pages))
	lats, err := benchkit.Drive(ctx, len(pages), o.warmup, o.duration, func(i int) error {
		p := pages[i]
		if err := p.IncHome(); err != nil {
			return fmt.Errorf("page on %s: %w", p.Worker(), err)
		}
		if sent[i]++; sent[i]%ackEvery == 0 {
			if _, err := p.Ack(); err != nil {
				return fmt.Errorf("page on %s: %w", p.Worker(), err)
			}
		}
		return nil
	}, func() {
		for _, p := range pages {
			p.Abort()
		}
	})
	<-statsDone
	if err != nil {
		return res, err
	}
	if statsErr != nil {
		return res, statsErr
	}
	after, err := statsOf(ctx, a)
	if err != nil {
		return res, err
	}
	res.rounds, res.pieces, res.bytes = after.rounds-before.rounds, after.pieces-before.pieces, after.bytes-before.bytes
	res.roundSeconds = after.seconds - before.seconds
	for _, l := range lats {
		res.frames += len(l)
		res.latencies = append(res.latencies, l...)
	}
	slices.Sort(res.latencies)
	if res.frames == 0 {
		return res, errors.New("no round trip completed in the measured window")
	}
	for i, p := range pages {
		if err := p.Close(); err != nil {
			return res, fmt.Errorf("page %d: %w", i, err)
		}
	}
	pages = nil
	return res, nil
}

func printReport(w io.Writer, o *options, results []result) {
	fmt.Fprintln(w, "# stickyd crash checkpoints: what they cost a message (P1)")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "- machine: %s\n", benchkit.Machine())
	fmt.Fprintf(w, "- load: %d pages (each its own browser), closed loop `{\"op\":\"msg\",\"data\":{\"op\":\"inc\"}}` on %d %s workers; every inc changes its page, so every round packages every page (whole, or as its writes since for a page of 64 KB or more); a pull every %d incs; %s measured per cell after %s warm-up, %d time(s) over (interleaved, pooled)\n",
		o.pages, o.workers, o.mode, ackEvery, o.duration, o.warmup, o.repeat)
	fmt.Fprintln(w, "- the agent has a data dir: the pieces are parked on disk (not fsynced, like a move's package)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| checkpoint_interval | state/page | frames/s | p50 | p99 | max | rounds | pieces | MB parked | mean round |")
	fmt.Fprintln(w, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
	for _, r := range results {
		mean := "–"
		if r.rounds > 0 {
			mean = benchkit.FormatDuration(time.Duration(r.roundSeconds / float64(r.rounds) * float64(time.Second)))
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %s | %s | %d | %d | %.1f | %s |\n",
			r.interval, r.size.Label, r.rate(),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 0.50)),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 0.99)),
			benchkit.FormatDuration(benchkit.Percentile(r.latencies, 1)),
			r.rounds, r.pieces, float64(r.bytes)/(1<<20), mean)
	}
}
