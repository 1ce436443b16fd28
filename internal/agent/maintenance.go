package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/protocol"
)

// Maintenance windows (docs/maintenance.md). The open windows live in the
// maps; every agent tells its workers the whole set before their first
// frame and on every change, and the workers hold the requests that need a
// backend in maintenance. With a consul block the keys under
// <prefix>maintenance/ are the truth: the leader copies them into the maps,
// and the admin API writes them there.

const (
	// DefaultMaxWait bounds a request's wait on a window with no max_wait.
	DefaultMaxWait = 30 * time.Second
	// maxMaxWait is the longest max_wait accepted.
	maxMaxWait = time.Hour
	// maintenanceFolder is the KV folder of the windows, under the prefix.
	maintenanceFolder = "maintenance/"
)

// backendRE is the backend names accepted.
var backendRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// maintenanceNotice is the windows as the workers are told them.
func (a *Agent) maintenanceNotice() *protocol.Envelope {
	n := &protocol.Maintenance{Version: a.fsm.Index()}
	for _, e := range a.fsm.Maintenance() {
		n.Backends = append(n.Backends, &protocol.MaintenanceBackend{Name: e.Backend, Reason: e.Reason, MaxWaitMs: e.MaxWait.Milliseconds()})
	}
	return &protocol.Envelope{Body: &protocol.Envelope_Maintenance{Maintenance: n}}
}

// greeting is what a worker is told before its first frame.
func (a *Agent) greeting(string) []*protocol.Envelope {
	return []*protocol.Envelope{a.maintenanceNotice()}
}

// maintenanceLoop tells this agent's workers the windows whenever they
// change.
func (a *Agent) maintenanceLoop(stop <-chan struct{}) {
	for {
		changed := a.fsm.WatchMaintenance()
		a.setExtraWait()
		select {
		case <-stop:
			return
		case <-changed:
		}
		a.setExtraWait() // before the workers hold anything longer
		env := a.maintenanceNotice()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		for _, w := range a.pool.Workers() {
			if w.State != host.StateReady {
				continue // it is told when it starts
			}
			if _, err := a.pool.StartEnvelope(ctx, w.ID, env); err != nil {
				a.log.Warn("telling a worker the maintenance windows", "worker", w.ID, "error", err)
			}
		}
		cancel()
		a.maintTold.Store(env.GetMaintenance().Version)
		a.log.Info("maintenance windows changed", "open", len(env.GetMaintenance().Backends))
	}
}

// consulMaintenanceLoop copies the windows from Consul KV into the maps
// while this server leads (a leader task: the end of the term ends the
// watch).
func (a *Agent) consulMaintenanceLoop(stop <-chan struct{}) {
	c := a.consulClient()
	if c == nil {
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
		_ = c.WatchTree(ctx, maintenanceFolder, func(kv map[string][]byte) {
			if err := a.syncMaintenance(ctx, kv); err != nil {
				a.log.Warn("copying the maintenance windows from Consul", "error", err)
			}
		})
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond): // the watch ended: watch again
		}
	}
}

// syncMaintenance makes the maps' windows those of the KV folder.
func (a *Agent) syncMaintenance(ctx context.Context, kv map[string][]byte) error {
	want := map[string]fsm.MaintenanceEntry{}
	for backend, value := range kv {
		if err := checkBackend(backend); err != nil {
			a.log.Warn("ignoring a maintenance key", "key", maintenanceFolder+backend, "error", err)
			continue
		}
		reason, wait := parseWindow(value)
		want[backend] = fsm.MaintenanceEntry{Backend: backend, Reason: reason, MaxWait: wait, Since: time.Now().UTC(), Source: "consul"}
	}
	var errs []error
	have := map[string]fsm.MaintenanceEntry{}
	for _, e := range a.fsm.Maintenance() {
		have[e.Backend] = e
		if _, ok := want[e.Backend]; !ok {
			errs = append(errs, a.applyWindow(ctx, fsm.MaintenanceRequest{Backend: e.Backend}))
		}
	}
	for b, w := range want {
		if h, ok := have[b]; ok && h.Reason == w.Reason && h.MaxWait == w.MaxWait && h.Source == w.Source {
			continue
		}
		errs = append(errs, a.applyWindow(ctx, fsm.MaintenanceRequest{Backend: b, Active: true, Window: w}))
	}
	return errors.Join(errs...)
}

func (a *Agent) applyWindow(ctx context.Context, req fsm.MaintenanceRequest) error {
	entry, err := fsm.Encode(fsm.MaintenanceRequestType, req)
	if err != nil {
		return err
	}
	_, err = forwardingLog{a}.Apply(ctx, entry)
	return err
}

// parseWindow reads a key's value: a JSON object {"reason", "max_wait"},
// or any text, which is the reason.
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

// checkBackend checks a backend's name.
func checkBackend(name string) error {
	if !backendRE.MatchString(name) {
		return fmt.Errorf("backend %q: use 1-63 of a-z 0-9 _ . -, starting with a letter or digit", name)
	}
	return nil
}

