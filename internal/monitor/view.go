// Package monitor composes the live population of the pool in one reading
// (GET /v1/monitor, stickyd monitor, the monitor web page) and republishes
// the workers' probe readings as Prometheus metrics. It reads what the
// agents already know (the maps, the hosts' last probe readings,
// governance's events); it never waits on a worker, so a stopped worker
// cannot stop the reading: it shows up as unreachable with its last known
// numbers. Cluster composes the reading from this agent's part and every
// other agent's; it sees the agent only through its Config (the pool, the
// maps, raft, a function to call another agent) and never imports it.
package monitor

import (
	"time"

	"github.com/stickyd/stickyd/internal/host"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
)

// View is one reading of the whole pool.
type View struct {
	At time.Time `json:"at"`
	// Agent is the agent that composed the view; Leader the raft leader.
	Agent  string `json:"agent"`
	Leader string `json:"leader"`
	// Default is the default group.
	Default string `json:"default_group"`
	// Workers are every worker of every agent, by agent then id, with the
	// workers retired lately at the end.
	Workers []Worker `json:"workers"`
	// Tally counts every person in the maps by state, worker and group,
	// whatever page People holds.
	Tally fsm.UserTally `json:"tally"`
	// People are one page of the people in the maps, by name: the page the
	// reading's query selected (ParseQuery; the first DefaultLimit people
	// by default). Next is the cursor of the page after it, empty after
	// the last.
	People []Person `json:"people"`
	Next   string   `json:"next,omitempty"`
	// Events are governance's recent decisions on the composing agent,
	// oldest first.
	Events []governor.Event `json:"events"`
	// Unreachable names the agents whose workers could not be read now
	// (their last known numbers are shown).
	Unreachable []string `json:"unreachable_agents,omitempty"`
	// Maintenance are the open maintenance windows.
	Maintenance []Window `json:"maintenance,omitempty"`
	// Tenants are the AI gateway's tenants with what their keys' calls
	// cost, by name (none without a gateway or tenants).
	Tenants []TenantCost `json:"tenants,omitempty"`
}

// TenantCost is what the calls of a gateway tenant's keys cost, in
// micro-dollars: in all, today and this month (in the gateway's
// day_zone), with the tenant's budget and its period.
type TenantCost struct {
	Tenant       string `json:"tenant"`
	Micros       int64  `json:"micros"`
	Calls        int64  `json:"calls"`
	TodayMicros  int64  `json:"today_micros"`
	MonthMicros  int64  `json:"month_micros"`
	BudgetMicros int64  `json:"budget_micros,omitempty"`
	Period       string `json:"period,omitempty"`
}

// Window is an open maintenance window and the requests held on it.
type Window struct {
	Backend string    `json:"backend"`
	Reason  string    `json:"reason,omitempty"`
	MaxWait string    `json:"max_wait"`
	Since   time.Time `json:"since"`
	Source  string    `json:"source"`
	// Waiting are the requests held on it now, in every worker; TimedOut
	// those that gave up waiting (since their workers began).
	Waiting  int64  `json:"waiting"`
	TimedOut uint64 `json:"timed_out"`
}

// Worker states beyond the host's (starting, ready, dead, refused,
// stopped, retired).
const (
	// StateUnreachable: the worker's host says ready, but its last probe
	// answer is too old (it is stopped or swamped), or its agent cannot be
	// reached. Its numbers are the last known.
	StateUnreachable = "unreachable"
)

// Worker is a worker with what it holds and consumes.
type Worker struct {
	ID    string `json:"id"`
	Agent string `json:"agent"`
	Group string `json:"group"`
	// Runtime is what runs the group's workers: "go-plugin", "builtin" or
	// "python3".
	Runtime string `json:"runtime,omitempty"`
	// State is the lifecycle state, or StateUnreachable.
	State    string `json:"state"`
	Cordoned bool   `json:"cordoned,omitempty"`
	Pid      int    `json:"pid,omitempty"`
	// SharedProcess is set for an in-process worker: its HeapBytes,
	// RSSBytes and CPUSeconds are the agent's process's, shared with the
	// agent and every other in-process worker.
	SharedProcess bool      `json:"shared_process,omitempty"`
	Incarnation   int       `json:"incarnation"`
	Born          time.Time `json:"born,omitzero"`
	DiedAt        time.Time `json:"died_at,omitzero"`
	HowDied       string    `json:"how_died,omitempty"`
	AppVersion    string    `json:"app_version,omitempty"`
	// Template is the group's template process, for a worker forked from
	// one (a python3 group's template by fork).
	Template *host.TemplateInfo `json:"template,omitempty"`
	// LastProbe is when the numbers below were read.
	LastProbe  time.Time `json:"last_probe,omitzero"`
	Users      int64     `json:"users"`
	Conns      int64     `json:"conns"`
	Pages      int64     `json:"pages"`
	HeapBytes  uint64    `json:"heap_bytes"`
	RSSBytes   uint64    `json:"rss_bytes"`
	CPUSeconds float64   `json:"cpu_seconds"`
	Goroutines int64     `json:"goroutines"`
	Mailbox    int64     `json:"mailbox_depth"`
	Frames     uint64    `json:"frames"`
	// StateRefused counts the writes refused past a state bound.
	StateRefused uint64 `json:"state_refused"`
	// PagesRefused counts the page opens refused past a page-count bound.
	PagesRefused uint64 `json:"pages_refused"`
	// ProbeFailures counts the probes the worker's slot left unanswered.
	ProbeFailures int64 `json:"probe_failures"`
	// MaintenanceWaiting counts, per backend, the requests held on a
	// maintenance window now; MaintenanceTimedOut those that gave up.
	MaintenanceWaiting  map[string]int64  `json:"maintenance_waiting,omitempty"`
	MaintenanceTimedOut map[string]uint64 `json:"maintenance_timed_out,omitempty"`
	// Saturation is each watched resource's use as a fraction of its limit
	// (cpu, memory, goroutines, mailbox), for governed groups.
	Saturation map[string]float64 `json:"saturation,omitempty"`
	// Memory is the worker's recent memory (heap) history, oldest first,
	// for the chart; Projection, when set, is when its growth reaches the
	// memory limit (the replacement projection).
	Memory     []Sample   `json:"memory,omitempty"`
	Projection *time.Time `json:"projection,omitempty"`
	// MemoryLimit is what 100% memory means for the worker's group
	// (governed groups), in bytes.
	MemoryLimit float64 `json:"memory_limit,omitempty"`
}

// Sample is one reading of a number over time.
type Sample struct {
	At    time.Time `json:"at"`
	Value float64   `json:"value"`
}

// Person is one person: where they live and how heavy they are.
type Person struct {
	User   string `json:"user"`
	Worker string `json:"worker"`
	Group  string `json:"group"`
	State  string `json:"state"` // live, moving, parked
	Conns  int    `json:"conns"`
	// Seen is when a front last saw the person (unix seconds; 0: not
	// recorded yet), to within a tenth of lifecycle.forget_after.
	Seen  int64 `json:"seen,omitempty"`
	Pages int64 `json:"pages"`
	// Cumulative consumption on their current worker (since they arrived).
	BusySeconds float64 `json:"busy_seconds"`
	Frames      uint64  `json:"frames"`
	StateBytes  uint64  `json:"state_bytes"`
	// GatewayMicros is what the person's calls to the AI gateway cost
	// (micro-dollars, every call since the counters began) in
	// GatewayCalls calls.
	GatewayMicros int64 `json:"gateway_micros,omitempty"`
	GatewayCalls  int64 `json:"gateway_calls,omitempty"`
}
