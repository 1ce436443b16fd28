package main

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// slowBound is the freeze timeout, barrier wait and frame timeout of the
// agent under test. The defaults (5 s) are raised so that a slow machine
// reports a long wait in the table instead of a refused request: the
// benchmark measures the waits, it does not judge them.
const slowBound = "60s"

// The two groups: the agent's configured default, and the catalog group
// promoted over it.
const (
	oldGroup = "v1"
	newGroup = "v2"
)

// groupReadyLimit bounds the wait for the catalog group's workers to start.
const groupReadyLimit = time.Minute

// startAgent starts an agent on free loopback ports whose one configured
// group, oldGroup (the default), runs the counter app on workers subprocess
// workers (this very binary, re-executed), with its raft log and its parked
// packages on disk in dataDir.
func startAgent(ctx context.Context, workers int, dataDir string, log hclog.Logger) (*agent.Agent, error) {
	g, err := benchkit.CounterGroup(benchkit.ModeSubprocess, workers)
	if err != nil {
		return nil, err
	}
	g.Name = oldGroup
	cfg := benchkit.AgentConfig(log, g)
	cfg.DataDir = dataDir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	cfg.Front.FrameTimeout, cfg.Front.BarrierWait = slowBound, slowBound
	cfg.Move = &agent.MoveConfig{FreezeTimeout: slowBound}
	return benchkit.StartAgent(ctx, cfg, log)
}

// addGroup records the group name in the catalog, the same counter app on
// workers subprocess workers, and waits until the agent runs them all.
func addGroup(ctx context.Context, a *agent.Agent, name string, workers int) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary to run it as the worker: %w", err)
	}
	err = a.Supervisor().PutGroup(ctx, fsm.GroupEntry{
		Name: name, Runtime: "go-plugin", Command: exe,
		Env: map[string]string{benchkit.WorkerEnv: "counter"}, Workers: workers,
	})
	if err != nil {
		return fmt.Errorf("creating group %s: %w", name, err)
	}
	deadline := time.Now().Add(groupReadyLimit)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n := len(groupWorkers(a, name))
		if n == workers {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("starting group %s: %d of its %d workers ready after %v", name, n, workers, groupReadyLimit)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("starting group %s: interrupted: %w", name, ctx.Err())
		}
	}
}

// groupWorkers lists the agent's ready workers of group.
func groupWorkers(a *agent.Agent, group string) []string {
	var out []string
	for _, w := range a.Pool().Ready() {
		if a.Pool().GroupOf(w) == group {
			out = append(out, w)
		}
	}
	return out
}

// raiseFileLimit raises this process's open-file limit to its hard limit
// (and the hard limit to need, where the process may: as root), and fails
// with a clear message if that is still below need. The holder, started
// later, inherits it.
func raiseFileLimit(need int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading the open-file limit: %w", err)
	}
	if l.Max < uint64(need) {
		raised := syscall.Rlimit{Cur: uint64(need), Max: uint64(need)}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			l = raised
		}
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return fmt.Errorf("raising the open-file limit to %d: %w", l.Max, err)
		}
	}
	if l.Cur < uint64(need) {
		return fmt.Errorf("this run needs about %d open files in one process, but the limit is %d (hard): "+
			"raise it (ulimit -Hn, or LimitNOFILE) or lower -users", need, l.Cur)
	}
	return nil
}
