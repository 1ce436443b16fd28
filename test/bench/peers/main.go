// Command peers measures stickyd side by side with what people would pick
// instead, in one run, with the same client against every server:
//
//   - state (-parts redis): the seed's central claim. The counter app's
//     page (a count and a blob of N bytes of state) on 50 concurrent
//     pages, closed loop, sending "inc": in stickyd the state stays in the
//     worker's memory, behind the front; in the orthodox answer a Go
//     WebSocket server (gorilla) keeps it in Redis and for every message
//     GETs it, decodes it, applies the inc, encodes it and SETs it back;
//     and, as the floor, the same app in one Go process that keeps the
//     state in its own memory with no hop. State sizes 1 KB to 10 MB.
//   - live (-parts live): the same three systems driven as a browser tab
//     running /_stickyd/client.js drives stickyd: a pull always waiting,
//     and each message a small edit of a grid of 1 KB to 10 MB (three tree
//     writes) whose deltas the waiting pull brings. Besides msgs/s and
//     latency it reads what each message costs every server process: CPU
//     time, write syscalls, Go heap allocations and WebSocket frames.
//   - proxy (-parts nginx): nginx (upstream chosen by `hash $cookie_sid
//     consistent`) in front of Go echo WebSocket servers against stickyd's
//     front in front of its workers (the counter app's echo op), and the
//     Go echo server without a proxy; 100 and 1,000 connections.
//   - idle (-parts idle): memory per idle WebSocket of stickyd's front (a
//     separate agent process), a plain Go echo server and nginx, at 10,000
//     and 100,000 connections, as far as this machine's open-file limit
//     lets them be opened.
//
// Every server under test runs in its own process: stickyd's agent and the
// Go servers are this binary re-executed (STICKYD_PEERS_ROLE), stickyd's
// workers are this binary as the counter worker plugin
// (STICKYD_BENCH_WORKER=counter), and redis-server and nginx are started
// from their Debian packages with their own configuration and data in a
// temporary directory, on free loopback ports, and stopped at the end. The
// system's own services are never touched.
//
//	go run ./test/bench/peers               # full run (make bench-peers)
//	go run ./test/bench/peers -quick        # smoke run
//	go run ./test/bench/peers -parts idle   # one part
//
// It prints Markdown tables with ratios on stdout (the machine and the date
// first), progress on stderr, and writes CSV files and PNG plots to -out.
// Any failed operation fails the run with a non-zero exit: an error is never
// counted as a result. It must stay a program that prints tables, never a
// timed assertion.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "peers",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() {
	// The worker check comes first: the workers inherit the environment of
	// the agent's process, roleEnv included.
	if benchkit.ServeWorkerIfAsked() {
		return
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(serveRole(role, os.Args[1:], os.Stdout, os.Stderr))
	}
	program.Main()
}

// The parts of a run, in the order they run.
const (
	partRedis = "redis"
	partLive  = "live"
	partNginx = "nginx"
	partIdle  = "idle"
)

var allParts = []string{partRedis, partLive, partNginx, partIdle}

// options are the parsed flags.
type options struct {
	parts    []string
	sizes    []benchkit.Size
	pages    int
	codecs   []string
	duration time.Duration
	warmup   time.Duration
	conns    []int
	payload  int
	idle     []int
	settle   time.Duration
	workers  int
	batch    bool
	out      string
	logLevel hclog.Level
}

