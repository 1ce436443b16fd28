// Package maintenance owns the maintenance windows (docs/maintenance.md):
// checking and parsing them, telling this agent's workers the open set,
// copying them from Consul KV into the maps while this server leads, and
// the agent's side of /v1/maintenance.
//
// The open windows live in the maps; every agent tells its workers the
// whole set before their first frame and on every change, and the workers
// hold the requests that need a backend in maintenance. With a consul
// block the keys under <prefix>maintenance/ are the truth: the leader
// copies them into the maps, and the admin API writes them there.
//
// The package sees the agent only through the small interfaces below (the
// maps' reader, the log, the pool, Consul KV): it never holds the agent,
// and it decides nothing about who leads (the leader task is started and
// stopped by internal/server's Leadership).
package maintenance

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

const (
	// DefaultMaxWait bounds a request's wait on a window with no max_wait.
	DefaultMaxWait = 30 * time.Second
	// maxMaxWait is the longest max_wait accepted.
	maxMaxWait = time.Hour
	// folder is the KV folder of the windows, under the prefix.
	folder = "maintenance/"
)

// backendRE is the backend names accepted.
var backendRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Maps is the replica of the maps as the windows are read from it
// (*fsm.FSM).
type Maps interface {
	// Maintenance returns the windows open now, sorted by backend.
	Maintenance() []fsm.MaintenanceEntry
	// WatchMaintenance returns a channel closed at the next change of
	// the windows.
	WatchMaintenance() <-chan struct{}
	// Index is the last raft index applied to the replica.
	Index() uint64
}

// Log writes an entry to the maps through the leader, from any server,
// waiting through an election within ctx (the agent's forwarding log).
type Log interface {
	Apply(ctx context.Context, entry []byte) (any, error)
}

// Pool is this host's workers as they are told the windows (*host.Pool).
type Pool interface {
	Workers() []host.WorkerInfo
	StartEnvelope(ctx context.Context, workerID string, env *protocol.Envelope) (*channel.Call, error)
}

// KV is the Consul KV store of the consul block (*consul.Client); names
// are under its prefix.
type KV interface {
	// WatchTree calls fn with the keys under name (relative to it) at
	// every change, until ctx ends or the watch fails.
	WatchTree(ctx context.Context, name string, fn func(kv map[string][]byte)) error
	Put(ctx context.Context, name string, value []byte) error
	Delete(ctx context.Context, name string) error
}

// Config is what a Keeper is built from.
type Config struct {
	Maps Maps
	Log  Log
	// Pool is this host's workers; nil on an agent that runs none.
	Pool Pool
	// KV returns Consul KV, or nil without a consul block (or while it
	// cannot be reached: the windows are then written to the maps).
	KV func() KV
	// View composes the whole pool's monitor reading, whose Maintenance
	// lists the windows with the requests held on each, every agent's.
	View   func(ctx context.Context) (monitor.View, error)
	Logger hclog.Logger
}

// Keeper is one agent's side of the maintenance windows: it tells the
// workers (Tell, Greeting), copies Consul's keys as the leader's task
// (CopyFromConsul), serves /v1/maintenance (it is an api.Maintenance) and
// keeps the front's extra wait (ExtraWait).
type Keeper struct {
	cfg Config
	log hclog.Logger
	// told is the version (raft index) of the windows this agent's
	// workers were last told.
	told atomic.Uint64
	// maxWait is the longest max wait of the open windows (ns).
	maxWait atomic.Int64
}

// New builds a Keeper; it does nothing until Tell or CopyFromConsul runs.
func New(cfg Config) *Keeper {
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if cfg.KV == nil {
		cfg.KV = func() KV { return nil }
	}
	return &Keeper{cfg: cfg, log: log}
}

// notice is the windows as the workers are told them.
func (k *Keeper) notice() *protocol.Envelope {
	n := &protocol.Maintenance{Version: k.cfg.Maps.Index()}
	for _, e := range k.cfg.Maps.Maintenance() {
		n.Backends = append(n.Backends, &protocol.MaintenanceBackend{Name: e.Backend, Reason: e.Reason, MaxWaitMs: e.MaxWait.Milliseconds()})
	}
	return &protocol.Envelope{Body: &protocol.Envelope_Maintenance{Maintenance: n}}
}

