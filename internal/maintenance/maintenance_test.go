package maintenance

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// memLog applies entries straight to a replica of the maps, as a
// one-server raft would.
type memLog struct {
	mu      sync.Mutex
	f       *fsm.FSM
	index   uint64
	applied int
}

func (l *memLog) Apply(_ context.Context, entry []byte) (any, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.index++
	l.applied++
	res := l.f.Apply(&raft.Log{Index: l.index, Data: entry})
	if err, ok := res.(error); ok {
		return nil, err
	}
	return res, nil
}

func (l *memLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.applied
}

// fakePool records the envelopes its workers are sent.
type fakePool struct {
	mu      sync.Mutex
	workers []host.WorkerInfo
	sent    map[string][]*protocol.Envelope
}

func (p *fakePool) Workers() []host.WorkerInfo { return p.workers }

func (p *fakePool) StartEnvelope(_ context.Context, id string, env *protocol.Envelope) (*channel.Call, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sent == nil {
		p.sent = map[string][]*protocol.Envelope{}
	}
	p.sent[id] = append(p.sent[id], env)
	return nil, nil
}

func (p *fakePool) told(id string) []*protocol.Envelope {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*protocol.Envelope(nil), p.sent[id]...)
}

// fakeKV serves one folder's keys to a watch and records the writes.
type fakeKV struct {
	mu     sync.Mutex
	keys   map[string][]byte
	writes []string
}

func (k *fakeKV) WatchTree(ctx context.Context, name string, fn func(map[string][]byte)) error {
	if name != folder {
		return errors.New("watching " + name)
	}
	k.mu.Lock()
	keys := k.keys
	k.mu.Unlock()
	fn(keys)
	<-ctx.Done()
	return ctx.Err()
}

func (k *fakeKV) Put(_ context.Context, name string, _ []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writes = append(k.writes, "put "+name)
	return nil
}

func (k *fakeKV) Delete(_ context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.writes = append(k.writes, "delete "+name)
	return nil
}

// watchedMaps counts the watches of the windows, so that a test changes
// them only once Tell watches (a change before is Tell's to miss: the
// workers are greeted with the windows when they start).
type watchedMaps struct {
	*fsm.FSM
	mu      sync.Mutex
	watches int
}

func (m *watchedMaps) WatchMaintenance() <-chan struct{} {
	ch := m.FSM.WatchMaintenance()
	m.mu.Lock()
	m.watches++
	m.mu.Unlock()
	return ch
}

// watched waits until the windows were watched n times.
func (m *watchedMaps) watched(t *testing.T, n int) {
	t.Helper()
	waitFor(t, "Tell to watch the windows", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.watches >= n
	})
}

func newKeeper(t *testing.T, pool Pool, kv KV) (*Keeper, *watchedMaps, *memLog) {
	t.Helper()
	f := &watchedMaps{FSM: fsm.New()}
	l := &memLog{f: f.FSM}
	cfg := Config{Maps: f, Log: l, Pool: pool, Logger: hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Warn}),
		View: func(context.Context) (monitor.View, error) {
			return monitor.View{Maintenance: Windows(f.Maintenance(), nil)}, nil
		}}
	if kv != nil {
		cfg.KV = func() KV { return kv }
	}
	return New(cfg), f, l
}

// waitFor polls cond until it holds or 5 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseWindow(t *testing.T) {
	for _, c := range []struct {
		name, value string
		reason      string
		wait        time.Duration
	}{
		{"text", "  upgrading the disks\n", "upgrading the disks", DefaultMaxWait},
		{"json", `{"reason": "16.4", "max_wait": "45s"}`, "16.4", 45 * time.Second},
		{"json without a wait", `{"reason": "r"}`, "r", DefaultMaxWait},
		{"wait too short", `{"reason": "r", "max_wait": "10ms"}`, "r", DefaultMaxWait},
		{"wait too long", `{"reason": "r", "max_wait": "2h"}`, "r", DefaultMaxWait},
		{"wait not a duration", `{"reason": "r", "max_wait": "soon"}`, "r", DefaultMaxWait},
	} {
		t.Run(c.name, func(t *testing.T) {
			reason, wait := parseWindow([]byte(c.value))
			if reason != c.reason || wait != c.wait {
				t.Fatalf("parseWindow(%q) = %q, %v; want %q, %v", c.value, reason, wait, c.reason, c.wait)
			}
		})
	}
}

func TestCheckBackend(t *testing.T) {
	for name, ok := range map[string]bool{
		"db-a": true, "payments.eu_1": true, "0": true,
		"": false, "-db": false, "DB": false, "db a": false, "db/a": false,
		"a234567890123456789012345678901234567890123456789012345678901234": false,
	} {
		if err := checkBackend(name); (err == nil) != ok {
			t.Errorf("checkBackend(%q) = %v, want ok %v", name, err, ok)
		}
	}
}

