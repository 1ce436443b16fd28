package governance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
)

// GroupConfig is a group's governance block (docs/governance.md), in the
// agent's configuration file or, as JSON, in a catalog group. Unset values
// keep the engine's defaults (Policy).
type GroupConfig struct {
	Enabled bool `hcl:"enabled,optional" json:"enabled,omitempty"`
	// MemoryLimitMB is what 100% memory means for one worker: its live Go
	// heap (default 1024).
	MemoryLimitMB int `hcl:"memory_limit_mb,optional" json:"memory_limit_mb,omitempty"`
	// CPULimit is what 100% CPU means, in cores (default 1).
	CPULimit float64 `hcl:"cpu_limit,optional" json:"cpu_limit,omitempty"`
	// GoroutineLimit and MailboxLimit are 100% goroutines and 100% frames
	// waiting in mailboxes (defaults 10000 and 1000).
	GoroutineLimit int `hcl:"goroutine_limit,optional" json:"goroutine_limit,omitempty"`
	MailboxLimit   int `hcl:"mailbox_limit,optional" json:"mailbox_limit,omitempty"`
	// MinWorkers is the fewest workers compaction leaves (default: the
	// group's workers); MaxWorkers the most saturation may start (default:
	// the larger of the group's workers and 8).
	MinWorkers         int    `hcl:"min_workers,optional" json:"min_workers,omitempty"`
	MaxWorkers         int    `hcl:"max_workers,optional" json:"max_workers,omitempty"`
	MaxConcurrentMoves int    `hcl:"max_concurrent_moves,optional" json:"max_concurrent_moves,omitempty"`
	UserCoolDown       string `hcl:"user_cool_down,optional" json:"user_cool_down,omitempty"`
	WorkerCoolDown     string `hcl:"worker_cool_down,optional" json:"worker_cool_down,omitempty"`
	// ReplaceHorizon: a worker projected to reach its memory limit sooner
	// is replaced ("30m"; "0s" turns replacement off).
	ReplaceHorizon string `hcl:"replace_horizon,optional" json:"replace_horizon,omitempty"`
	// GrowthWindow is the memory history the projection fits ("15m");
	// GrowthMinSamples the fewest probe readings it needs (6).
	GrowthWindow     string `hcl:"growth_window,optional" json:"growth_window,omitempty"`
	GrowthMinSamples int    `hcl:"growth_min_samples,optional" json:"growth_min_samples,omitempty"`
	// UsageWait is how many probe readings a hot worker waits for its
	// people's numbers to show who grew before it draws a leaver anyway
	// (default 2; 0 draws at once).
	UsageWait *int `hcl:"usage_wait,optional" json:"usage_wait,omitempty"`
	// CompactBelow is the load under which, held for CompactAfter, the
	// least loaded worker is drained and retired (0.30 and "10m"; 0 turns
	// compaction off).
	CompactBelow *float64 `hcl:"compact_below,optional" json:"compact_below,omitempty"`
	CompactAfter string   `hcl:"compact_after,optional" json:"compact_after,omitempty"`
}

// Policy builds the governance policy of a group of workers workers from
// its block (nil: a block with nothing set): the engine's defaults
// (governor.DefaultPolicy) where a knob is unset, except the pool bounds,
// which follow the group's workers. An error names the knob at fault.
func (gc *GroupConfig) Policy(workers int) (governor.Policy, error) {
	p := governor.DefaultPolicy()
	if gc == nil {
		gc = &GroupConfig{}
	}
	limit := func(r governor.Resource, v float64, name string) error {
		switch {
		case v < 0:
			return fmt.Errorf("%s must not be negative", name)
		case v > 0:
			t := p.Thresholds[r]
			t.Limit = v
			p.Thresholds[r] = t
		}
		return nil
	}
	if err := limit(governor.Memory, float64(gc.MemoryLimitMB)*(1<<20), "memory_limit_mb"); err != nil {
		return p, err
	}
	if err := limit(governor.CPU, gc.CPULimit, "cpu_limit"); err != nil {
		return p, err
	}
	if err := limit(governor.Goroutines, float64(gc.GoroutineLimit), "goroutine_limit"); err != nil {
		return p, err
	}
	if err := limit(governor.Mailbox, float64(gc.MailboxLimit), "mailbox_limit"); err != nil {
		return p, err
	}
	p.MinWorkers = workers
	if gc.MinWorkers != 0 {
		p.MinWorkers = gc.MinWorkers
	}
	p.MaxWorkers = max(workers, p.MaxWorkers)
	if gc.MaxWorkers != 0 {
		p.MaxWorkers = gc.MaxWorkers
	}
	if gc.MaxConcurrentMoves != 0 {
		p.MaxConcurrentMoves = gc.MaxConcurrentMoves
	}
	if gc.GrowthMinSamples != 0 {
		p.GrowthMinSamples = gc.GrowthMinSamples
	}
	if gc.CompactBelow != nil {
		p.CompactBelow = *gc.CompactBelow
	}
	if gc.UsageWait != nil {
		p.UsageWait = *gc.UsageWait
	}
	for _, d := range []struct {
		name, value string
		into        *time.Duration
		zeroOK      bool
	}{
		{"user_cool_down", gc.UserCoolDown, &p.UserCoolDown, true},
		{"worker_cool_down", gc.WorkerCoolDown, &p.WorkerCoolDown, true},
		{"replace_horizon", gc.ReplaceHorizon, &p.ReplaceHorizon, true},
		{"growth_window", gc.GrowthWindow, &p.GrowthWindow, false},
		{"compact_after", gc.CompactAfter, &p.CompactAfter, true},
	} {
		if d.value == "" {
			continue
		}
		v, err := time.ParseDuration(d.value)
		if err != nil || v < 0 || (v == 0 && !d.zeroOK) {
			return p, fmt.Errorf("%s %q: want a positive duration like \"10m\"", d.name, d.value)
		}
		*d.into = v
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// CheckGroup checks a catalog group's governance block (JSON): every field
// known, every value one Policy takes.
func CheckGroup(b []byte) error {
	var gc GroupConfig
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&gc); err != nil {
		return err
	}
	_, err := gc.Policy(1)
	return err
}