// Greeting is what a worker is told before its first frame (the pool's
// Greeting).
func (k *Keeper) Greeting(string) []*protocol.Envelope {
	return []*protocol.Envelope{k.notice()}
}

// Tell tells this agent's workers the windows whenever they change, until
// stop closes.
func (k *Keeper) Tell(stop <-chan struct{}) {
	for {
		changed := k.cfg.Maps.WatchMaintenance()
		k.setExtraWait()
		select {
		case <-stop:
			return
		case <-changed:
		}
		k.setExtraWait() // before the workers hold anything longer
		env := k.notice()
		if k.cfg.Pool != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, w := range k.cfg.Pool.Workers() {
				if w.State != host.StateReady {
					continue // it is told when it starts
				}
				if _, err := k.cfg.Pool.StartEnvelope(ctx, w.ID, env); err != nil {
					k.log.Warn("telling a worker the maintenance windows", "worker", w.ID, "error", err)
				}
			}
			cancel()
		}
		k.told.Store(env.GetMaintenance().Version)
		k.log.Info("maintenance windows changed", "open", len(env.GetMaintenance().Backends))
	}
}

// CopyFromConsul copies the windows from Consul KV into the maps while
// this server leads (a leader task: the end of the term, stop, ends the
// watch). Without Consul it returns at once.
func (k *Keeper) CopyFromConsul(stop <-chan struct{}) {
	kv := k.cfg.KV()
	if kv == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for ctx.Err() == nil {
		_ = kv.WatchTree(ctx, folder, func(keys map[string][]byte) {
			if err := k.sync(ctx, keys); err != nil {
				k.log.Warn("copying the maintenance windows from Consul", "error", err)
			}
		})
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond): // the watch ended: watch again
		}
	}
}

// parseWindow reads a key's value: a JSON object {"reason", "max_wait"},
// or any text, which is the reason. A max_wait that is not a duration of
// 1s to 1h is DefaultMaxWait.
func parseWindow(value []byte) (reason string, maxWait time.Duration) {
	maxWait = DefaultMaxWait
	var v struct {
		Reason  string `json:"reason"`
		MaxWait string `json:"max_wait"`
	}
	if json.Unmarshal(value, &v) != nil {
		return strings.TrimSpace(string(value)), maxWait
	}
	if d, err := time.ParseDuration(v.MaxWait); err == nil && d >= time.Second && d <= maxMaxWait {
		maxWait = d
	}
	return v.Reason, maxWait
}

// checkBackend checks a backend's name: 1-63 of a-z 0-9 _ . -, starting
// with a letter or digit.
func checkBackend(name string) error {
	if !backendRE.MatchString(name) {
		return fmt.Errorf("backend %q: use 1-63 of a-z 0-9 _ . -, starting with a letter or digit", name)
	}
	return nil
}

// Windows lists the open windows with the requests held on each, summed
// over workers (every agent's, in the monitor's reading).
func Windows(entries []fsm.MaintenanceEntry, workers []monitor.Worker) []monitor.Window {
	out := make([]monitor.Window, 0, len(entries))
	for _, e := range entries {
		w := monitor.Window{Backend: e.Backend, Reason: e.Reason, MaxWait: e.MaxWait.String(), Since: e.Since, Source: e.Source}
		for _, wk := range workers {
			w.Waiting += wk.MaintenanceWaiting[e.Backend]
			w.TimedOut += wk.MaintenanceTimedOut[e.Backend]
		}
		out = append(out, w)
	}
	return out
}

// ExtraWait is how much longer the front waits for a worker while a window
// is open: a request may be held up to the window's max wait.
// It is read for every request, so it is kept, not computed: Tell updates
// it on every change of the windows.
func (k *Keeper) ExtraWait() time.Duration { return time.Duration(k.maxWait.Load()) }

// setExtraWait records the longest max wait of the windows open now.
func (k *Keeper) setExtraWait() {
	var d time.Duration
	for _, e := range k.cfg.Maps.Maintenance() {
		d = max(d, e.MaxWait)
	}
	k.maxWait.Store(int64(d))
}