func (o *options) runs(part string) bool { return slices.Contains(o.parts, part) }

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	fs := benchkit.NewFlags("peers",
		"smoke run: -sizes 1KB,100KB -pages 10 -codecs json -duration 500ms -warmup 100ms -conns 10,100 -idle 1000 unless given", stderr)
	parts := fs.String("parts", "redis,live,nginx,idle", "parts to run, comma-separated: redis (page state in Redis vs in the worker), live (a live tab editing a grid, with each message's costs), nginx (WebSocket proxying), idle (memory per idle WebSocket)")
	sizes := fs.String("sizes", "1KB,100KB,1MB,10MB", "redis and live parts: page-state sizes, comma-separated (B, KB, MB; 1KB = 1024 bytes)")
	pages := fs.Int("pages", 50, "redis and live parts: concurrent pages (tabs), each its own browser and WebSocket")
	codecs := fs.String("codecs", "json,gob", "redis and live parts: how the Redis app encodes the page state, comma-separated: json, gob")
	batch := fs.Bool("batch", true, "live part: dial stickyd's WebSocket with ?batch=1, taking answers combined in one frame")
	duration := fs.Duration("duration", 5*time.Second, "measured time per cell")
	warmup := fs.Duration("warmup", time.Second, "unmeasured warm-up per cell, before the measured time")
	conns := fs.String("conns", "100,1000", "nginx part: concurrent connections, comma-separated")
	payload := fs.Int("payload", 64, "nginx part: bytes of text each echo message carries")
	idle := fs.String("idle", "1000,5000,15000,100000", "idle part: idle WebSockets per server, comma-separated (a count past what the open-file limit allows is reported as not measured)")
	settle := fs.Duration("settle", 2*time.Second, "idle part: quiet time before each reading of a server's memory")
	workers := fs.Int("workers", 2, "stickyd's workers, and the Go echo servers behind nginx")
	out := fs.String("out", "docs/benchmarks", `directory the CSV files and PNG plots are written to ("" for none)`)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	quick := func(name, value string, into *string) {
		if fs.QuickDefault(name) {
			*into = value
		}
	}
	quick("sizes", "1KB,100KB", sizes)
	quick("codecs", "json", codecs)
	quick("conns", "10,100", conns)
	quick("idle", "1000", idle)
	o := &options{pages: *pages, duration: *duration, warmup: *warmup, payload: *payload, settle: *settle, workers: *workers, batch: *batch, out: *out}
	if fs.QuickDefault("pages") {
		o.pages = 10
	}
	if fs.QuickDefault("duration") {
		o.duration = 500 * time.Millisecond
	}
	if fs.QuickDefault("warmup") {
		o.warmup = 100 * time.Millisecond
	}
	if o.duration <= 0 || o.warmup < 0 || o.settle < 0 {
		return nil, errors.New("-duration must be positive, -warmup and -settle not negative")
	}
	if o.pages < 1 || o.workers < 1 {
		return nil, errors.New("-pages and -workers must be at least 1")
	}
	if o.payload < 1 || o.payload > 64<<10 {
		return nil, errors.New("-payload must be 1 to 65536 bytes")
	}
	for _, p := range benchkit.SplitList(*parts) {
		if !slices.Contains(allParts, p) {
			return nil, fmt.Errorf("-parts: unknown part %q (want redis, live, nginx or idle)", p)
		}
		o.parts = append(o.parts, p)
	}
	for _, c := range benchkit.SplitList(*codecs) {
		if _, err := codecByName(c); err != nil {
			return nil, fmt.Errorf("-codecs: %w", err)
		}
		o.codecs = append(o.codecs, c)
	}
	var err error
	if o.sizes, err = benchkit.ParseSizes(*sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %w", err)
	}
	if o.conns, err = parseCounts(*conns); err != nil {
		return nil, fmt.Errorf("-conns: %w", err)
	}
	if o.idle, err = parseCounts(*idle); err != nil {
		return nil, fmt.Errorf("-idle: %w", err)
	}
	switch {
	case len(o.parts) == 0:
		return nil, errors.New("-parts needs at least one part")
	case (o.runs(partRedis) || o.runs(partLive)) && (len(o.sizes) == 0 || len(o.codecs) == 0):
		return nil, errors.New("the redis and live parts need at least one size and one codec")
	case o.runs(partNginx) && len(o.conns) == 0:
		return nil, errors.New("the nginx part needs at least one connection count")
	case o.runs(partIdle) && len(o.idle) == 0:
		return nil, errors.New("the idle part needs at least one connection count")
	}
	if o.logLevel, err = fs.LogLevel(); err != nil {
		return nil, err
	}
	return o, nil
}

