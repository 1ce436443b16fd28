package client

import (
	"context"
	"net/url"
	"strconv"
	"time"
)

// MonitorView is one reading of the whole pool (GET /v1/monitor).
type MonitorView struct {
	At time.Time `json:"at"`
	// Agent is the agent that composed the view; Leader the raft leader.
	Agent   string          `json:"agent"`
	Leader  string          `json:"leader"`
	Default string          `json:"default_group"`
	Workers []MonitorWorker `json:"workers"`
	// Tally counts every person, whatever page People holds.
	Tally UserTally `json:"tally"`
	// People are one page of people, by name; Next is the cursor of the
	// page after it.
	People []MonitorPerson `json:"people"`
	Next   string          `json:"next,omitempty"`
	// Events are governance's recent decisions, oldest first.
	Events []Event `json:"events"`
	// Unreachable names the agents whose workers could not be read now.
	Unreachable []string            `json:"unreachable_agents,omitempty"`
	Maintenance []MaintenanceWindow `json:"maintenance,omitempty"`
	// Tenants are the AI gateway's tenants with what their keys' calls
	// cost.
	Tenants []MonitorTenant `json:"tenants,omitempty"`
}

// MonitorTenant is what the calls of a gateway tenant's keys cost, in
// micro-dollars: in all, today and this month (the gateway's day_zone),
// with its budget and the budget's period.
type MonitorTenant struct {
	Tenant       string `json:"tenant"`
	Micros       int64  `json:"micros"`
	Calls        int64  `json:"calls"`
	TodayMicros  int64  `json:"today_micros"`
	MonthMicros  int64  `json:"month_micros"`
	BudgetMicros int64  `json:"budget_micros,omitempty"`
	Period       string `json:"period,omitempty"`
}

// MonitorWorker is a worker with what it holds and consumes.
type MonitorWorker struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Group string `json:"group"`
	// Runtime is "go-plugin", "builtin" or "python3".
	Runtime string `json:"runtime,omitempty"`
	// State is the lifecycle state, or WorkerUnreachable.
	State    string `json:"state"`
	Cordoned bool   `json:"cordoned,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	// SharedProcess is set for an in-process worker: its HeapBytes,
	// RSSBytes and CPUSeconds are the agent's process's.
	SharedProcess bool      `json:"shared_process,omitempty"`
	Incarnation   int       `json:"incarnation"`
	Born          time.Time `json:"born,omitzero"`
	DiedAt        time.Time `json:"died_at,omitzero"`
	HowDied       string    `json:"how_died,omitempty"`
	AppVersion    string    `json:"app_version,omitempty"`
	// Template is the group's template process, for a worker forked from
	// one.
	Template *WorkerTemplate `json:"template,omitempty"`
	// LastProbe is when the numbers below were read.
	LastProbe           time.Time         `json:"last_probe,omitzero"`
	Users               int64             `json:"users"`
	Conns               int64             `json:"conns"`
	Pages               int64             `json:"pages"`
	HeapBytes           uint64            `json:"heap_bytes"`
	RSSBytes            uint64            `json:"rss_bytes"`
	CPUSeconds          float64           `json:"cpu_seconds"`
	Goroutines          int64             `json:"goroutines"`
	Mailbox             int64             `json:"mailbox_depth"`
	Frames              uint64            `json:"frames"`
	StateRefused        uint64            `json:"state_refused"`
	PagesRefused        uint64            `json:"pages_refused"`
	ProbeFailures       int64             `json:"probe_failures"`
	MaintenanceWaiting  map[string]int64  `json:"maintenance_waiting,omitempty"`
	MaintenanceTimedOut map[string]uint64 `json:"maintenance_timed_out,omitempty"`
	// Saturation is each watched resource's use as a fraction of its
	// limit (cpu, memory, goroutines, mailbox), for governed groups.
	Saturation map[string]float64 `json:"saturation,omitempty"`
	// Memory is the recent heap history, oldest first; Projection, when
	// set, is when its growth reaches MemoryLimit (bytes).
	Memory      []Sample   `json:"memory,omitempty"`
	Projection  *time.Time `json:"projection,omitempty"`
	MemoryLimit float64    `json:"memory_limit,omitempty"`
}

// Sample is one reading of a number over time.
type Sample struct {
	At    time.Time `json:"at"`
	Value float64   `json:"value"`
}

// MonitorPerson is one person: where they live and how heavy they are.
type MonitorPerson struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	Group  string `json:"group"`
	State  string `json:"state"`
	Conns  int    `json:"conns"`
	Seen   int64  `json:"seen,omitempty"`
	Pages  int64  `json:"pages"`
	// Cumulative consumption on their current worker.
	BusySeconds   float64 `json:"busy_seconds"`
	Frames        uint64  `json:"frames"`
	StateBytes    uint64  `json:"state_bytes"`
	GatewayMicros int64   `json:"gateway_micros,omitempty"`
	GatewayCalls  int64   `json:"gateway_calls,omitempty"`
}

// Event is one of governance's decisions, or what became of one
// (completed, failed, blocked), with its reason.
type Event struct {
	At time.Time `json:"at"`
	// Kind is a decision's kind (move, start, replace, drain, retire) or
	// completed, failed, blocked.
	Kind string `json:"kind"`
	// ID is the decision's; 0 for blocked.
	ID     uint64 `json:"id,omitempty"`
	Group  string `json:"group,omitempty"`
	Worker string `json:"worker,omitempty"`
	User   string `json:"user,omitempty"`
	To     string `json:"to,omitempty"`
	// Reason explains, with numbers.
	Reason string `json:"reason"`
}

// Monitor returns one reading of the pool (GET /v1/monitor) with a page of
// limit people (0: the agent's DefaultPageLimit).
func (c *Client) Monitor(ctx context.Context, limit int, opts ...CallOption) (MonitorView, error) {
	var query url.Values
	if limit != 0 {
		query = url.Values{"limit": {strconv.Itoa(limit)}}
	}
	var v MonitorView
	err := c.get(ctx, "/v1/monitor", query, &v, opts)
	return v, err
}

// Events lists governance's recent events, oldest first (GET /v1/events).
func (c *Client) Events(ctx context.Context, opts ...CallOption) ([]Event, error) {
	var es []Event
	err := c.get(ctx, "/v1/events", nil, &es, opts)
	return es, err
}
