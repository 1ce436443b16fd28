package monitor

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// fakePool is a host with fixed workers and usage.
type fakePool struct {
	workers, retired []host.WorkerInfo
	usage            map[string]map[string]*protocol.UserUsage
}

func (p *fakePool) Workers() []host.WorkerInfo { return append([]host.WorkerInfo(nil), p.workers...) }
func (p *fakePool) Retired() []host.WorkerInfo { return append([]host.WorkerInfo(nil), p.retired...) }
func (p *fakePool) Usage(worker string) map[string]*protocol.UserUsage {
	return p.usage[worker]
}

// fakeMaps are maps with fixed agents and catalog.
type fakeMaps struct {
	agents  []fsm.AgentEntry
	catalog fsm.Catalog
	windows []fsm.MaintenanceEntry
}

func (m *fakeMaps) Agents() []fsm.AgentEntry            { return append([]fsm.AgentEntry(nil), m.agents...) }
func (m *fakeMaps) Catalog() fsm.Catalog                { return m.catalog }
func (m *fakeMaps) Tally() fsm.UserTally                { return fsm.UserTally{} }
func (m *fakeMaps) Maintenance() []fsm.MaintenanceEntry { return m.windows }
func (m *fakeMaps) Index() uint64                       { return 7 }
func (m *fakeMaps) Counts() (conns, users int)          { return 0, 2 }

// fakeRaft is a raft member that leads.
type fakeRaft struct{}

func (fakeRaft) Leader() (addr, id string) { return "127.0.0.1:1", "a1" }
func (fakeRaft) IsLeader() bool            { return true }

// fakeAgents answers the admin API calls of the other agents: answers
// holds what each address answers (through JSON, as over HTTP); an
// address absent does not answer.
type fakeAgents struct {
	mu      sync.Mutex
	answers map[string]any
	asked   []string
}

func (f *fakeAgents) call(ctx context.Context, method, addr, path string, body []byte, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		return errors.New("asked without a deadline")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, method+" "+addr+path)
	a, ok := f.answers[addr]
	if !ok {
		return errors.New("connection refused")
	}
	b, err := json.Marshal(a)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func (f *fakeAgents) set(addr string, answer any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if answer == nil {
		delete(f.answers, addr)
		return
	}
	f.answers[addr] = answer
}

