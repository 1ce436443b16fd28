package agent_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// Shutdown stops the agent's parts in the reverse of the order Start
// started them, each once: the list is the order, by construction. With a
// data dir, a gateway and governance, every kind of part is in it.
func TestShutdownIsTheReverseOfStart(t *testing.T) {
	cfg := &agent.Config{
		Name:    "order",
		DataDir: t.TempDir(),
		Front:   &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:   &agent.AdminConfig{Address: "127.0.0.1:0", Token: "order-token-0123456789"},
		Server:  &agent.ServerConfig{},
		Groups:  []*agent.GroupConfig{{Name: "web", Workers: 1, Builtin: "counter", Governance: &agent.GovernanceConfig{Enabled: true}}},
		Lifecycle: &agent.LifecycleConfig{
			IdlePark: "10m",
		},
	}
	log := hclog.NewNullLogger()
	builtins := map[string]agent.Builtin{
		"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log}),
	}
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	started, _ := a.Parts()
	t.Logf("started: %q", started)
	for _, want := range []string{"raft", "admin API", "workers", "front", "governance", "idle parking", "forgetting", "leader tasks"} {
		if !slices.Contains(started, want) {
			t.Errorf("no %q among the started parts %q", want, started)
		}
	}
	if i, j := slices.Index(started, "raft"), slices.Index(started, "front"); i > j {
		t.Errorf("the front started before raft: %q", started)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	running, stopped := a.Parts()
	if len(running) != 0 {
		t.Errorf("still running after Shutdown: %q", running)
	}
	want := slices.Clone(started)
	slices.Reverse(want)
	if !slices.Equal(stopped, want) {
		t.Fatalf("stopped in the order\n  %q\nwant the reverse of the start\n  %q", stopped, want)
	}
	// A second Shutdown stops nothing twice.
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, again := a.Parts(); len(again) != len(stopped) {
		t.Fatalf("a second Shutdown stopped %d parts more", len(again)-len(stopped))
	}
}