// The leader's copy makes the maps' windows those of the folder: a key
// added, a key changed, a key gone, a bad name ignored; a second copy of
// the same folder writes nothing.
func TestCopyFromConsul(t *testing.T) {
	defer goleak.VerifyNone(t)
	kv := &fakeKV{keys: map[string][]byte{
		"db-a":     []byte(`{"reason": "16.4", "max_wait": "45s"}`),
		"payments": []byte("new provider"),
		"Bad Name": []byte("ignored"),
	}}
	k, f, l := newKeeper(t, nil, kv)
	ctx := context.Background()
	// Before the copy: db-a with another reason, old from the API.
	for _, w := range []fsm.MaintenanceEntry{
		{Backend: "db-a", Reason: "before", MaxWait: DefaultMaxWait, Source: "consul"},
		{Backend: "old", Reason: "gone", MaxWait: DefaultMaxWait, Source: "raft"},
	} {
		if err := k.apply(ctx, fsm.MaintenanceRequest{Backend: w.Backend, Active: true, Window: w}); err != nil {
			t.Fatal(err)
		}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); k.CopyFromConsul(stop) }()
	want := []fsm.MaintenanceEntry{
		{Backend: "db-a", Reason: "16.4", MaxWait: 45 * time.Second, Source: "consul"},
		{Backend: "payments", Reason: "new provider", MaxWait: DefaultMaxWait, Source: "consul"},
	}
	same := func() bool {
		got := f.Maintenance()
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			g, w := got[i], want[i]
			if g.Backend != w.Backend || g.Reason != w.Reason || g.MaxWait != w.MaxWait || g.Source != w.Source {
				return false
			}
		}
		return true
	}
	waitFor(t, "the folder in the maps", same)
	close(stop)
	<-done
	n := l.count()
	if err := k.sync(ctx, kv.keys); err != nil {
		t.Fatal(err)
	}
	if l.count() != n {
		t.Fatalf("copying an unchanged folder wrote %d entries", l.count()-n)
	}
}

// Without Consul the API writes the maps: the window opens, is told to the
// ready workers only, raises the front's wait, and closes.
func TestStartAndEndWithoutConsul(t *testing.T) {
	defer goleak.VerifyNone(t)
	pool := &fakePool{workers: []host.WorkerInfo{{ID: "web-1", State: host.StateReady}, {ID: "web-2", State: host.StateStarting}}}
	k, f, _ := newKeeper(t, pool, nil)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); k.Tell(stop) }()
	defer func() { close(stop); <-done }()
	ctx := context.Background()

	f.watched(t, 1)
	w, err := k.Start(ctx, "db-a", "upgrading", 0)
	if err != nil {
		t.Fatal(err)
	}
	if w.Backend != "db-a" || w.Reason != "upgrading" || w.MaxWait != DefaultMaxWait.String() || w.Source != "raft" {
		t.Fatalf("window %+v", w)
	}
	// The API answers once this agent's workers were told.
	told := pool.told("web-1")
	if len(told) == 0 || told[len(told)-1].GetMaintenance().Version != f.Index() {
		t.Fatalf("web-1 was told %v, want the windows as of index %d", told, f.Index())
	}
	if b := told[len(told)-1].GetMaintenance().Backends; len(b) != 1 || b[0].Name != "db-a" || b[0].MaxWaitMs != DefaultMaxWait.Milliseconds() {
		t.Fatalf("web-1 was told %v", b)
	}
	if len(pool.told("web-2")) != 0 {
		t.Fatal("a starting worker was told: it is greeted when it starts")
	}
	if g := k.Greeting("web-2"); len(g) != 1 || len(g[0].GetMaintenance().Backends) != 1 {
		t.Fatalf("greeting %v", g)
	}
	if k.ExtraWait() != DefaultMaxWait {
		t.Fatalf("extra wait %v, want %v", k.ExtraWait(), DefaultMaxWait)
	}
	ws, err := k.Windows(ctx)
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows %v, %v", ws, err)
	}

	f.watched(t, 2)
	if _, err := k.End(ctx, "db-a"); err != nil {
		t.Fatal(err)
	}
	if len(f.Maintenance()) != 0 || k.ExtraWait() != 0 {
		t.Fatalf("after the end: windows %v, extra wait %v", f.Maintenance(), k.ExtraWait())
	}
}

// Bad input is a 4xx with a clear message, never written anywhere.
func TestStartRefuses(t *testing.T) {
	kv := &fakeKV{}
	k, _, l := newKeeper(t, nil, kv)
	ctx := context.Background()
	for _, c := range []struct {
		name, backend string
		wait          time.Duration
		status        int
	}{
		{"bad backend", "DB A", 0, http.StatusBadRequest},
		{"wait too short", "db-a", time.Millisecond, http.StatusBadRequest},
		{"wait too long", "db-a", 2 * time.Hour, http.StatusBadRequest},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := k.Start(ctx, c.backend, "r", c.wait)
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Status != c.status {
				t.Fatalf("Start(%q, %v) = %v, want status %d", c.backend, c.wait, err, c.status)
			}
		})
	}
	var ae *api.Error
	if _, err := k.End(ctx, "db-a"); !errors.As(err, &ae) || ae.Status != http.StatusNotFound {
		t.Fatalf("ending a window that is not open: %v", err)
	}
	if l.count() != 0 || len(kv.writes) != 0 {
		t.Fatalf("refused calls wrote %d entries and %v", l.count(), kv.writes)
	}
}

// With Consul the API writes the key; the leader's copy brings it into the
// maps, and the API answers once the replica has it.
func TestStartWritesConsul(t *testing.T) {
	defer goleak.VerifyNone(t)
	kv := &fakeKV{}
	k, f, _ := newKeeper(t, &fakePool{}, kv)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); k.Tell(stop) }()
	defer func() { close(stop); <-done }()
	f.watched(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { // the leader's watch, taking the key as it is written
		time.Sleep(20 * time.Millisecond)
		_ = k.sync(ctx, map[string][]byte{"db-a": []byte(`{"reason": "r", "max_wait": "45s"}`)})
	}()
	w, err := k.Start(ctx, "db-a", "r", 45*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if w.Source != "consul" || len(kv.writes) != 1 || kv.writes[0] != "put "+folder+"db-a" {
		t.Fatalf("window %+v, writes %v", w, kv.writes)
	}
}
