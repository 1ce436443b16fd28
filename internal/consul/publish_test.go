package consul

import (
	"encoding/json"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/testagents"
)

// fakeMaps are the maps a Publisher reads, as a test sets them.
type fakeMaps struct {
	mu      sync.Mutex
	index   uint64
	users   map[string]placement.UserInfo
	agents  map[string]string // worker -> agent name
	changed map[string]bool
	all     bool
	torn    bool
}

func (m *fakeMaps) TakeChanges() (uint64, map[string]*placement.UserInfo, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	changed, all := m.changed, m.all
	m.changed, m.all = map[string]bool{}, false
	if all {
		return m.index, nil, true
	}
	out := map[string]*placement.UserInfo{}
	for name := range changed {
		if u, ok := m.users[name]; ok {
			out[name] = &u
		} else {
			out[name] = nil
		}
	}
	return m.index, out, false
}

func (m *fakeMaps) Users() []placement.UserInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []placement.UserInfo
	for _, u := range m.users {
		out = append(out, u)
	}
	return out
}

func (m *fakeMaps) AgentOf(worker string) (fsm.AgentEntry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	name, ok := m.agents[worker]
	return fsm.AgentEntry{Name: name}, ok
}

func (m *fakeMaps) TornDown() (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Time{}, m.torn
}

var _ Maps = (*fakeMaps)(nil)

// newFakeMaps places alice on h1's w1 and bob on this agent's w2; carol
// is on a worker nobody knows.
func newFakeMaps() *fakeMaps {
	return &fakeMaps{index: 7, all: true, changed: map[string]bool{},
		users: map[string]placement.UserInfo{
			"alice": {User: "alice", Worker: "w1", Epoch: 3, State: "active"},
			"bob":   {User: "bob", Worker: "w2", Epoch: 1, State: "parked"},
			"carol": {User: "carol", Worker: "w9", Epoch: 2, State: "active"},
		},
		agents: map[string]string{"w1": "h1"}}
}

func testPublisher(m Maps, c *Client) *Publisher {
	groups := map[string]string{"w1": "blue", "w2": "green"}
	return NewPublisher(PublisherConfig{Maps: m, Client: func() *Client { return c },
		GroupOf:      func(w string) string { return groups[w] },
		LocalGroupOf: func(w string) string { return map[string]string{"w2": "green"}[w] },
		Name:         "me", Interval: 10 * time.Millisecond,
		GroupsView: func() api.GroupsView {
			return api.GroupsView{Default: "blue", Groups: []api.GroupInfo{
				{GroupEntry: fsm.GroupEntry{Name: "blue", Workers: 2}, Source: "catalog", Default: true, Users: 1, WorkerIDs: []string{"w1"}},
				{GroupEntry: fsm.GroupEntry{Name: "green", Workers: 1}, Source: "config", Users: 1, WorkerIDs: []string{"w2"}},
			}}
		}})
}

// The registry names each person's group and host: the agent that
// registered the worker, this agent for one of its own, none otherwise.
func TestPublisherRegistry(t *testing.T) {
	m := newFakeMaps()
	p := testPublisher(m, nil)
	reg := mapsRegistry{p}
	want := map[string]User{
		"alice": {Group: "blue", Worker: "w1", Host: "h1", Epoch: 3, State: "active"},
		"bob":   {Group: "green", Worker: "w2", Host: "me", Epoch: 1, State: "parked"},
		"carol": {Worker: "w9", Epoch: 2, State: "active"},
	}
	if index, users, all := reg.Changes(); index != 7 || users != nil || !all {
		t.Fatalf("first Changes = %d, %v, %v; want 7, nil, true", index, users, all)
	}
	got := reg.Placement(7)
	if got.Index != 7 || !maps.Equal(got.Users, want) {
		t.Errorf("Placement = %d %+v\nwant 7 %+v", got.Index, got.Users, want)
	}
	if g := string(got.Groups["blue"]); g != `{"bundle":"","default":true,"name":"blue","previous":false,"runtime":"","source":"catalog","users":1,"worker_ids":["w1"],"workers":2}` {
		t.Errorf("blue's entry = %s", g)
	}
	if len(reg.Groups()) != 2 {
		t.Errorf("Groups = %v, want blue and green", reg.Groups())
	}

	m.mu.Lock()
	delete(m.users, "carol")
	m.users["alice"] = placement.UserInfo{User: "alice", Worker: "w2", Epoch: 4, State: "active"}
	m.changed = map[string]bool{"alice": true, "carol": true}
	m.index = 9
	m.mu.Unlock()
	index, users, all := reg.Changes()
	if index != 9 || all || len(users) != 2 || users["carol"] != nil ||
		*users["alice"] != (User{Group: "green", Worker: "w2", Host: "me", Epoch: 4, State: "active"}) {
		t.Errorf("Changes = %d %v %v, want 9, alice on w2 of me and carol gone", index, users, all)
	}
}

// Run publishes the registry while it runs, writes nothing once the
// deployment is torn down, and returns when stop closes.
func TestPublisherRun(t *testing.T) {
	agent := testagents.StartConsul(t)
	m := newFakeMaps()
	p := testPublisher(m, newClient(t, agent, ""))
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		p.Run(stop)
	}()
	defer func() {
		close(stop)
		<-done
	}()
	waitFor(t, 10*time.Second, "the registry in Consul", func() bool {
		kv, _ := readAll(t, agent)
		return kv["stickyd/placement/index"] == "7" && kv["stickyd/placement/users/bob"] != ""
	})
	kv, _ := readAll(t, agent)
	var bob User
	if err := json.Unmarshal([]byte(kv["stickyd/placement/users/bob"]), &bob); err != nil || bob.Host != "me" || bob.Group != "green" {
		t.Errorf("bob = %s (%v), want on green on me", kv["stickyd/placement/users/bob"], err)
	}
	if kv["stickyd/groups/blue"] == "" {
		t.Errorf("no group blue in %v", kv)
	}

	m.mu.Lock()
	m.users["dave"] = placement.UserInfo{User: "dave", Worker: "w1", Epoch: 1, State: "active"}
	m.changed["dave"] = true
	m.index = 8
	m.mu.Unlock()
	waitFor(t, 10*time.Second, "dave in Consul", func() bool {
		kv, _ := readAll(t, agent)
		return kv["stickyd/placement/index"] == "8" && kv["stickyd/placement/users/dave"] != ""
	})

	m.mu.Lock()
	m.torn = true
	m.users["erin"] = placement.UserInfo{User: "erin", Worker: "w1", Epoch: 1, State: "active"}
	m.changed["erin"] = true
	m.index = 10
	m.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // ten ticks: a write would have happened by now
	if kv, _ := readAll(t, agent); kv["stickyd/placement/users/erin"] != "" || kv["stickyd/placement/index"] != "8" {
		t.Errorf("written after the tear-down: index %s, erin %q", kv["stickyd/placement/index"], kv["stickyd/placement/users/erin"])
	}
}