// windows lists the open windows with the requests held on each, summed
// over the workers of every agent in v.
func windows(entries []fsm.MaintenanceEntry, workers []monitor.Worker) []monitor.Window {
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

// maintenanceAPI is the agent's side of /v1/maintenance.
type maintenanceAPI struct{ a *Agent }

var _ api.Maintenance = maintenanceAPI{}

// Windows lists the open windows with the requests held on each.
func (m maintenanceAPI) Windows(ctx context.Context) ([]monitor.Window, error) {
	v, err := m.a.monitorView(ctx)
	if err != nil {
		return nil, err
	}
	return v.Maintenance, nil
}

// Start opens (or changes) a window and returns once this agent's replica
// has it.
func (m maintenanceAPI) Start(ctx context.Context, backend, reason string, maxWait time.Duration) (monitor.Window, error) {
	if err := checkBackend(backend); err != nil {
		return monitor.Window{}, &api.Error{Status: http.StatusBadRequest, Message: err.Error()}
	}
	if maxWait == 0 {
		maxWait = DefaultMaxWait
	}
	if maxWait < time.Second || maxWait > maxMaxWait {
		return monitor.Window{}, &api.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("max_wait %s: want 1s to 1h", maxWait)}
	}
	if c := m.a.consulClient(); c != nil {
		b, _ := json.Marshal(map[string]string{"reason": reason, "max_wait": maxWait.String()})
		if err := c.Put(ctx, maintenanceFolder+backend, b); err != nil {
			return monitor.Window{}, err
		}
		if err := m.a.waitWindow(ctx, backend, func(e *fsm.MaintenanceEntry) bool {
			return e != nil && e.Reason == reason && e.MaxWait == maxWait
		}); err != nil {
			return monitor.Window{}, err
		}
	} else {
		w := fsm.MaintenanceEntry{Backend: backend, Reason: reason, MaxWait: maxWait, Since: time.Now().UTC(), Source: "raft"}
		if err := m.a.applyWindow(ctx, fsm.MaintenanceRequest{Backend: backend, Active: true, Window: w}); err != nil {
			return monitor.Window{}, err
		}
	}
	m.a.waitTold(ctx)
	for _, w := range windows(m.a.fsm.Maintenance(), nil) {
		if w.Backend == backend {
			return w, nil
		}
	}
	return monitor.Window{}, fmt.Errorf("the window on %s closed as it opened", backend)
}

// End closes a window; it says how long it lasted.
func (m maintenanceAPI) End(ctx context.Context, backend string) (time.Duration, error) {
	var open *fsm.MaintenanceEntry
	for _, e := range m.a.fsm.Maintenance() {
		if e.Backend == backend {
			open = &e
		}
	}
	if open == nil {
		return 0, &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("backend %q is not in maintenance", backend)}
	}
	if c := m.a.consulClient(); c != nil {
		if err := c.Delete(ctx, maintenanceFolder+backend); err != nil {
			return 0, err
		}
		if err := m.a.waitWindow(ctx, backend, func(e *fsm.MaintenanceEntry) bool { return e == nil }); err != nil {
			return 0, err
		}
	} else if err := m.a.applyWindow(ctx, fsm.MaintenanceRequest{Backend: backend}); err != nil {
		return 0, err
	}
	m.a.waitTold(ctx)
	return time.Since(open.Since), nil
}

// waitTold waits (at most 5 s) until this agent's workers have been told
// the windows as the replica holds them now: when the API answers, the
// requests reaching this agent's workers see the change.
func (a *Agent) waitTold(ctx context.Context) {
	index := a.fsm.Index()
	deadline := time.Now().Add(5 * time.Second)
	for a.maintTold.Load() < index && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// waitWindow waits (bounded) until the replica's window on backend is as
// done says: a write to Consul reaches the maps through the leader's watch.
func (a *Agent) waitWindow(ctx context.Context, backend string, done func(*fsm.MaintenanceEntry) bool) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		changed := a.fsm.WatchMaintenance()
		var cur *fsm.MaintenanceEntry
		for _, e := range a.fsm.Maintenance() {
			if e.Backend == backend {
				cur = &e
			}
		}
		if done(cur) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("written to Consul, but the leader has not taken the window on %s within 15s; is it watching Consul?", backend)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// extraWait is how much longer the front waits for a worker while a window
// is open: a request may be held up to the window's max wait.
// It is read for every request, so it is kept, not computed: the
// maintenance loop updates it on every change of the windows.
func (a *Agent) extraWait() time.Duration { return time.Duration(a.maintMaxWait.Load()) }

// setExtraWait records the longest max wait of the windows open now.
func (a *Agent) setExtraWait() {
	var d time.Duration
	for _, e := range a.fsm.Maintenance() {
		d = max(d, e.MaxWait)
	}
	a.maintMaxWait.Store(int64(d))
}
