package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/monitor"
)

func monitorView(t *testing.T, a *agent.Agent) monitor.View {
	t.Helper()
	code, body := adminCall(t, a, "GET", "/v1/monitor", testToken, "")
	if code != 200 {
		t.Fatalf("monitor: %d %s", code, body)
	}
	var v monitor.View
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// The monitor's one call composes every worker and person; a worker that
// stops answering (SIGSTOP) shows up as unreachable with its last known
// numbers while the rest is read as usual.
func TestMonitorShowsUnreachableWorker(t *testing.T) {
	a := startAgentWith(t, "subprocess", 3, func(c *agent.Config) {
		c.Probe = &agent.ProbeConfig{Interval: "200ms", Misses: 1000}
	})
	workers := a.Pool().Ready()
	for i, w := range workers {
		b := newBrowser(t, a)
		user := "m" + strconv.Itoa(i)
		b.do("POST", "/login?user="+user)
		if b.whoami().Worker != w {
			if _, err := a.Supervisor().Move(t.Context(), user, w, "test"); err != nil {
				t.Fatal(err)
			}
		}
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "inc"})
	}
	waitFor(t, 10*time.Second, "every worker's numbers", func() bool {
		v := monitorView(t, a)
		n := 0
		for _, w := range v.Workers {
			if w.State == "ready" && w.Users == 1 && w.Pages == 1 && w.HeapBytes > 0 {
				n++
			}
		}
		return n == 3 && len(v.People) == 3
	})
	victim := a.Pool().Workers()[0]
	if err := syscall.Kill(victim.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(victim.Pid, syscall.SIGCONT)
	var v monitor.View
	waitFor(t, 10*time.Second, "the stopped worker unreachable", func() bool {
		v = monitorView(t, a)
		for _, w := range v.Workers {
			if w.ID == victim.ID {
				return w.State == monitor.StateUnreachable
			}
		}
		return false
	})
	for _, w := range v.Workers {
		switch {
		case w.ID == victim.ID && (w.Users != 1 || w.HeapBytes == 0 || w.LastProbe.IsZero()):
			t.Errorf("the unreachable worker lost its last known numbers: %+v", w)
		case w.ID != victim.ID && w.State != "ready":
			t.Errorf("worker %s reads %s while another is stopped", w.ID, w.State)
		}
	}
	people := map[string]monitor.Person{}
	for _, p := range v.People {
		people[p.User] = p
	}
	for i, w := range workers {
		p := people["m"+strconv.Itoa(i)]
		if p.Worker != w || p.Group != "web" || p.Conns != 1 {
			t.Errorf("person m%d: %+v", i, p)
		}
		if w != victim.ID && (p.Frames == 0 || p.Pages != 1) {
			t.Errorf("person m%d has no consumption: %+v", i, p)
		}
	}
	// The CLI reads the same.
	code, out := stickyd(t, a, "monitor")
	if code != 0 || !strings.Contains(out, victim.ID) || !strings.Contains(out, "unreachable") || !strings.Contains(out, "m1") {
		t.Fatalf("stickyd monitor: %d\n%s", code, out)
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the worker back", func() bool {
		for _, w := range monitorView(t, a).Workers {
			if w.ID == victim.ID {
				return w.State == "ready"
			}
		}
		return false
	})
}

// scrape reads the agent's /metrics (no token, as Prometheus does) with the
// Prometheus text parser and returns the workers that have each series.
func scrape(t *testing.T, a *agent.Agent) map[string]map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := map[string]map[string]bool{}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "worker" {
					if out[name] == nil {
						out[name] = map[string]bool{}
					}
					out[name][l.GetValue()] = true
				}
			}
		}
	}
	// Beside stickyd's own, what every Go exporter has.
	for _, name := range []string{"stickyd_raft_leader", "stickyd_worker_channel_envelopes_total", "stickyd_worker_channel_queued_bytes", "go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if _, ok := fams[name]; !ok {
			t.Fatalf("no %s in /metrics", name)
		}
	}
	return out
}

// Prometheus: each live worker has its series, labelled by worker and
// group; a retired worker's series are gone.
func TestMetricsPerWorker(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, func(c *agent.Config) { c.Probe = &agent.ProbeConfig{Interval: "200ms"} })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	added, err := a.Pool().Add(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	series := []string{"stickyd_worker_up", "stickyd_worker_heap_bytes", "stickyd_worker_users", "stickyd_worker_cpu_seconds_total", "stickyd_worker_probe_failures_total"}
	m := scrape(t, a)
	for _, w := range a.Pool().Workers() {
		for _, s := range series {
			if !m[s][w.ID] {
				t.Errorf("%s has no series for worker %s", s, w.ID)
			}
		}
	}
	if err := a.Pool().Retire(ctx, added, "test"); err != nil {
		t.Fatal(err)
	}
	m = scrape(t, a)
	for _, s := range series {
		if m[s][added] {
			t.Errorf("%s still has a series for the retired %s", s, added)
		}
		if len(m[s]) != 2 {
			t.Errorf("%s has series for %v, want the 2 live workers", s, m[s])
		}
	}
}
