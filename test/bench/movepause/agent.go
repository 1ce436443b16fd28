package main

import (
	"context"
	"os"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// slowBound is the freeze timeout, barrier wait and frame timeout of the
// agent under test. The defaults (5 s) are raised so that a slow machine
// reports a long pause in the table instead of a refused request: the
// benchmark measures the pause, it does not judge it.
const slowBound = "60s"

// startAgent starts an agent on free loopback ports whose one group runs the
// counter app on workers subprocess workers (this very binary, re-executed),
// with its raft log and its parked packages on disk in dataDir.
func startAgent(ctx context.Context, workers int, dataDir string, log hclog.Logger) (*agent.Agent, error) {
	g, err := benchkit.CounterGroup(benchkit.ModeSubprocess, workers)
	if err != nil {
		return nil, err
	}
	if v := os.Getenv("STICKYD_BENCH_CHECKPOINTS"); v != "" {
		g.CheckpointInterval = v
	}
	cfg := benchkit.AgentConfig(log, g)
	cfg.DataDir = dataDir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	cfg.Front.FrameTimeout, cfg.Front.BarrierWait = slowBound, slowBound
	cfg.Move = &agent.MoveConfig{FreezeTimeout: slowBound}
	return benchkit.StartAgent(ctx, cfg, log)
}
