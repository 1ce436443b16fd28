package benchkit

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// WorkerEnv, set to "counter" in a benchmark binary's environment, makes the
// binary the counter worker plugin (see ServeWorkerIfAsked). The
// subprocess mode starts its workers that way.
const WorkerEnv = "STICKYD_BENCH_WORKER"

// The two channels a worker can sit behind.
const (
	ModeInProcess  = "inprocess"  // in-memory channel, in the agent's process
	ModeSubprocess = "subprocess" // go-plugin gRPC, this binary re-executed
)

// counterOptions are the counter worker's options, in-process or served.
var counterOptions = worker.Options{Name: "counter", Version: "bench"}

// ServeWorkerIfAsked serves the counter app as a go-plugin worker when this
// process was started as one (WorkerEnv is "counter"), and then reports
// true: the caller must then return from main without doing anything else.
func ServeWorkerIfAsked() bool {
	if os.Getenv(WorkerEnv) != "counter" {
		return false
	}
	// STICKYD_BENCH_WORKER_CPUPROFILE=PREFIX writes a CPU profile of each
	// worker subprocess's first STICKYD_BENCH_WORKER_CPUPROFILE_SECONDS
	// (default 60) to PREFIX.PID, and at its end a heap profile (what was
	// allocated since the start: -sample_index=alloc_space) to
	// PREFIX.PID.heap.
	if prefix := os.Getenv("STICKYD_BENCH_WORKER_CPUPROFILE"); prefix != "" {
		secs, err := strconv.Atoi(os.Getenv("STICKYD_BENCH_WORKER_CPUPROFILE_SECONDS"))
		if err != nil || secs <= 0 {
			secs = 60
		}
		name := fmt.Sprintf("%s.%d", prefix, os.Getpid())
		if out, err := os.Create(name); err == nil && pprof.StartCPUProfile(out) == nil {
			time.AfterFunc(time.Duration(secs)*time.Second, func() {
				pprof.StopCPUProfile()
				out.Close()
				if heap, err := os.Create(name + ".heap"); err == nil {
					_ = pprof.WriteHeapProfile(heap)
					heap.Close()
				}
			})
		}
	}
	// STICKYD_BENCH_WORKER_HEAPPROFILE=PREFIX writes a heap profile of the
	// worker subprocess to PREFIX.PID.N at each SIGUSR1 (after a collection).
	if prefix := os.Getenv("STICKYD_BENCH_WORKER_HEAPPROFILE"); prefix != "" {
		HeapProfileOnSignal(prefix)
	} else {
		CollectOnSignal()
	}
	if dir := os.Getenv(WorkerAllocsEnv); dir != "" {
		AllocsOnSignal(dir)
	}
	worker.Serve(counter.New(), counterOptions)
	return true
}

// NewAgentLogger is the agent's logger: on stderr, at level.
func NewAgentLogger(level hclog.Level, stderr io.Writer) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "agent", Level: level, Output: stderr})
}

// CounterGroup is the group "web" running the counter app on n workers, in
// mode (ModeInProcess or ModeSubprocess).
func CounterGroup(mode string, n int) (*agent.GroupConfig, error) {
	g := &agent.GroupConfig{Name: "web", Workers: n}
	switch mode {
	case ModeSubprocess:
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this binary to run it as the worker: %w", err)
		}
		// STICKYD_BENCH_PLAIN_CHANNEL=1 measures the channel without
		// go-plugin's AutoMTLS (the default has it).
		g.Plugin = &agent.PluginConfig{Command: exe, Env: map[string]string{WorkerEnv: "counter"},
			PlainChannel: os.Getenv("STICKYD_BENCH_PLAIN_CHANNEL") == "1"}
	case ModeInProcess:
		g.Builtin = "counter"
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	return g, nil
}

// AgentConfig is the agent a benchmark starts, before the benchmark's own
// settings: named "bench", logging at log's level, its front and admin API
// on free loopback ports, every other setting at its default, and g its one
// group. Front and Admin are never nil.
func AgentConfig(log hclog.Logger, g *agent.GroupConfig) *agent.Config {
	return &agent.Config{
		Name:     "bench",
		LogLevel: log.GetLevel().String(),
		// MaxMessageBytes stays at its default: the measured messages are
		// small and the big state only ever travels out, in a pull reply.
		Front:  &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:  &agent.AdminConfig{Address: "127.0.0.1:0"},
		Groups: []*agent.GroupConfig{g},
	}
}

// StartAgent creates cfg's agent, with the counter app available as the
// builtin "counter", and starts it, giving it a minute to get ready.
func StartAgent(ctx context.Context, cfg *agent.Config, log hclog.Logger) (*agent.Agent, error) {
	opts := counterOptions
	opts.Logger = log
	builtins := map[string]agent.Builtin{"counter": worker.InProcess(counter.New(), opts)}
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := a.Start(sctx); err != nil {
		return nil, err
	}
	return a, nil
}

// StopAgent shuts a down, giving it 30 seconds. It does so even when ctx
// has ended (an interrupted run still stops its workers).
func StopAgent(ctx context.Context, a *agent.Agent) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return a.Shutdown(sctx)
}
