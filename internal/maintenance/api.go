package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/monitor"
)

// The agent's side of /v1/maintenance: with Consul the API writes the key
// (the leader's copy brings it into the maps), without it the maps.

var _ api.Maintenance = (*Keeper)(nil)

// Windows lists the open windows with the requests held on each, every
// agent's.
func (k *Keeper) Windows(ctx context.Context) ([]monitor.Window, error) {
	v, err := k.cfg.View(ctx)
	if err != nil {
		return nil, err
	}
	return v.Maintenance, nil
}

// Start opens (or changes) a window and returns once this agent's replica
// has it.
func (k *Keeper) Start(ctx context.Context, backend, reason string, maxWait time.Duration) (monitor.Window, error) {
	if err := checkBackend(backend); err != nil {
		return monitor.Window{}, &api.Error{Status: http.StatusBadRequest, Message: err.Error()}
	}
	if maxWait == 0 {
		maxWait = DefaultMaxWait
	}
	if maxWait < time.Second || maxWait > maxMaxWait {
		return monitor.Window{}, &api.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("max_wait %s: want 1s to 1h", maxWait)}
	}
	if kv := k.cfg.KV(); kv != nil {
		b, _ := json.Marshal(map[string]string{"reason": reason, "max_wait": maxWait.String()})
		if err := kv.Put(ctx, folder+backend, b); err != nil {
			return monitor.Window{}, err
		}
		if err := k.waitWindow(ctx, backend, func(e *fsm.MaintenanceEntry) bool {
			return e != nil && e.Reason == reason && e.MaxWait == maxWait
		}); err != nil {
			return monitor.Window{}, err
		}
	} else {
		w := fsm.MaintenanceEntry{Backend: backend, Reason: reason, MaxWait: maxWait, Since: time.Now().UTC(), Source: "raft"}
		if err := k.apply(ctx, fsm.MaintenanceRequest{Backend: backend, Active: true, Window: w}); err != nil {
			return monitor.Window{}, err
		}
	}
	k.waitTold(ctx)
	for _, w := range Windows(k.cfg.Maps.Maintenance(), nil) {
		if w.Backend == backend {
			return w, nil
		}
	}
	return monitor.Window{}, fmt.Errorf("the window on %s closed as it opened", backend)
}

// End closes a window; it says how long it lasted.
func (k *Keeper) End(ctx context.Context, backend string) (time.Duration, error) {
	var open *fsm.MaintenanceEntry
	for _, e := range k.cfg.Maps.Maintenance() {
		if e.Backend == backend {
			open = &e
		}
	}
	if open == nil {
		return 0, &api.Error{Status: http.StatusNotFound, Message: fmt.Sprintf("backend %q is not in maintenance", backend)}
	}
	if kv := k.cfg.KV(); kv != nil {
		if err := kv.Delete(ctx, folder+backend); err != nil {
			return 0, err
		}
		if err := k.waitWindow(ctx, backend, func(e *fsm.MaintenanceEntry) bool { return e == nil }); err != nil {
			return 0, err
		}
	} else if err := k.apply(ctx, fsm.MaintenanceRequest{Backend: backend}); err != nil {
		return 0, err
	}
	k.waitTold(ctx)
	return time.Since(open.Since), nil
}

// sync makes the maps' windows those of the KV folder.
func (k *Keeper) sync(ctx context.Context, kv map[string][]byte) error {
	want := map[string]fsm.MaintenanceEntry{}
	for backend, value := range kv {
		if err := checkBackend(backend); err != nil {
			k.log.Warn("ignoring a maintenance key", "key", folder+backend, "error", err)
			continue
		}
		reason, wait := parseWindow(value)
		want[backend] = fsm.MaintenanceEntry{Backend: backend, Reason: reason, MaxWait: wait, Since: time.Now().UTC(), Source: "consul"}
	}
	var errs []error
	have := map[string]fsm.MaintenanceEntry{}
	for _, e := range k.cfg.Maps.Maintenance() {
		have[e.Backend] = e
		if _, ok := want[e.Backend]; !ok {
			errs = append(errs, k.apply(ctx, fsm.MaintenanceRequest{Backend: e.Backend}))
		}
	}
	for b, w := range want {
		if h, ok := have[b]; ok && h.Reason == w.Reason && h.MaxWait == w.MaxWait && h.Source == w.Source {
			continue
		}
		errs = append(errs, k.apply(ctx, fsm.MaintenanceRequest{Backend: b, Active: true, Window: w}))
	}
	return errors.Join(errs...)
}

// apply writes a window's change through the leader.
func (k *Keeper) apply(ctx context.Context, req fsm.MaintenanceRequest) error {
	entry, err := fsm.Encode(fsm.MaintenanceRequestType, req)
	if err != nil {
		return err
	}
	_, err = k.cfg.Log.Apply(ctx, entry)
	return err
}

// waitTold waits (at most 5 s) until this agent's workers have been told
// the windows as the replica holds them now: when the API answers, the
// requests reaching this agent's workers see the change.
func (k *Keeper) waitTold(ctx context.Context) {
	index := k.cfg.Maps.Index()
	deadline := time.Now().Add(5 * time.Second)
	for k.told.Load() < index && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// waitWindow waits (bounded) until the replica's window on backend is as
// done says: a write to Consul reaches the maps through the leader's watch.
func (k *Keeper) waitWindow(ctx context.Context, backend string, done func(*fsm.MaintenanceEntry) bool) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		changed := k.cfg.Maps.WatchMaintenance()
		var cur *fsm.MaintenanceEntry
		for _, e := range k.cfg.Maps.Maintenance() {
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
