package agent

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stickyd/stickyd/internal/placement"
)

// A full data directory is a condition, not a crash (docs/operations.md).
// The guard reads the directory's free space twice a second; below its
// reserve (a tenth of the disk, between 1 MiB and 64 MiB) the disk is full
// until the free space is back above twice the reserve:
//   - new sessions are refused with 503 saying so (their entry in the maps
//     is the one write they cannot do without), while the people already
//     here go on: their state is in their worker's memory;
//   - the crash checkpoints pause (they would fail, and each failure
//     would cost the worker a round);
//   - idle parking pauses (a parked package needs the disk);
//   - the reserve is left to raft, whose few small entries (moves, logins,
//     forgettings, which free space) never meet a full disk, so the leader
//     never steps down over a failed write and nothing it acknowledged is
//     lost.
//
// A stop with the disk full parks whoever fits and names the others.
type diskGuard struct {
	a   *Agent
	dir string

	full     atomic.Bool
	mu       sync.Mutex // serialises check
	stopped  bool
	free     prometheus.Gauge
	fullG    prometheus.Gauge
	episodes prometheus.Counter
}

func newDiskGuard(a *Agent, dir string, reg prometheus.Registerer) (*diskGuard, error) {
	g := &diskGuard{a: a, dir: dir,
		free: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stickyd_disk_free_bytes",
			Help: "Free bytes of the data directory's file system, as the agent last read them."}),
		fullG: prometheus.NewGauge(prometheus.GaugeOpts{Name: "stickyd_disk_full",
			Help: "1 while the data directory is below its reserve: new sessions refused, checkpoints and idle parking paused."}),
		episodes: prometheus.NewCounter(prometheus.CounterOpts{Name: "stickyd_disk_full_total",
			Help: "Times the data directory fell below its reserve."}),
	}
	for _, c := range []prometheus.Collector{g.free, g.fullG, g.episodes} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// reserve is the free space kept for raft out of total bytes.
func reserve(total uint64) uint64 {
	return min(max(total/10, 1<<20), 64<<20)
}

// admit refuses a new session while the disk is full.
func (g *diskGuard) admit() error {
	if g.full.Load() {
		return fmt.Errorf("%w (below its reserve of free space)", placement.ErrDiskFull)
	}
	return nil
}

// check reads the free space and changes the state on a crossing.
func (g *diskGuard) check() {
	var st syscall.Statfs_t
	if err := syscall.Statfs(g.dir, &st); err != nil {
		return
	}
	total, avail := st.Blocks*uint64(st.Bsize), st.Bavail*uint64(st.Bsize)
	g.free.Set(float64(avail))
	keep := reserve(total)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch full := g.full.Load(); {
	case !full && avail < keep:
		g.full.Store(true)
		g.fullG.Set(1)
		g.episodes.Inc()
		if !g.stopped && g.a.pool != nil {
			g.a.pool.PauseCheckpoints()
		}
		g.a.log.Warn("the data directory is full: new sessions are refused, checkpoints and idle parking paused until it has room",
			"dir", g.dir, "free_bytes", avail, "reserve_bytes", keep)
	case full && avail > 2*keep:
		g.full.Store(false)
		g.fullG.Set(0)
		if !g.stopped && g.a.pool != nil {
			g.a.pool.ResumeCheckpoints()
		}
		g.a.log.Info("the data directory has room again: new sessions, checkpoints and idle parking resume", "dir", g.dir, "free_bytes", avail)
	}
}

// stop ends the checkpoints' resumption: the agent is on its way down
// (the stop pauses them itself).
func (g *diskGuard) stop() {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
}

// run checks twice a second until done closes.
func (g *diskGuard) run(done <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		g.check()
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// diskFull reports whether the data directory is below its reserve (never
// without a data directory).
func (a *Agent) diskFull() bool { return a.disk != nil && a.disk.full.Load() }
