package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// roleEnv, set in this program's environment, makes it one of the Go
// servers under test instead of the benchmark (see serveRole).
const roleEnv = "STICKYD_PEERS_ROLE"

// The roles a re-executed process can take.
const (
	roleStickyd   = "stickyd"    // a stickyd agent: the counter app on subprocess workers
	roleRedisApp  = "redis-app"  // the counter page, its state in Redis
	roleInProcess = "in-process" // the counter page, its state in the process's memory
	roleEcho      = "echo"       // a plain Go echo WebSocket server
)

// readyPrefix starts the line a server prints on stdout once it serves:
// "<readyPrefix> <address> <stats address>".
const readyPrefix = "peers-server-ready"

const (
	// startLimit bounds a server's start, stopLimit its stop.
	startLimit = 2 * time.Minute
	stopLimit  = 30 * time.Second
	// tailLines is how much of a server's output a failure shows.
	tailLines = 30
)

// servedRole is the role this process serves, and statsReadings counts
// its memory readings (serveStats).
var (
	servedRole    string
	statsReadings atomic.Int64
)

// serveRole runs this process as the server role until SIGTERM, with the
// role's flags in args, and returns the exit code.
func serveRole(role string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	workers := fs.Int("workers", 2, "stickyd: the group's workers")
	logLevel := fs.String("log", "warn", "stickyd: the agent's log level")
	redisAddr := fs.String("redis", "", "redis-app: the Redis server's address")
	codec := fs.String("codec", "json", "redis-app: how the page state is encoded: json or gob")
	pool := fs.Int("pool", 64, "redis-app: the most Redis connections")
	allocsDir := fs.String("allocs-dir", "", "stickyd: where the workers write their heap allocations at SIGUSR2 (benchkit.ReadAllocs)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	servedRole = role
	if os.Getenv("STICKYD_PEERS_HEAPPROFILE") != "" {
		// Sample finely enough to see what a connection holds.
		runtime.MemProfileRate = 16 << 10
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// STICKYD_PEERS_CPUPROFILE=PREFIX writes a CPU profile of each server
	// process, from its start to its stop, to PREFIX.ROLE.PID, and at its
	// stop a heap profile (what it allocated: -sample_index=alloc_space) to
	// PREFIX.ROLE.PID.heap (the worker subprocesses take
	// STICKYD_BENCH_WORKER_CPUPROFILE).
	if prefix := os.Getenv("STICKYD_PEERS_CPUPROFILE"); prefix != "" {
		name := fmt.Sprintf("%s.%s.%d", prefix, role, os.Getpid())
		out, err := os.Create(name)
		if err == nil && pprof.StartCPUProfile(out) == nil {
			defer func() {
				pprof.StopCPUProfile()
				out.Close()
				if heap, err := os.Create(name + ".heap"); err == nil {
					_ = pprof.WriteHeapProfile(heap)
					heap.Close()
				}
			}()
		}
	}
	err := runRole(ctx, stdout, func(ctx context.Context) (string, func(), error) {
		switch role {
		case roleStickyd:
			return serveStickyd(ctx, *workers, *logLevel, *allocsDir, stderr)
		case roleRedisApp:
			c, err := codecByName(*codec)
			if err != nil {
				return "", nil, err
			}
			st, err := newRedisStore(ctx, *redisAddr, *pool, c)
			if err != nil {
				return "", nil, err
			}
			return serveHTTP(newPageServer("redis-app", st))
		case roleInProcess:
			return serveHTTP(newPageServer("in-process", newMemStore()))
		case roleEcho:
			return serveHTTP(echoServer{})
		}
		return "", nil, fmt.Errorf("unknown role %q", role)
	})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", role, err)
		return 1
	}
	return 0
}

// runRole starts the role's server with start (which returns where it
// serves and how to stop it) and the statistics listener, announces both
// on stdout, and serves until ctx ends.
func runRole(ctx context.Context, stdout io.Writer, start func(context.Context) (string, func(), error)) error {
	stats, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer stats.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/", serveStats)
	mux.HandleFunc("/allocs", serveAllocs)
	go func() { _ = http.Serve(stats, mux) }()
	addr, stop, err := start(ctx)
	if err != nil {
		return err
	}
	defer stop()
	fmt.Fprintf(stdout, "%s %s %s\n", readyPrefix, addr, stats.Addr())
	<-ctx.Done()
	return nil
}

// serveStickyd starts a stickyd agent whose group runs the counter app on
// workers subprocess workers (this binary, as the counter worker plugin),
// its front on a free loopback port. With allocsDir set the workers write
// their heap allocations there when asked (benchkit.ReadAllocs).
func serveStickyd(ctx context.Context, workers int, logLevel, allocsDir string, stderr io.Writer) (string, func(), error) {
	level := hclog.LevelFromString(logLevel)
	if level == hclog.NoLevel {
		return "", nil, fmt.Errorf("unknown log level %q", logLevel)
	}
	log := benchkit.NewAgentLogger(level, stderr)
	g, err := benchkit.CounterGroup(benchkit.ModeSubprocess, workers)
	if err != nil {
		return "", nil, err
	}
	if allocsDir != "" {
		g.Plugin.Env[benchkit.WorkerAllocsEnv] = allocsDir
	}
	cfg := benchkit.AgentConfig(log, g)
	// The load is heavy for two cores: a slow answer must show as a long
	// round trip, not as a refused request.
	cfg.Front.FrameTimeout = "60s"
	a, err := benchkit.StartAgent(ctx, cfg, log)
	if err != nil {
		return "", nil, fmt.Errorf("starting the agent: %w", err)
	}
	return a.Addr(), func() { _ = benchkit.StopAgent(ctx, a) }, nil
}

// serveHTTP serves h on a free loopback port.
func serveHTTP(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// memStats is what a Go server reports of its own memory, read after a
// garbage collection that also returned freed memory to the system.
type memStats struct {
	HeapInuse  uint64 `json:"heap_inuse"`
	StackInuse uint64 `json:"stack_inuse"`
	Goroutines int    `json:"goroutines"`
}

// serveStats answers with the server's memStats.
func serveStats(w http.ResponseWriter, r *http.Request) {
	// Two collections: the first moves what sync.Pools hold to their
	// victim caches, the second frees it (a burst's pooled buffers are not
	// what a connection holds).
	// Each collection halves a goroutine stack that uses under a quarter
	// of itself, once: four let a reader's stack, grown by a burst, come
	// back to what it holds at rest, as a server's own collections do
	// over a few cycles (at least one every two minutes).
	for range 3 {
		runtime.GC()
	}
	debug.FreeOSMemory() // runs a GC first
	// STICKYD_PEERS_HEAPPROFILE=PREFIX writes a heap profile of the server
	// at each reading, to PREFIX.ROLE.PID.N.
	if prefix := os.Getenv("STICKYD_PEERS_HEAPPROFILE"); prefix != "" {
		if out, err := os.Create(fmt.Sprintf("%s.%s.%d.%d", prefix, servedRole, os.Getpid(), statsReadings.Add(1))); err == nil {
			_ = pprof.WriteHeapProfile(out)
			out.Close()
		}
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(memStats{HeapInuse: m.HeapInuse, StackInuse: m.StackInuse, Goroutines: runtime.NumGoroutine()})
}

// allocsStats is what a Go server reports of its heap allocations.
type allocsStats struct {
	Objects uint64 `json:"objects"`
}

// serveAllocs answers with the heap objects the server has allocated since
// it started. Unlike serveStats it collects nothing: it is read before and
// after a load, and the difference divided by the load's messages.
func serveAllocs(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(allocsStats{Objects: benchkit.HeapAllocObjects()})
}

// serverProc is one server under test in its own process: this binary
// re-executed in a role, redis-server or nginx. It is started and stopped
// from one goroutine.
type serverProc struct {
	name  string
	addr  string // where it serves
	stats string // the stats address of a Go server; "" for redis-server and nginx

	cmd     *exec.Cmd
	log     *tailLog
	stopSig syscall.Signal
	done    chan struct{} // closed once the process has exited
	exitErr error         // set before done is closed
}

// startGoServer runs this binary in role, with args, and waits until it
// announces that it serves.
func startGoServer(ctx context.Context, role string, args []string, stderr io.Writer) (*serverProc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run it as %s: %w", role, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	p := &serverProc{name: role, stopSig: syscall.SIGTERM}
	ready := make(chan string, 1)
	p.log = newTailLog(role, stderr, true, func(line string) bool {
		if !strings.HasPrefix(line, readyPrefix+" ") {
			return false
		}
		select {
		case ready <- line:
		default:
		}
		return true
	})
	if err := p.launch(cmd); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	select {
	case line := <-ready:
		f := strings.Fields(line)
		if len(f) != 3 {
			p.kill()
			return nil, fmt.Errorf("%s announced %q", role, line)
		}
		p.addr, p.stats = f[1], f[2]
		return p, nil
	case <-p.done:
		return nil, fmt.Errorf("%s exited while starting: %v; its last lines:\n%s", role, p.exitErr, p.log.tail())
	case <-ctx.Done():
		p.kill()
		return nil, fmt.Errorf("waiting for %s to serve: %w; its last lines:\n%s", role, ctx.Err(), p.log.tail())
	}
}

// startStickyd starts a stickyd agent whose group runs the counter app on
// workers subprocess workers, which write their heap allocations to
// allocsDir when asked ("": they do not).
func startStickyd(ctx context.Context, workers int, level hclog.Level, allocsDir string, stderr io.Writer) (*serverProc, error) {
	return startGoServer(ctx, roleStickyd, []string{"-workers", fmt.Sprint(workers), "-log", level.String(), "-allocs-dir", allocsDir}, stderr)
}

// launch starts cmd with its output going to p.log. The process gets
// SIGTERM if this one dies first (nginx's master then takes its workers
// down with it), so a run that crashes leaves no server behind.
func (p *serverProc) launch(cmd *exec.Cmd) error {
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	return nil
}

// pid is the server's process id.
func (p *serverProc) pid() int { return p.cmd.Process.Pid }

// stop sends the server its stop signal and waits for it to exit; past
// stopLimit it is killed. An exit other than a clean one is an error.
// Calling it again does nothing.
func (p *serverProc) stop() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(p.stopSig); err != nil {
		p.kill()
		return fmt.Errorf("stopping %s: %w", p.name, err)
	}
	timer := time.NewTimer(stopLimit)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		p.kill()
		return fmt.Errorf("%s did not exit within %v of its stop signal; its last lines:\n%s", p.name, stopLimit, p.log.tail())
	}
	if p.exitErr != nil {
		return fmt.Errorf("%s exited with %v on its stop signal; its last lines:\n%s", p.name, p.exitErr, p.log.tail())
	}
	return nil
}

// kill kills the server if it still runs and waits for it.
func (p *serverProc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// exited says whether the server has exited, and how, for an error
// message; "" while it runs.
func (p *serverProc) exited() string {
	select {
	case <-p.done:
		return fmt.Sprintf("%s exited: %v; its last lines:\n%s", p.name, p.exitErr, p.log.tail())
	default:
		return ""
	}
}

// goStats asks a Go server for its memory, after a garbage collection.
func (p *serverProc) goStats(ctx context.Context) (memStats, error) {
	var m memStats
	if p.stats == "" {
		return m, errors.New(p.name + " reports no Go statistics")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.stats+"/", nil)
	if err != nil {
		return m, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m, fmt.Errorf("reading %s's memory: %w", p.name, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return m, fmt.Errorf("decoding %s's memory: %w", p.name, err)
	}
	return m, nil
}

// goAllocs asks a Go server for the heap objects it has allocated.
func (p *serverProc) goAllocs(ctx context.Context) (uint64, error) {
	if p.stats == "" {
		return 0, errors.New(p.name + " reports no Go statistics")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.stats+"/allocs", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("reading %s's allocations: %w", p.name, err)
	}
	defer resp.Body.Close()
	var a allocsStats
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		return 0, fmt.Errorf("decoding %s's allocations: %w", p.name, err)
	}
	return a.Objects, nil
}

// tailLog takes a server's output: it keeps the last lines for error
// messages and, if echo is set, copies every line to stderr with the
// server's name. A line that claim returns true for is neither kept nor
// copied.
type tailLog struct {
	name   string
	stderr io.Writer
	echo   bool
	claim  func(line string) bool

	mu      sync.Mutex // guards partial and last
	partial []byte
	last    []string
}

func newTailLog(name string, stderr io.Writer, echo bool, claim func(string) bool) *tailLog {
	if claim == nil {
		claim = func(string) bool { return false }
	}
	return &tailLog{name: name, stderr: stderr, echo: echo, claim: claim}
}

// Write implements io.Writer; exec copies the process's output to it.
func (l *tailLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, b...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		if l.claim(line) {
			continue
		}
		if len(l.last) == tailLines {
			l.last = append(l.last[:0], l.last[1:]...)
		}
		l.last = append(l.last, line)
		if l.echo {
			fmt.Fprintf(l.stderr, "%s| %s\n", l.name, line)
		}
	}
	return len(b), nil
}

// tail is the last lines, indented.
func (l *tailLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := append([]string(nil), l.last...)
	if len(l.partial) > 0 {
		lines = append(lines, string(l.partial))
	}
	if len(lines) == 0 {
		return "    (no output)"
	}
	return "    " + strings.Join(lines, "\n    ")
}
