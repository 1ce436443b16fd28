package governance

import (
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
)

func TestGroupPolicy(t *testing.T) {
	off := 0.0
	wait := 9
	g := &GroupConfig{Enabled: true, MemoryLimitMB: 512,
		ReplaceHorizon: "0s", CompactBelow: &off, UserCoolDown: "1m", GrowthMinSamples: 4, UsageWait: &wait}
	p, err := g.Policy(3)
	if err != nil {
		t.Fatal(err)
	}
	d := governor.DefaultPolicy()
	switch {
	case p.MinWorkers != 3 || p.MaxWorkers != 8:
		t.Errorf("bounds %d..%d, want the group's 3 .. 8", p.MinWorkers, p.MaxWorkers)
	case p.Thresholds[governor.Memory].Limit != 512<<20 || p.Thresholds[governor.Memory].High != d.Thresholds[governor.Memory].High:
		t.Errorf("memory threshold %+v", p.Thresholds[governor.Memory])
	case p.ReplaceHorizon != 0 || p.CompactBelow != 0:
		t.Errorf("replacement %v and compaction %v not turned off", p.ReplaceHorizon, p.CompactBelow)
	case p.UserCoolDown != time.Minute || p.WorkerCoolDown != d.WorkerCoolDown || p.GrowthMinSamples != 4:
		t.Errorf("cool-downs %v %v, samples %d", p.UserCoolDown, p.WorkerCoolDown, p.GrowthMinSamples)
	case p.UsageWait != 9:
		t.Errorf("usage wait %d, want 9", p.UsageWait)
	}
	wait = -1
	if _, err := g.Policy(3); err == nil {
		t.Error("a negative usage_wait was taken")
	}
	// Unset knobs keep the defaults; a big group keeps its size as the max.
	p, err = (*GroupConfig)(nil).Policy(12)
	if err != nil || p.MaxWorkers != 12 || p.ReplaceHorizon != d.ReplaceHorizon || p.CompactBelow != d.CompactBelow {
		t.Fatalf("defaults: %v %+v", err, p)
	}
}

// A catalog group's block is checked whole: an unknown field or a value
// no policy takes is refused.
func TestCheckGroup(t *testing.T) {
	for _, c := range []struct {
		name, block string
		ok          bool
	}{
		{"empty", `{}`, true},
		{"enabled with knobs", `{"enabled": true, "memory_limit_mb": 64, "compact_after": "1s"}`, true},
		{"unknown field", `{"enabled": true, "memory_limit": 64}`, false},
		{"bad duration", `{"user_cool_down": "often"}`, false},
		{"max under min", `{"min_workers": 3, "max_workers": 2}`, false},
		{"not json", `enabled`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := CheckGroup([]byte(c.block)); (err == nil) != c.ok {
				t.Fatalf("CheckGroup(%s) = %v, want ok %v", c.block, err, c.ok)
			}
		})
	}
}
