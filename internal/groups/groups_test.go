package groups

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// maps applies entries straight to an FSM, as a one-member log would.
type maps struct {
	t  *testing.T
	mu sync.Mutex
	f  *fsm.FSM
	i  uint64
}

func (m *maps) apply(typ fsm.MessageType, body any) {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	entry, err := fsm.Encode(typ, body)
	if err != nil {
		m.t.Fatal(err)
	}
	m.i++
	if err, ok := m.f.Apply(&raft.Log{Index: m.i, Data: entry}).(error); ok {
		m.t.Fatal(err)
	}
}

type directory struct{}

func (directory) DefaultGroup() string        { return "web" }
func (directory) GroupUsers(group string) int { return len(group) }

type governed struct {
	mu     sync.Mutex
	groups []string
}

func (g *governed) SetPolicy(group string, p governor.Policy) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groups = append(g.groups, group)
	return nil
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The keeper starts the catalog's groups this agent runs (not the
// configured ones, nor those host.groups leaves out), stops the retired
// ones, registers the workers after each change and governs a group whose
// governance says so; Run follows the catalog until stop, and returns.
func TestKeeperFollowsTheCatalog(t *testing.T) {
	defer goleak.VerifyNone(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := &maps{t: t, f: fsm.New()}
	pool := host.New(nil, nil)
	if err := pool.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	serve := worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1"})
	var registered atomic.Int32
	gov := &governed{}
	k := New(Config{
		Agent:      "a1",
		Configured: []Group{{Recipe: Recipe{Group: "web", Builtin: "counter"}, Workers: 1}},
		Launchers:  NewLaunchers(LaunchersConfig{Agent: "a1", Builtins: map[string]Builtin{"counter": serve}}),
		Pool:       pool,
		Maps:       m.f,
		Directory:  directory{},
		Ready:      pool.Ready,
		Runs:       func(g string) bool { return g != "elsewhere" },
		Register:   func(context.Context) error { registered.Add(1); return nil },
		Governor:   gov,
	})
	builtin := func(name string) fsm.GroupEntry {
		return fsm.GroupEntry{Name: name, Runtime: RuntimeBuiltin, Builtin: "counter", Workers: 1}
	}
	shop := builtin("shop")
	shop.Governance = []byte(`{"enabled": true}`)
	for _, g := range []fsm.GroupEntry{builtin("web"), shop, builtin("elsewhere")} {
		m.apply(fsm.GroupPutRequestType, g)
	}
	k.Sync(ctx)
	if !pool.HasGroup("shop") || pool.HasGroup("web") || pool.HasGroup("elsewhere") {
		t.Fatalf("runs shop %v, web %v, elsewhere %v; want only shop", pool.HasGroup("shop"), pool.HasGroup("web"), pool.HasGroup("elsewhere"))
	}
	if registered.Load() != 1 {
		t.Fatalf("registered %d times, want once", registered.Load())
	}
	if !slices.Equal(gov.groups, []string{"shop"}) {
		t.Fatalf("governed %v, want shop", gov.groups)
	}
	k.Sync(ctx) // nothing changed: nothing to register
	if registered.Load() != 1 {
		t.Fatalf("registered %d times after a sync that changed nothing", registered.Load())
	}

	v := k.View()
	var names, sources []string
	for _, g := range v.Groups {
		names, sources = append(names, g.Name), append(sources, g.Source)
	}
	if !slices.Equal(names, []string{"web", "elsewhere", "shop"}) || !slices.Equal(sources, []string{"config", "catalog", "catalog"}) {
		t.Fatalf("view groups %v from %v", names, sources)
	}
	if web := v.Groups[0]; web.Runtime != RuntimeBuiltin || !web.Default || web.Users != 3 {
		t.Fatalf("web in the view: %+v", web)
	}
	if s := v.Groups[2]; !slices.Equal(s.WorkerIDs, []string{"shop-1"}) || s.Ready != 1 {
		t.Fatalf("shop in the view: %+v", s)
	}

	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); k.Run(stop) }()
	m.apply(fsm.GroupDeleteRequestType, fsm.GroupDeleteRequest{Name: "shop"})
	waitFor(t, "shop to stop", func() bool { return !pool.HasGroup("shop") })
	m.apply(fsm.GroupPutRequestType, builtin("blog"))
	waitFor(t, "blog to start", func() bool { return pool.HasGroup("blog") })
	close(stop)
	<-done
	if registered.Load() < 3 {
		t.Fatalf("registered %d times, want after each change", registered.Load())
	}
}

// A configured group is in the view with the runtime its recipe implies.
func TestEntryOfAConfiguredGroup(t *testing.T) {
	for _, c := range []struct {
		r    Recipe
		want string
	}{
		{Recipe{Builtin: "counter"}, RuntimeBuiltin},
		{Recipe{Command: "/bin/app"}, RuntimeGoPlugin},
		{Recipe{Bundle: "sha256:00"}, RuntimeGoPlugin},
		{Recipe{Runtime: RuntimePython3, Command: "app:application"}, RuntimePython3},
	} {
		if got := (Group{Recipe: c.r}).entry().Runtime; got != c.want {
			t.Errorf("%+v runs as %q, want %q", c.r, got, c.want)
		}
	}
}