// testCluster is a1's monitor, with a2 (which answers) and a3 (which does
// not) in the maps.
func testCluster(t *testing.T) (*Cluster, *fakePool, *fakeAgents) {
	t.Helper()
	now := time.Now()
	pool := &fakePool{
		workers: []host.WorkerInfo{{ID: "w1", Group: "web", State: host.StateReady, Born: now, LastProbe: now, HeapBytes: 10}},
		retired: []host.WorkerInfo{{ID: "w0", Group: "web", State: host.StateRetired}},
		usage: map[string]map[string]*protocol.UserUsage{
			"w1": {"ana": {User: "ana", BusySeconds: 1.5, Frames: 3}, "bob": {User: "bob", Frames: 1}},
			"w0": {"old": {User: "old"}},
		},
	}
	maps := &fakeMaps{agents: []fsm.AgentEntry{
		{Name: "a1", AdminAddr: "a1:9"},
		{Name: "a2", AdminAddr: "a2:9", Workers: map[string]string{"w2": "web"}},
		{Name: "a3", AdminAddr: "a3:9", Workers: map[string]string{"w4": "web", "w3": "api"}},
		{Name: "a4"}, // no admin address yet: never asked
	}, catalog: fsm.Catalog{Groups: map[string]*fsm.GroupEntry{"api": {Name: "api", Runtime: "python3"}}}}
	others := &fakeAgents{answers: map[string]any{}}
	groups := map[string]string{"w0": "web", "w1": "web", "w2": "web", "w3": "api", "w4": "web"}
	c, err := New(Config{
		Agent: "a1", ProbeInterval: time.Second, Runtimes: map[string]string{"web": "builtin"},
		Pool: pool, Maps: maps, Raft: fakeRaft{},
		DefaultGroup: func() string { return "web" },
		UsersPage: func(q fsm.UserQuery) fsm.UserPage {
			return fsm.UserPage{Users: []placement.UserInfo{
				{User: "ana", Worker: "w1", State: placement.StateLive},
				{User: "cid", Worker: "w2", State: placement.StateLive},
			}}
		},
		GroupOf: func(w string) string { return groups[w] },
		Outlook: func(w string) (governor.Outlook, bool) {
			return governor.Outlook{Saturation: map[string]float64{"memory": 0.5}, MemoryLimit: 100}, w == "w1"
		},
		Events: func() []governor.Event { return []governor.Event{{Kind: governor.KindMove, User: "ana"}} },
		Windows: func(entries []fsm.MaintenanceEntry, workers []Worker) []Window {
			return []Window{{Backend: "db", Waiting: int64(len(workers))}}
		},
		Tenants: func() []TenantCost {
			return []TenantCost{{Tenant: "acme", Micros: 1_500_000, Calls: 3, TodayMicros: 500_000, MonthMicros: 1_000_000, BudgetMicros: 5_000_000, Period: "month"}}
		},
		Call:     others.call,
		Registry: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, pool, others
}

func TestLocalPart(t *testing.T) {
	c, pool, _ := testCluster(t)
	c.Seen(pool.workers[0])
	c.Seen(pool.workers[0]) // the same probe: one sample

	got := c.Local(LocalQuery{})
	if got.Agent != "a1" || len(got.Workers) != 2 {
		t.Fatalf("part %+v, want a1 with w1 and w0", got)
	}
	w1, w0 := got.Workers[0], got.Workers[1]
	if w1.ID != "w1" || w1.State != host.StateReady || w1.Runtime != "builtin" || w1.Saturation["memory"] != 0.5 || w1.MemoryLimit != 100 || len(w1.Memory) != 1 {
		t.Errorf("w1 = %+v", w1)
	}
	if w0.ID != "w0" || w0.State != host.StateRetired || w0.Saturation != nil {
		t.Errorf("w0 = %+v", w0)
	}
	if len(got.Usage) != 2 || got.Usage["ana"] != (Person{User: "ana", Worker: "w1", BusySeconds: 1.5, Frames: 3}) {
		t.Errorf("usage %+v, want ana and bob on w1 (the retired slot's people left out)", got.Usage)
	}

	t.Run("named people only", func(t *testing.T) {
		got := c.Local(LocalQuery{Users: map[string]bool{"bob": true}})
		if len(got.Usage) != 1 || got.Usage["bob"].Worker != "w1" {
			t.Errorf("usage %+v, want bob's", got.Usage)
		}
		if got := c.Local(LocalQuery{Users: map[string]bool{}}); len(got.Usage) != 0 || len(got.Workers) != 2 {
			t.Errorf("nobody named: %+v", got)
		}
	})
	t.Run("changes carry no history", func(t *testing.T) {
		got := c.Local(LocalQuery{Changes: true})
		if got.Token == "" || got.Workers[0].Memory != nil {
			t.Errorf("changes: %+v", got)
		}
	})
	t.Run("a stale probe is unreachable", func(t *testing.T) {
		pool.workers[0].LastProbe = time.Now().Add(-10 * time.Second)
		if got := c.Local(LocalQuery{}); got.Workers[0].State != StateUnreachable {
			t.Errorf("w1 is %s, want %s", got.Workers[0].State, StateUnreachable)
		}
	})
}

func TestPageComposesEveryAgent(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, _, others := testCluster(t)
	others.set("a2:9", Part{Agent: "a2", Workers: []Worker{{ID: "w2", Agent: "a2", Group: "web", State: host.StateReady}},
		Usage: map[string]Person{"cid": {User: "cid", Worker: "w2", Frames: 9}}})

	v, err := c.Page(context.Background(), fsm.UserQuery{Limit: DefaultLimit})
	if err != nil {
		t.Fatal(err)
	}
	if v.Agent != "a1" || v.Leader != "a1" || v.Default != "web" || len(v.Events) != 1 {
		t.Errorf("view %+v", v)
	}
	if got := workerStates(v.Workers); !reflect.DeepEqual(got, []string{
		"a1/w1=ready", "a2/w2=ready", "a3/w3=unreachable", "a3/w4=unreachable", "a1/w0=retired"}) {
		t.Errorf("workers %v", got)
	}
	if !reflect.DeepEqual(v.Unreachable, []string{"a3", "a4"}) {
		t.Errorf("unreachable %v, want a3 and a4 (no address yet)", v.Unreachable)
	}
	if len(v.People) != 2 || v.People[1].Frames != 9 || v.People[0].Frames != 3 {
		t.Errorf("people %+v, want ana's and cid's usage", v.People)
	}
	if len(v.Maintenance) != 1 || v.Maintenance[0].Waiting != 5 {
		t.Errorf("maintenance %+v", v.Maintenance)
	}
	if len(v.Tenants) != 1 || v.Tenants[0].Tenant != "acme" || v.Tenants[0].MonthMicros != 1_000_000 {
		t.Errorf("the gateway's tenants %+v", v.Tenants)
	}
	// Each other agent with an address is asked for the page's people only.
	for _, a := range others.asked {
		if !strings.HasPrefix(a, "GET a2:9/v1/monitor/local?") && !strings.HasPrefix(a, "GET a3:9/v1/monitor/local?") {
			t.Errorf("asked %s", a)
		}
		u, _ := url.Parse(strings.TrimPrefix(a, "GET a2:9"))
		if strings.HasPrefix(a, "GET a2:9") && !reflect.DeepEqual(u.Query()["user"], []string{"", "ana", "cid"}) {
			t.Errorf("asked a2 for %v", u.Query()["user"])
		}
	}

	// a2 stops answering: its last part shows, its workers unreachable,
	// and the part kept stays as it was read.
	others.set("a2:9", nil)
	v, _ = c.Page(context.Background(), fsm.UserQuery{Limit: DefaultLimit})
	if got := workerStates(v.Workers); !reflect.DeepEqual(got[1], "a2/w2=unreachable") || v.People[1].Frames != 9 {
		t.Errorf("workers %v, people %+v: want a2's last part", got, v.People)
	}
	if c.lastParts["a2"].Workers[0].State != host.StateReady {
		t.Errorf("the kept part changed: %+v", c.lastParts["a2"])
	}
}

func workerStates(ws []Worker) []string {
	var out []string
	for _, w := range ws {
		out = append(out, w.Agent+"/"+w.ID+"="+w.State)
	}
	return out
}

func TestWorkersOfEveryAgent(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, _, others := testCluster(t)
	if got := c.Workers(context.Background(), true).([]host.WorkerInfo); len(got) != 2 || len(others.asked) != 0 {
		t.Fatalf("local workers %+v (asked %v), want w1 and w0 and nobody asked", got, others.asked)
	}
	others.set("a2:9", []host.WorkerInfo{{ID: "w2", Group: "web", State: host.StateReady}})
	got := c.Workers(context.Background(), false).([]host.WorkerInfo)
	var ids []string
	for _, w := range got {
		ids = append(ids, w.ID+"="+w.State)
	}
	if want := []string{"w1=ready", "w0=retired", "w2=ready", "w3=unreachable", "w4=unreachable"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("workers %v, want %v", ids, want)
	}
}

func TestPartsForGovernance(t *testing.T) {
	defer goleak.VerifyNone(t)
	c, _, others := testCluster(t)
	others.set("a2:9", Part{Agent: "a2", Token: "t1", Usage: map[string]Person{"cid": {User: "cid", Worker: "w2"}}})
	got := c.Parts(context.Background(), func(agent string) string { return "/v1/monitor/local?changes=" + agent }, time.Second)
	if len(got) != 1 || got["a2"].Token != "t1" || got["a2"].Usage["cid"].Worker != "w2" {
		t.Errorf("parts %+v, want a2's only", got)
	}
	if len(others.asked) != 2 {
		t.Errorf("asked %v, want a2 and a3 (not a1 itself, nor a4 without an address)", others.asked)
	}
}

func TestClusterMetrics(t *testing.T) {
	c, _, _ := testCluster(t)
	reg := c.cfg.Registry.(*prometheus.Registry)
	n, err := testutil.GatherAndCount(reg, "stickyd_worker_up", "stickyd_raft_leader", "stickyd_raft_applied_index", "stickyd_supervisor_users", "stickyd_move_held_bytes")
	if err != nil || n != 4 {
		t.Errorf("gathered %d series (%v), want w1's up, the raft and supervisor gauges, no held gauge", n, err)
	}
	if _, err := New(c.cfg); err == nil {
		t.Error("a second monitor on the same registry registered")
	}
}
