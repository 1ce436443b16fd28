package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// workerEnv, set to "counter", makes this binary the counter worker plugin.
const workerEnv = "STICKYD_BENCH_WORKER"

// The two channels a worker can sit behind.
const (
	modeInproc     = "inprocess"
	modeSubprocess = "subprocess"
)

// serveWorkerIfAsked serves the counter app as a go-plugin worker when this
// process was started as one, and then reports true.
func serveWorkerIfAsked() bool {
	if os.Getenv(workerEnv) != "counter" {
		return false
	}
	worker.Serve(counter.New(), worker.Options{Name: "counter", Version: "bench"})
	return true
}

// startAgent starts an agent on a free loopback port whose one group runs
// the counter app on workers workers, in-process or as subprocesses of this
// very binary.
func startAgent(ctx context.Context, mode string, workers int, log hclog.Logger) (*agent.Agent, error) {
	g := &agent.GroupConfig{Name: "web", Workers: workers}
	switch mode {
	case modeSubprocess:
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding this binary to run it as the worker: %w", err)
		}
		g.Plugin = &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "counter"}}
	case modeInproc:
		g.Builtin = "counter"
	default:
		return nil, fmt.Errorf("unknown mode %q", mode)
	}
	cfg := &agent.Config{
		Name:     "bench",
		LogLevel: log.GetLevel().String(),
		// MaxMessageBytes stays at its default: the measured messages are
		// small and the big state only ever travels out, in a pull reply.
		Front:  &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: "10s"},
		Admin:  &agent.AdminConfig{Address: "127.0.0.1:0"},
		Groups: []*agent.GroupConfig{g},
	}
	builtins := map[string]agent.Builtin{"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "bench", Logger: log})}
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
