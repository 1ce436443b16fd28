package client

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// MaintenanceWindow is a backend in maintenance: requests that need it wait
// (at most MaxWait) before their handler runs.
type MaintenanceWindow struct {
	Backend string    `json:"backend"`
	Reason  string    `json:"reason,omitempty"`
	MaxWait string    `json:"max_wait"`
	Since   time.Time `json:"since"`
	// Source is where the window lives: "raft" (the agents' replicated
	// maps) or "consul" (a Consul KV key, with a consul block).
	Source string `json:"source"`
	// Waiting is how many requests wait on the backend now, as of the
	// workers' last probes; TimedOut how many gave up waiting since the
	// agents started.
	Waiting  int64  `json:"waiting"`
	TimedOut uint64 `json:"timed_out"`
}

// MaintenanceRequest is the body of PUT /v1/maintenance/{backend}. MaxWait
// is a duration ("45s"), 1s to 1h; empty is the agent's default.
type MaintenanceRequest struct {
	Reason  string `json:"reason,omitempty"`
	MaxWait string `json:"max_wait,omitempty"`
}

// MaintenanceEnded is the answer of DELETE /v1/maintenance/{backend}.
type MaintenanceEnded struct {
	Backend string `json:"backend"`
	Ended   bool   `json:"ended"`
	// Lasted is how long the window was open ("5.2s").
	Lasted string `json:"lasted"`
}

// MaintenanceWindows lists the backends in maintenance now, by backend
// (GET /v1/maintenance).
func (c *Client) MaintenanceWindows(ctx context.Context, opts ...CallOption) ([]MaintenanceWindow, error) {
	var out struct {
		Backends []MaintenanceWindow `json:"backends"`
	}
	err := c.get(ctx, "/v1/maintenance", nil, &out, opts)
	return out.Backends, err
}

// StartMaintenance puts backend in maintenance, or changes the reason and
// max wait of its window (keeping its start), and returns the window (PUT
// /v1/maintenance/{backend}). A bad backend or max wait is the API's 400.
func (c *Client) StartMaintenance(ctx context.Context, backend string, req MaintenanceRequest, opts ...CallOption) (MaintenanceWindow, error) {
	var w MaintenanceWindow
	err := c.decode(ctx, http.MethodPut, "/v1/maintenance/"+url.PathEscape(backend), nil, req, &w, opts)
	return w, err
}

// EndMaintenance takes backend out of maintenance (DELETE
// /v1/maintenance/{backend}); a backend not in maintenance is the API's
// 404.
func (c *Client) EndMaintenance(ctx context.Context, backend string, opts ...CallOption) (MaintenanceEnded, error) {
	var e MaintenanceEnded
	err := c.decode(ctx, http.MethodDelete, "/v1/maintenance/"+url.PathEscape(backend), nil, nil, &e, opts)
	return e, err
}
