package governance

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governor"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

const mib = 1 << 20

// fakePool is this host's pool: its workers as the probes last read them,
// and what governance asked of it.
type fakePool struct {
	mu       sync.Mutex
	workers  []host.WorkerInfo
	usage    map[string]map[string]*protocol.UserUsage
	cordoned map[string]bool
	added    []string
	retired  []string
}

func (p *fakePool) Workers() []host.WorkerInfo {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.workers)
}

func (p *fakePool) Usage(id string) map[string]*protocol.UserUsage {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.usage[id]
}

func (p *fakePool) GroupOf(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		if w.ID == id {
			return w.Group
		}
	}
	return ""
}

func (p *fakePool) HasGroup(group string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.workers {
		if w.Group == group {
			return true
		}
	}
	return false
}

func (p *fakePool) Add(_ context.Context, group string) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := fmt.Sprintf("%s-%d", group, len(p.workers)+1)
	p.workers = append(p.workers, host.WorkerInfo{ID: id, Group: group, State: host.StateStarting})
	p.added = append(p.added, id)
	return id, nil
}

func (p *fakePool) Retire(_ context.Context, id, _ string) error {
	if p.GroupOf(id) == "" {
		return fmt.Errorf("retiring %s: %w", id, host.ErrUnknownWorker)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = append(p.retired, id)
	return nil
}

func (p *fakePool) Cordon(id string, on bool) error {
	if p.GroupOf(id) == "" {
		return fmt.Errorf("cordoning %s: %w", id, host.ErrUnknownWorker)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cordoned == nil {
		p.cordoned = map[string]bool{}
	}
	p.cordoned[id] = on
	return nil
}

// fakeMaps places people on workers and names the agents.
type fakeMaps struct {
	users  map[string][]string // by worker
	agents []fsm.AgentEntry
}

func (m *fakeMaps) UsersByWorker(ids map[string]bool) map[string][]string {
	out := map[string][]string{}
	for id := range ids {
		out[id] = m.users[id]
	}
	return out
}

func (m *fakeMaps) UsersOf(worker string) []string { return m.users[worker] }
func (m *fakeMaps) Agents() []fsm.AgentEntry       { return slices.Clone(m.agents) }
func (m *fakeMaps) Catalog() fsm.Catalog           { return fsm.Catalog{} }

// fakeMover records each set it is given and ends every move with err.
type fakeMover struct {
	mu   sync.Mutex
	sets [][]move.Request
	opts []move.Options
	err  error
}

func (m *fakeMover) MoveSet(_ context.Context, reqs []move.Request, opt move.Options, done func(move.Result, error)) {
	m.mu.Lock()
	m.sets = append(m.sets, slices.Clone(reqs))
	m.opts = append(m.opts, opt)
	err := m.err
	m.mu.Unlock()
	for _, r := range reqs {
		done(move.Result{User: r.User, To: r.To}, err)
	}
}

func (m *fakeMover) calls() ([][]move.Request, []move.Options) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.sets), slices.Clone(m.opts)
}

type fakeLeadership struct{ leading atomic.Bool }

func (l *fakeLeadership) Leading() bool { return l.leading.Load() }

