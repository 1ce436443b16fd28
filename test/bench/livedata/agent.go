package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// slowBound is the frame timeout, barrier wait and freeze timeout of the
// agent under test. The defaults (5 s) are raised so that a slow machine
// reports a long wait (fifty people queued on one grant) in the table
// instead of a refused request: the benchmark measures, it does not judge.
const slowBound = "60s"

// fileMargin is the open files this process needs besides two per page
// (the client's end of its WebSocket and the agent's): the agent's
// listeners, raft, the workers' pipes, the HTTP connections of the pages
// being opened.
const fileMargin = 1000

// startAgent starts an agent on free loopback ports whose one group runs the
// counter app on workers subprocess workers (this very binary, re-executed),
// with its raft log and its parked packages on disk in dataDir.
func startAgent(ctx context.Context, workers int, dataDir string, log hclog.Logger) (*agent.Agent, error) {
	g, err := benchkit.CounterGroup(benchkit.ModeSubprocess, workers)
	if err != nil {
		return nil, err
	}
	cfg := benchkit.AgentConfig(log, g)
	cfg.DataDir = dataDir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	cfg.Front.FrameTimeout, cfg.Front.BarrierWait = slowBound, slowBound
	cfg.Move = &agent.MoveConfig{FreezeTimeout: slowBound}
	return benchkit.StartAgent(ctx, cfg, log)
}

// raiseFileLimit raises this process's open-file limit to its hard limit,
// and fails with a clear message if that is still below need.
func raiseFileLimit(need int) error {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return fmt.Errorf("reading the open-file limit: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return fmt.Errorf("raising the open-file limit to %d: %w", l.Max, err)
		}
	}
	if l.Cur < uint64(need) {
		return fmt.Errorf("this run needs about %d open files in one process, but the limit is %d (hard): "+
			"raise it (ulimit -Hn, or LimitNOFILE) or lower -subscribers", need, l.Cur)
	}
	return nil
}

// tableCounts are the agent's table metrics (internal/host/tables.go):
// changes its workers published, those no other worker watched, and the
// sends to other workers, all workers together.
type tableCounts struct {
	published, unwatched, sends float64
}

func (c tableCounts) minus(o tableCounts) tableCounts {
	return tableCounts{c.published - o.published, c.unwatched - o.unwatched, c.sends - o.sends}
}

// readTableCounts scrapes the agent's admin API for its table metrics.
func readTableCounts(ctx context.Context, a *agent.Agent) (tableCounts, error) {
	var c tableCounts
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+a.AdminAddr()+"/v1/metrics", nil)
	if err != nil {
		return c, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return c, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return c, fmt.Errorf("reading the agent's metrics: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		var into *float64
		switch name {
		case "stickyd_tables_published_total":
			into = &c.published
		case "stickyd_tables_unwatched_total":
			into = &c.unwatched
		case "stickyd_tables_sends_total":
			into = &c.sends
		default:
			continue
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			return c, fmt.Errorf("reading the agent's metrics: %q: %w", line, err)
		}
		*into += v
	}
	if err := sc.Err(); err != nil {
		return c, fmt.Errorf("reading the agent's metrics: %w", err)
	}
	return c, nil
}
