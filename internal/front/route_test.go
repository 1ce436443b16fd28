package front

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Routers and writers outlive their work, a few; those that wait through a
// whole interval of the pinger are stopped, and the front's Close stops the
// rest.
func TestRoutersAndWritersAreTrimmed(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, _, srv := testFront(t, Config{PingInterval: 30 * time.Millisecond, Registry: reg})
	ws := []string{"c1", "c1b", "c2"}
	for round := range 20 {
		for _, c := range ws {
			s := dialAs(t, srv, f.ring().sign(c, f.userOf(c), time.Now()))
			if err := s.WriteJSON(op{Op: "msg", ID: uint64(round + 1), Page: "p", Data: json.RawMessage(`{"n":1}`)}); err != nil {
				t.Fatal(err)
			}
			var a answer
			if err := s.ReadJSON(&a); err != nil || a.Op != "reply" {
				t.Fatalf("round %d, %s: %+v %v", round, c, a, err)
			}
			_ = s.Close()
		}
	}
	if f.routers.running.Load() == 0 || f.writers.running.Load() == 0 {
		t.Fatalf("no router (%d) or writer (%d) running after the ops", f.routers.running.Load(), f.writers.running.Load())
	}
	if gauge(t, reg, "stickyd_front_routers") < 1 || gauge(t, reg, "stickyd_front_writers") < 1 {
		t.Fatal("the routers' and writers' gauges do not count them")
	}
	waitFor(t, "the idle routers and writers to stop", func() bool {
		return f.routers.running.Load() == 0 && f.writers.running.Load() == 0
	})
	// A new frame starts a router again, and Close stops it.
	s := dialAs(t, srv, f.ring().sign("c1", f.userOf("c1"), time.Now()))
	if err := s.WriteJSON(op{Op: "msg", ID: 99, Page: "p", Data: json.RawMessage(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	var a answer
	if err := s.ReadJSON(&a); err != nil || a.Op != "reply" {
		t.Fatalf("after the trim: %+v %v", a, err)
	}
	f.Close()
	waitFor(t, "Close to stop every router and writer", func() bool {
		return f.routers.running.Load() == 0 && f.writers.running.Load() == 0
	})
}

// gauge reads a gauge of reg by name.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s in the registry", name)
	return 0
}

// waitFor waits up to 10 s for cond.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
