package fsm

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Maintenance windows (docs/maintenance.md): the backends in maintenance
// now. Every agent tells its workers the set; a request that needs one of
// them waits before its handler runs. With Consul configured, the leader
// copies the keys under <prefix>maintenance/ here; without it, the admin
// API writes here directly.

// MaintenanceRequestType starts, changes or ends a window.
const MaintenanceRequestType MessageType = 15

// MaintenanceRequest starts or changes the window of Backend (Active), or
// ends it. Since is kept when an active window is changed.
type MaintenanceRequest struct {
	Backend string           `json:"backend"`
	Active  bool             `json:"active"`
	Window  MaintenanceEntry `json:"window,omitempty"`
}

// MaintenanceEntry is one backend's window.
type MaintenanceEntry struct {
	Backend string        `json:"backend"`
	Reason  string        `json:"reason,omitempty"`
	MaxWait time.Duration `json:"max_wait"`
	Since   time.Time     `json:"since"`
	// Source is where the window was set: "raft" (the admin API) or
	// "consul" (a key in Consul KV).
	Source string `json:"source"`
}

func (f *FSM) applyMaintenance(buf body) interface{} {
	var req MaintenanceRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding a maintenance window: %w", err)
	}
	if req.Backend == "" {
		return fmt.Errorf("a maintenance window without a backend")
	}
	defer f.maintenanceChangedLocked()
	if !req.Active {
		delete(f.state.Maintenance, req.Backend)
		return nil
	}
	if f.state.Maintenance == nil {
		f.state.Maintenance = map[string]*MaintenanceEntry{}
	}
	e := req.Window
	e.Backend = req.Backend
	if old := f.state.Maintenance[req.Backend]; old != nil {
		e.Since = old.Since
	}
	f.state.Maintenance[req.Backend] = &e
	return nil
}

// Maintenance returns the windows open now, sorted by backend.
func (f *FSM) Maintenance() []MaintenanceEntry {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]MaintenanceEntry, 0, len(f.state.Maintenance))
	for _, k := range slices.Sorted(maps.Keys(f.state.Maintenance)) {
		out = append(out, *f.state.Maintenance[k])
	}
	return out
}

// WatchMaintenance returns a channel closed at the next change of the
// windows.
func (f *FSM) WatchMaintenance() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maintCh == nil {
		f.maintCh = make(chan struct{})
	}
	return f.maintCh
}

func (f *FSM) maintenanceChangedLocked() {
	if f.maintCh != nil {
		close(f.maintCh)
		f.maintCh = nil
	}
}
