package agent

import (
	"fmt"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
)

// policy builds the group's governance policy from its configuration: the
// engine's defaults (governor.DefaultPolicy) where a knob is unset, except
// the pool bounds, which follow the group's workers.
func (g *GroupConfig) policy() (governor.Policy, error) {
	p := governor.DefaultPolicy()
	gc := g.Governance
	if gc == nil {
		gc = &GovernanceConfig{}
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
	p.MinWorkers = g.Workers
	if gc.MinWorkers != 0 {
		p.MinWorkers = gc.MinWorkers
	}
	p.MaxWorkers = max(g.Workers, p.MaxWorkers)
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
