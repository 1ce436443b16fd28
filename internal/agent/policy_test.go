package agent

import (
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/plugins/worker"
)

func TestTemplateDirEnvIsTheSDKs(t *testing.T) {
	if templateDirEnv != worker.TemplateDirEnv {
		t.Fatalf("the agent sets %s, the SDK reads %s", templateDirEnv, worker.TemplateDirEnv)
	}
	a := &Agent{cfg: &Config{Name: "a", DataDir: "/data"}}
	env := a.workerEnv(recipe{Group: "web", Env: map[string]string{"X": "1"}})
	if len(env) != 2 || env[0] != templateDirEnv+"=/data/templates/web" || env[1] != "X=1" {
		t.Fatalf("worker env %v", env)
	}
	env = a.workerEnv(recipe{Group: "web", Env: map[string]string{templateDirEnv: "/elsewhere"}})
	if len(env) != 1 || env[0] != templateDirEnv+"=/elsewhere" {
		t.Fatalf("a recipe's own template dir: %v", env)
	}
}

func TestGroupPolicy(t *testing.T) {
	off := 0.0
	wait := 9
	g := &GroupConfig{Name: "web", Workers: 3, Governance: &GovernanceConfig{Enabled: true, MemoryLimitMB: 512,
		ReplaceHorizon: "0s", CompactBelow: &off, UserCoolDown: "1m", GrowthMinSamples: 4, UsageWait: &wait}}
	p, err := g.policy()
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
	if _, err := g.policy(); err == nil {
		t.Error("a negative usage_wait was taken")
	}
	// Unset knobs keep the defaults; a big group keeps its size as the max.
	p, err = (&GroupConfig{Name: "big", Workers: 12}).policy()
	if err != nil || p.MaxWorkers != 12 || p.ReplaceHorizon != d.ReplaceHorizon || p.CompactBelow != d.CompactBelow {
		t.Fatalf("defaults: %v %+v", err, p)
	}
}