// parseCounts reads a comma-separated list of positive counts.
func parseCounts(list string) ([]int, error) {
	var out []int
	for _, s := range benchkit.SplitList(list) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// report is what a run measured, part by part; a part not run is empty.
type report struct {
	start    time.Time
	machine  string
	versions []string // of the peers run ("redis-server 7.0.15")
	state    []stateResult
	live     []liveResult
	proxy    []proxyResult
	idle     []idleResult
	files    []string // what was written to -out
}

// measure runs the parts in order. The stickyd agent the redis, live and
// nginx parts share is started once; the idle part starts its own servers for
// each count, so each starts from a clean baseline.
func measure(ctx context.Context, o *options, stderr io.Writer) (r *report, err error) {
	r = &report{start: time.Now(), machine: benchkit.Machine()}
	raiseFileLimit()
	tmp, err := os.MkdirTemp("", "stickyd-peers-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	env := &runEnv{o: o, tmp: tmp, stderr: stderr}
	defer func() {
		if serr := env.stopShared(); serr != nil && err == nil {
			err = serr
		}
	}()
	if o.runs(partRedis) || o.runs(partLive) {
		r.versions = append(r.versions, programVersion("redis-server", "redis-server", "--version"))
	}
	if o.runs(partNginx) || o.runs(partIdle) {
		if _, err := findBinary("nginx", "nginx"); err == nil || o.runs(partNginx) {
			r.versions = append(r.versions, programVersion("nginx", "nginx", "-v"))
		}
	}
	if o.runs(partRedis) {
		if r.state, err = measureState(ctx, env); err != nil {
			return nil, fmt.Errorf("redis part: %w", err)
		}
	}
	if o.runs(partLive) {
		if r.live, err = measureLive(ctx, env); err != nil {
			return nil, fmt.Errorf("live part: %w", err)
		}
	}
	if o.runs(partNginx) {
		if r.proxy, err = measureProxy(ctx, env); err != nil {
			return nil, fmt.Errorf("nginx part: %w", err)
		}
	}
	if err := env.stopShared(); err != nil {
		return nil, err
	}
	if o.runs(partIdle) {
		if r.idle, err = measureIdle(ctx, env); err != nil {
			return nil, fmt.Errorf("idle part: %w", err)
		}
	}
	if o.out != "" {
		if r.files, err = writeFiles(o.out, r); err != nil {
			return nil, fmt.Errorf("writing to %s: %w", o.out, err)
		}
		for _, f := range r.files {
			fmt.Fprintf(stderr, "wrote %s\n", f)
		}
	}
	return r, nil
}

// runEnv is what the parts of one run share: the options, the temporary
// directory the peers' configuration and data go into, and the stickyd
// agent the redis, live and nginx parts all measure.
type runEnv struct {
	o      *options
	tmp    string
	stderr io.Writer
	agent  *serverProc // started by sharedAgent, stopped by stopShared
}

// sharedAgent is the stickyd agent with o.workers subprocess counter
// workers, started on first use.
func (e *runEnv) sharedAgent(ctx context.Context) (*serverProc, error) {
	if e.agent != nil {
		return e.agent, nil
	}
	fmt.Fprintf(e.stderr, "starting a stickyd agent with %d subprocess workers\n", e.o.workers)
	if err := os.MkdirAll(e.allocsDir(), 0o700); err != nil {
		return nil, err
	}
	a, err := startStickyd(ctx, e.o.workers, e.o.logLevel, e.allocsDir(), e.stderr)
	if err != nil {
		return nil, err
	}
	e.agent = a
	return a, nil
}

// allocsDir is where the shared agent's workers write their heap
// allocations when asked (benchkit.ReadAllocs).
func (e *runEnv) allocsDir() string { return filepath.Join(e.tmp, "worker-allocs") }

// stopShared stops the shared agent if it runs; it may be called again.
func (e *runEnv) stopShared() error {
	if e.agent == nil {
		return nil
	}
	a := e.agent
	e.agent = nil
	return a.stop()
}

// raiseFileLimit raises this process's open-file limit to its hard limit.
// The Go runtime raises it too, but gives the processes it starts the
// limit it found; calling setrlimit here, even to the same value, makes
// the servers this process starts inherit the raised one.
func raiseFileLimit() {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
}

// fileLimit is this process's open-file limit after raiseFileLimit.
func fileLimit() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	return int(min(lim.Cur, 1<<30))
}

// programVersion is the version a peer's program reports with flag, as
// "name version", or "name (version unknown)".
func programVersion(name, pkg, flag string) string {
	bin, err := findBinary(name, pkg)
	if err != nil {
		return name + " (not installed)"
	}
	out, _ := exec.Command(bin, flag).CombinedOutput()
	s := string(out)
	// "Redis server v=7.0.15 sha=..." or "nginx version: nginx/1.22.1".
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return name + " " + v
		}
		if v, ok := strings.CutPrefix(f, name+"/"); ok {
			return name + " " + v
		}
	}
	return name + " (version unknown)"
}