// fixture is an executor governing group "web" of four workers on this
// host: web-1 and web-3 at 98% of their 100 MiB memory with three people
// each (20 MiB each), web-2 and web-4 at 5%. The engine wants one person
// off each hot worker (one move per hot worker a round), onto a cool one.
type fixture struct {
	e          *Executor
	pool       *fakePool
	maps       *fakeMaps
	mover      *fakeMover
	lead       *fakeLeadership
	registered atomic.Int32
	posts      []string
	postsMu    sync.Mutex
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	p := governor.DefaultPolicy()
	p.Thresholds = map[governor.Resource]governor.Threshold{governor.Memory: {Limit: 100 * mib, High: 0.85, Low: 0.75}}
	p.UsageWait, p.ReplaceHorizon, p.CompactBelow, p.MaxWorkers = 0, 0, 0, 4
	now := time.Now()
	f := &fixture{
		pool: &fakePool{
			workers: []host.WorkerInfo{
				{ID: "web-1", Group: "web", State: host.StateReady, LastProbe: now, HeapBytes: 98 * mib, Pages: 3},
				{ID: "web-2", Group: "web", State: host.StateReady, LastProbe: now, HeapBytes: 5 * mib, Pages: 1},
				{ID: "web-3", Group: "web", State: host.StateReady, LastProbe: now, HeapBytes: 98 * mib, Pages: 3},
				{ID: "web-4", Group: "web", State: host.StateReady, LastProbe: now, HeapBytes: 5 * mib},
			},
			usage: map[string]map[string]*protocol.UserUsage{
				"web-1": {"ana": {BusySeconds: 1, StateBytes: 20 * mib}, "bob": {BusySeconds: 1, StateBytes: 20 * mib}, "dan": {BusySeconds: 1, StateBytes: 20 * mib}},
				"web-2": {"cy": {StateBytes: 1 * mib}},
				"web-3": {"eve": {BusySeconds: 1, StateBytes: 20 * mib}, "fay": {BusySeconds: 1, StateBytes: 20 * mib}, "gus": {BusySeconds: 1, StateBytes: 20 * mib}},
			},
		},
		maps: &fakeMaps{
			users: map[string][]string{"web-1": {"ana", "bob", "dan"}, "web-2": {"cy"}, "web-3": {"eve", "fay", "gus"}},
			agents: []fsm.AgentEntry{
				{Name: "a", AdminAddr: "a:1", Workers: map[string]string{"web-1": "web", "web-2": "web", "web-3": "web", "web-4": "web"}},
				{Name: "b", AdminAddr: "b:1", Workers: map[string]string{"web-9": "web"}},
			},
		},
		mover: &fakeMover{},
		lead:  &fakeLeadership{},
	}
	var err error
	f.e, err = New(Config{
		Agent: "a", Policies: map[string]governor.Policy{"web": p},
		Pool: f.pool, Maps: f.maps, Mover: f.mover, Leadership: f.lead,
		Register: func(context.Context) error { f.registered.Add(1); return nil },
		Parts: func(context.Context, func(string) string, time.Duration) map[string]Part {
			return nil
		},
		Post: func(_ context.Context, admin, path string, body []byte, out any) error {
			f.postsMu.Lock()
			defer f.postsMu.Unlock()
			f.posts = append(f.posts, admin+path+" "+string(body))
			return nil
		},
		Rand:   rand.New(rand.NewPCG(1, 2)),
		Logger: hclog.New(&hclog.LoggerOptions{Output: hclog.DefaultOutput, Level: hclog.Warn}),
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// eventsOf keeps the engine's events of kind k.
func (f *fixture) eventsOf(k governor.Kind) []governor.Event {
	var out []governor.Event
	for _, ev := range f.e.Events() {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}

// A round that decides moves gives the mover the round's moves of one
// cause as one set, each to the worker the engine chose; the engine hears
// each move completed.
func TestRoundMovesTheSet(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := newFixture(t)
	f.e.round(time.Now(), true, nil)
	f.e.Wait()
	sets, opts := f.mover.calls()
	if len(sets) != 1 {
		t.Fatalf("the mover was called %d times, want once with the set (events %v)", len(sets), f.e.Events())
	}
	if opts[0].Reason != governor.CauseSaturation {
		t.Errorf("moved for %q, want %q", opts[0].Reason, governor.CauseSaturation)
	}
	moves := ofKind(f.e.Events(), governor.KindMove)
	if len(sets[0]) != 2 || len(moves) != 2 {
		t.Fatalf("the set %v, the engine decided %d moves (want one off each hot worker, in one set)", sets[0], len(moves))
	}
	from := map[string]bool{}
	for _, r := range sets[0] {
		switch {
		case slices.Contains(f.maps.users["web-1"], r.User):
			from["web-1"] = true
		case slices.Contains(f.maps.users["web-3"], r.User):
			from["web-3"] = true
		}
		if r.To != "web-2" && r.To != "web-4" {
			t.Errorf("move %+v: want a cool worker as the destination", r)
		}
	}
	if len(from) != 2 {
		t.Errorf("the set %v does not take one person off each hot worker", sets[0])
	}
	if got := len(f.eventsOf(governor.KindCompleted)); got != len(sets[0]) {
		t.Errorf("%d moves completed in the engine's events, want %d", got, len(sets[0]))
	}
	f.e.mu.Lock()
	inFlight := f.e.inFlight
	f.e.mu.Unlock()
	if inFlight != 0 {
		t.Errorf("%d decisions left in flight", inFlight)
	}
}

// A failed move is reported done to the engine (not left in flight), as
// failed.
func TestFailedMoveIsDone(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := newFixture(t)
	f.mover.err = errors.New("the destination refused")
	f.e.round(time.Now(), true, nil)
	waited := make(chan struct{})
	go func() { f.e.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("a failed move was left under way: Wait still waits after 5s")
	}
	sets, _ := f.mover.calls()
	if len(sets) != 1 || len(sets[0]) != 2 {
		t.Fatalf("mover calls %v", sets)
	}
	failed := f.eventsOf(governor.KindFailed)
	if len(failed) != len(sets[0]) || len(f.eventsOf(governor.KindCompleted)) != 0 {
		t.Fatalf("events %v: want %d failed, none completed", f.e.Events(), len(sets[0]))
	}
	f.e.mu.Lock()
	inFlight := f.e.inFlight
	f.e.mu.Unlock()
	if inFlight != 0 {
		t.Errorf("%d decisions left in flight", inFlight)
	}
}

// While this agent does not lead, Run observes and decides nothing; once
// it leads, the same readings are decided on.
func TestRunDecidesOnlyWhileLeading(t *testing.T) {
	defer goleak.VerifyNone(t)
	f := newFixture(t)
	run := func(until func() bool) {
		t.Helper()
		stop, done := make(chan struct{}), make(chan struct{})
		go func() { defer close(done); f.e.Run(5*time.Millisecond, stop) }()
		deadline := time.Now().Add(5 * time.Second)
		for !until() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		close(stop)
		<-done
		f.e.Wait()
	}
	var seen atomic.Int32
	f.e.cfg.Seen = func(host.WorkerInfo) { seen.Add(1) }
	run(func() bool { return seen.Load() >= 20 }) // ten rounds of two workers
	if seen.Load() < 20 {
		t.Fatalf("Run read this host's workers %d times in 5s", seen.Load())
	}
	if sets, _ := f.mover.calls(); len(sets) != 0 || len(f.e.Events()) != 0 || len(f.pool.added) != 0 {
		t.Fatalf("a follower decided: moves %v, events %v, started %v", sets, f.e.Events(), f.pool.added)
	}
	if _, ok := f.e.Outlook("web-1"); !ok {
		t.Error("a follower keeps no outlook of its workers for the monitor")
	}
	f.lead.leading.Store(true)
	// The readings are a round old: new ones, as the next probe brings.
	f.pool.mu.Lock()
	for i := range f.pool.workers {
		f.pool.workers[i].LastProbe = time.Now()
	}
	f.pool.mu.Unlock()
	run(func() bool { sets, _ := f.mover.calls(); return len(sets) > 0 })
	if sets, _ := f.mover.calls(); len(sets) != 1 {
		t.Fatalf("the leader moved %d sets, want 1", len(sets))
	}
}

// A decision about another host's worker is carried out by that host's
// agent, asked over its admin API; this host's own are done here.
func TestDecisionsOnAnotherHost(t *testing.T) {
	f := newFixture(t)
	if !f.e.carryOut(&governor.Decision{Kind: governor.KindDrain, Worker: "web-9", Group: "web"}) {
		t.Fatal("draining another host's worker failed")
	}
	d := governor.Decision{Kind: governor.KindRetire, Worker: "web-9", Group: "web", Reason: "compacted"}
	if !f.e.carryOut(&d) {
		t.Fatal("retiring another host's worker failed")
	}
	if !f.e.carryOut(&governor.Decision{Kind: governor.KindDrain, Worker: "web-2", Group: "web"}) || !f.pool.cordoned["web-2"] {
		t.Fatal("draining this host's worker did not cordon it here")
	}
	if f.e.carryOut(&governor.Decision{Kind: governor.KindDrain, Worker: "web-404", Group: "web"}) {
		t.Fatal("draining a worker no host runs worked")
	}
	want := []string{
		`b:1/v1/internal/govern/cordon {"worker":"web-9"}`,
		`b:1/v1/internal/govern/retire {"worker":"web-9","reason":"compacted"}`,
	}
	if !slices.Equal(f.posts, want) {
		t.Fatalf("asked\n  %q\nwant\n  %q", f.posts, want)
	}
	// A start of a group this host runs is this host's, recorded in the maps.
	s := governor.Decision{Kind: governor.KindStart, Group: "web"}
	if !f.e.carryOut(&s) || s.To != "web-5" || f.registered.Load() != 1 {
		t.Fatalf("start: to %q, registered %d times", s.To, f.registered.Load())
	}
}

// The other agents are asked only for what changed since their last
// answer; an agent that does not answer is left out and asked for
// everything next time.
func TestRemoteUsageKeepsTheParts(t *testing.T) {
	var paths []string
	var answers map[string]Part
	parts := func(_ context.Context, pathOf func(string) string, _ time.Duration) map[string]Part {
		paths = append(paths, pathOf("b"))
		return answers
	}
	person := func(w string, busy float64) monitor.Person { return monitor.Person{Worker: w, BusySeconds: busy} }
	var r remoteUsage
	answers = map[string]Part{"b": {Token: "t1", Usage: map[string]monitor.Person{"ana": person("web-9", 1), "bob": person("web-9", 1)}}}
	r.ask(context.Background(), parts, time.Second)
	answers = map[string]Part{"b": {Token: "t2", Changes: true, Usage: map[string]monitor.Person{"ana": person("web-9", 2)}, Gone: []string{"bob"}}}
	got := r.ask(context.Background(), parts, time.Second)
	if u := got["b"].Usage; len(u) != 1 || u["ana"].BusySeconds != 2 {
		t.Fatalf("merged usage %v, want ana at 2 s and bob gone", u)
	}
	answers = nil // b does not answer
	if got := r.ask(context.Background(), parts, time.Second); len(got) != 0 {
		t.Fatalf("parts %v from nobody", got)
	}
	r.ask(context.Background(), parts, time.Second)
	want := []string{"/v1/monitor/local?changes=", "/v1/monitor/local?changes=t1", "/v1/monitor/local?changes=t2", "/v1/monitor/local?changes="}
	if !slices.Equal(paths, want) {
		t.Fatalf("asked\n  %q\nwant\n  %q", paths, want)
	}
}

// The route the leader calls acts on this host's own workers only, and
// refuses what it cannot do with the status that says why.
func TestGovernRoute(t *testing.T) {
	f := newFixture(t)
	mux := http.NewServeMux()
	f.e.Routes(mux, func(h func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				var ae *api.Error
				if !errors.As(err, &ae) {
					ae = &api.Error{Status: http.StatusInternalServerError, Message: err.Error()}
				}
				http.Error(w, ae.Message, ae.Status)
			}
		}
	})
	for _, c := range []struct {
		op, body string
		status   int
		answer   string
	}{
		{"cordon", `{"worker": "web-2"}`, http.StatusOK, `{"worker":"web-2"}`},
		{"cordon", `{"worker": "web-9"}`, http.StatusNotFound, "web-9"},
		{"cordon", `{}`, http.StatusBadRequest, "cordon needs a worker"},
		{"retire", `{"worker": "web-1"}`, http.StatusConflict, "the maps still place 3 users there"},
		{"start", `{"group": "web"}`, http.StatusOK, `{"worker":"web-5"}`},
		{"start", `{"group": "api"}`, http.StatusNotFound, `"api" on a`},
		{"reboot", `{"worker": "web-1"}`, http.StatusNotFound, "no governance call"},
		{"cordon", `not json`, http.StatusBadRequest, "want {"},
	} {
		t.Run(c.op+" "+c.body, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/internal/govern/"+c.op, strings.NewReader(c.body)))
			if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.answer) {
				t.Fatalf("%d %q, want %d with %q", rec.Code, rec.Body.String(), c.status, c.answer)
			}
		})
	}
	if !f.pool.cordoned["web-2"] || f.registered.Load() != 1 {
		t.Fatalf("cordoned %v, registered %d times", f.pool.cordoned, f.registered.Load())
	}
}

// ofKind keeps the events of kind k.
func ofKind(evs []governor.Event, k governor.Kind) []governor.Event {
	var out []governor.Event
	for _, ev := range evs {
		if ev.Kind == k {
			out = append(out, ev)
		}
	}
	return out
}
