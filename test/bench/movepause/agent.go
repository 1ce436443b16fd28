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

// slowBound is the freeze timeout, barrier wait and frame timeout of the
// agent under test. The defaults (5 s) are raised so that a slow machine
// reports a long pause in the table instead of a refused request: the
// benchmark measures the pause, it does not judge it.
const slowBound = "60s"

// serveWorkerIfAsked serves the counter app as a go-plugin worker when this
// process was started as one, and then reports true.
func serveWorkerIfAsked() bool {
	if os.Getenv(workerEnv) != "counter" {
		return false
	}
	worker.Serve(counter.New(), worker.Options{Name: "counter", Version: "bench"})
	return true
}

// startAgent starts an agent on free loopback ports whose one group runs the
// counter app on workers subprocess workers (this very binary, re-executed),
// with its raft log and its parked packages on disk in dataDir.
func startAgent(ctx context.Context, workers int, dataDir string, log hclog.Logger) (*agent.Agent, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this binary to run it as the worker: %w", err)
	}
	cfg := &agent.Config{
		Name:     "bench",
		LogLevel: log.GetLevel().String(),
		DataDir:  dataDir,
		Server:   &agent.ServerConfig{RaftAddr: "127.0.0.1:0"},
		// MaxMessageBytes stays at its default: the measured messages are
		// small and the big state only ever travels out, in a pull reply.
		Front: &agent.FrontConfig{Address: "127.0.0.1:0", FrameTimeout: slowBound, BarrierWait: slowBound},
		Admin: &agent.AdminConfig{Address: "127.0.0.1:0"},
		Move:  &agent.MoveConfig{FreezeTimeout: slowBound},
		Groups: []*agent.GroupConfig{{
			Name:    "web",
			Workers: workers,
			Plugin:  &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "counter"}},
		}},
	}
	a, err := agent.New(cfg, nil, log)
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
