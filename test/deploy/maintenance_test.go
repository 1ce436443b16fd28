package deploy

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/testagents"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// A maintenance window flipped by an operator with the real consul CLI:
// the leader copies the key into the maps, orders (which need db-a) wait
// while it is there and go on when it is deleted, and typing is untouched.
// `stickyd maintenance start` writes the same key.
func TestMaintenanceThroughConsul(t *testing.T) {
	consul := testagents.StartConsul(t)
	consulBin := testagents.Require(t, "consul")
	cfg := &agent.Config{
		Name:     "maint",
		LogLevel: "warn",
		Front:    &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:    &agent.AdminConfig{Address: "127.0.0.1:0", Token: adminToken},
		Server:   &agent.ServerConfig{},
		Consul:   &agent.ConsulConfig{Address: consul.HTTPAddr},
		Groups:   []*agent.GroupConfig{{Name: "web", Workers: 1, Builtin: "counter"}},
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Warn})
	a, err := agent.New(cfg, map[string]agent.Builtin{"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log})}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })

	orders, err := benchkit.OpenPage(ctx, a.Addr(), "olga", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer orders.Close()
	typing, err := benchkit.OpenPage(ctx, a.Addr(), "tom", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer typing.Close()

	kv := func(args ...string) string {
		cmd := exec.Command(consulBin, append([]string{"kv"}, args...)...)
		cmd.Env = append(os.Environ(), "CONSUL_HTTP_ADDR="+consul.HTTPAddr)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("consul kv %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	windows := func() string {
		var v struct {
			Backends []struct {
				Backend, Source, Reason string
			} `json:"backends"`
		}
		if err := getJSON("http://"+a.AdminAddr()+"/v1/maintenance", &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(v.Backends)
		return string(b)
	}
	waitWindows := func(want string) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for windows() != want {
			if time.Now().After(deadline) {
				t.Fatalf("windows %s, want %s", windows(), want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	kv("put", "stickyd/maintenance/db-a", "upgrading the disks")
	waitWindows(`[{"Backend":"db-a","Source":"consul","Reason":"upgrading the disks"}]`)
	held := make(chan error, 1)
	sent := time.Now()
	go func() {
		data, err := orders.Send("order")
		if err == nil && !strings.Contains(string(data), `"orders":1`) {
			err = &unexpected{string(data)}
		}
		held <- err
	}()
	for i := range 20 {
		if _, err := typing.Send("inc"); err != nil {
			t.Fatalf("typing %d during the window: %v", i, err)
		}
	}
	select {
	case err := <-held:
		t.Fatalf("the order ran during the window (after %s): %v", time.Since(sent), err)
	case <-time.After(time.Second):
	}
	kv("delete", "stickyd/maintenance/db-a")
	select {
	case err := <-held:
		if err != nil {
			t.Fatalf("the held order: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the held order did not go on after the key was deleted")
	}
	waitWindows(`[]`)

	// The CLI writes the key (with Consul configured, Consul is the truth).
	stickyd := benchkit.BuildStickyd(t)
	out := run(t, []string{"STICKYD_ADDR=" + a.AdminAddr(), "STICKYD_TOKEN=" + adminToken}, 0, stickyd,
		"maintenance", "start", "-reason", "payments cut-over", "-max-wait", "45s", "payments")
	t.Logf("stickyd maintenance start: %s", strings.TrimSpace(out))
	if got := kv("get", "stickyd/maintenance/payments"); !strings.Contains(got, `"max_wait":"45s"`) || !strings.Contains(got, "payments cut-over") {
		t.Fatalf("consul kv get stickyd/maintenance/payments: %s", got)
	}
	run(t, []string{"STICKYD_ADDR=" + a.AdminAddr(), "STICKYD_TOKEN=" + adminToken}, 0, stickyd, "maintenance", "end", "payments")
	waitWindows(`[]`)
}

type unexpected struct{ s string }

func (e *unexpected) Error() string { return "unexpected answer " + e.s }
