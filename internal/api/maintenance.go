package api

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/stickyd/stickyd/internal/monitor"
)

// Maintenance serves /v1/maintenance: the windows hiding a backend's
// scheduled maintenance from users (docs/maintenance.md).
type Maintenance interface {
	// Windows lists the open windows with the requests held on each.
	Windows(ctx context.Context) ([]monitor.Window, error)
	// Start opens or changes the window on backend; maxWait 0 is the
	// default. A bad backend or maxWait is an *Error with status 400.
	Start(ctx context.Context, backend, reason string, maxWait time.Duration) (monitor.Window, error)
	// End closes the window on backend and says how long it lasted; a
	// backend not in maintenance is an *Error with status 404.
	End(ctx context.Context, backend string) (time.Duration, error)
}

// MaintenanceRequest is the body of PUT /v1/maintenance/{backend}.
type MaintenanceRequest struct {
	Reason  string `json:"reason,omitempty"`
	MaxWait string `json:"max_wait,omitempty"`
}

func (a *server) maintenanceRoutes(mux *http.ServeMux) {
	m := a.cfg.Maintenance
	mux.HandleFunc("GET /v1/maintenance", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		ws, err := m.Windows(r.Context())
		if err != nil {
			return err
		}
		if ws == nil {
			ws = []monitor.Window{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"backends": ws})
		return nil
	}))
	mux.HandleFunc("PUT /v1/maintenance/{backend}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		var req MaintenanceRequest
		if r.ContentLength != 0 {
			if err := decode(r, &req); err != nil {
				return err
			}
		}
		var wait time.Duration
		if req.MaxWait != "" {
			d, err := time.ParseDuration(req.MaxWait)
			if err != nil {
				return &Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("max_wait %q: want a duration like \"30s\"", req.MaxWait)}
			}
			wait = d
		}
		win, err := m.Start(r.Context(), r.PathValue("backend"), req.Reason, wait)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, win)
		return nil
	}))
	mux.HandleFunc("DELETE /v1/maintenance/{backend}", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		lasted, err := m.End(r.Context(), r.PathValue("backend"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]any{"backend": r.PathValue("backend"), "ended": true, "lasted": lasted.Round(time.Millisecond).String()})
		return nil
	}))
}
