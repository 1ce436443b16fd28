package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// A worker's lifecycle state (Worker.State). The monitor adds
// WorkerUnreachable.
const (
	WorkerStarting = "starting"
	WorkerReady    = "ready"
	WorkerDead     = "dead"
	WorkerRefused  = "refused"
	WorkerStopped  = "stopped"
	WorkerRetired  = "retired"
	// WorkerUnreachable: the worker's host says ready, but its last probe
	// is too old or its agent cannot be reached; its numbers are the last
	// known.
	WorkerUnreachable = "unreachable"
)

// WorkerTemplate is a group's template process: its pid (0 while none
// runs) and how many times it was built.
type WorkerTemplate struct {
	Pid    int `json:"pid"`
	Builds int `json:"builds"`
}

// Worker is a worker slot as its agent sees it (GET /v1/workers, and the
// workers of a Status).
type Worker struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	State string `json:"state"`
	Pid   int    `json:"pid,omitempty"`
	// SharedProcess is set for an in-process worker: HeapBytes, RSSBytes
	// and CPUSeconds are then the agent's whole process's, shared by every
	// in-process worker.
	SharedProcess bool      `json:"shared_process,omitempty"`
	Incarnation   int       `json:"incarnation"`
	Born          time.Time `json:"born,omitzero"`
	// DiedAt and HowDied say when and how the slot's last process ended.
	DiedAt  time.Time `json:"died_at,omitzero"`
	HowDied string    `json:"how_died,omitempty"`
	// Ends lists how the slot's last processes ended, oldest first.
	Ends []WorkerEnd `json:"ends,omitempty"`
	// LaunchError is why the slot's last launch failed, while no process
	// runs.
	LaunchError string `json:"launch_error,omitempty"`
	App         string `json:"app,omitempty"`
	AppVersion  string `json:"app_version,omitempty"`
	// Template is the group's template process, for a worker forked from
	// one (a python3 group's template).
	Template *WorkerTemplate `json:"template,omitempty"`
	// Cordoned is set while the worker takes no newcomers.
	Cordoned bool `json:"cordoned,omitempty"`
	// The last probe's answer.
	LastProbe     time.Time `json:"last_probe,omitzero"`
	Users         int64     `json:"users"`
	Conns         int64     `json:"conns"`
	Pages         int64     `json:"pages"`
	HeapBytes     uint64    `json:"heap_bytes"`
	RSSBytes      uint64    `json:"rss_bytes"`
	CPUSeconds    float64   `json:"cpu_seconds"`
	Mailbox       int64     `json:"mailbox_depth"`
	Goroutines    int64     `json:"goroutines"`
	Frames        uint64    `json:"frames"`
	StateRefused  uint64    `json:"state_refused"`
	PagesRefused  uint64    `json:"pages_refused"`
	ProbeFailures int64     `json:"probe_failures"`
	// BusySince is set while the worker answers no probe but its process
	// computes: busy in the app, not killed for silence.
	BusySince time.Time `json:"busy_since,omitzero"`
	// MaintenanceWaiting counts, per backend, the requests waiting on a
	// maintenance window; MaintenanceTimedOut those that gave up.
	MaintenanceWaiting  map[string]int64  `json:"maintenance_waiting,omitempty"`
	MaintenanceTimedOut map[string]uint64 `json:"maintenance_timed_out,omitempty"`
	// LastCheckpoint is when the slot's last complete checkpoint round
	// began; the counters are its rounds and what they parked.
	LastCheckpoint   time.Time `json:"last_checkpoint,omitzero"`
	CheckpointRounds int64     `json:"checkpoint_rounds,omitempty"`
	CheckpointPieces int64     `json:"checkpoint_pieces,omitempty"`
	CheckpointBytes  int64     `json:"checkpoint_bytes,omitempty"`
}

// WorkerEnd is how one of a slot's processes ended.
type WorkerEnd struct {
	Incarnation int       `json:"incarnation"`
	Born        time.Time `json:"born,omitzero"`
	DiedAt      time.Time `json:"died_at"`
	How         string    `json:"how"`
}

// DrainProgress is one line of a drain's stream: one per move (Error set
// if it failed), then one with Done set (Error set if the drain stopped
// early).
type DrainProgress struct {
	Move  *Move        `json:"move,omitempty"`
	Error string       `json:"error,omitempty"`
	Done  *DrainResult `json:"done,omitempty"`
}

// DrainResult counts a drain's moves.
type DrainResult struct {
	Worker string `json:"worker"`
	Users  int    `json:"users"`
	Moved  int    `json:"moved"`
	Failed int    `json:"failed"`
}

// Workers lists the workers of the whole cluster, by agent then slot (GET
// /v1/workers).
func (c *Client) Workers(ctx context.Context, opts ...CallOption) ([]Worker, error) {
	var ws []Worker
	err := c.get(ctx, "/v1/workers", nil, &ws, opts)
	return ws, err
}

// DrainWorker moves everyone off a worker (POST
// /v1/workers/{worker}/drain), parallel moves at a time (0: the agent's
// default), and returns the moves as the agent makes them. Ending ctx stops
// the drain from starting new moves.
func (c *Client) DrainWorker(ctx context.Context, worker string, parallel int) (*Stream[DrainProgress], error) {
	var query url.Values
	if parallel != 0 {
		query = url.Values{"parallel": {strconv.Itoa(parallel)}}
	}
	body, err := c.open(ctx, http.MethodPost, "/v1/workers/"+url.PathEscape(worker)+"/drain", query)
	if err != nil {
		return nil, err
	}
	return newStream[DrainProgress](body), nil
}
