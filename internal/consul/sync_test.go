package consul

import (
	"context"
	"encoding/json"
	"net/url"
	"sort"
	"testing"

	"github.com/stickyd/stickyd/internal/testagents"
)

// fakeRegistry is a placement that tracks its changes as the maps do.
type fakeRegistry struct {
	p       Placement
	changed map[string]bool
	all     bool
}

func (r *fakeRegistry) Changes() (uint64, map[string]*User, bool) {
	if r.all {
		r.all, r.changed = false, map[string]bool{}
		return r.p.Index, nil, true
	}
	out := map[string]*User{}
	for name := range r.changed {
		if u, ok := r.p.Users[name]; ok {
			out[name] = &u
		} else {
			out[name] = nil
		}
	}
	r.changed = map[string]bool{}
	return r.p.Index, out, false
}

func (r *fakeRegistry) Placement(uint64) Placement         { return clone(r.p) }
func (r *fakeRegistry) Groups() map[string]json.RawMessage { return clone(r.p).Groups }

// Sync writes everyone once, then only who changed (and the index after
// them); a failed write makes the next Sync publish everything.
func TestMirrorSync(t *testing.T) {
	agent := testagents.StartConsul(t)
	putOperatorKeys(t, agent)
	m := NewMirror(newClient(t, agent, ""))
	ctx := context.Background()
	r := &fakeRegistry{p: bigPlacement(1000), all: true, changed: map[string]bool{}}
	if err := m.Sync(ctx, r); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	got, idx1 := readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, r.p)))

	var names []string
	for name := range r.p.Users {
		names = append(names, name)
	}
	sort.Strings(names)
	written := map[string]bool{}
	for _, name := range names[:10] {
		u := r.p.Users[name]
		u.Worker, u.Epoch, u.State = "w-elsewhere", u.Epoch+1, "parked"
		r.p.Users[name] = u
		r.changed[name] = true
		written["stickyd/placement/users/"+url.PathEscape(name)] = true
	}
	for _, name := range names[600:603] {
		delete(r.p.Users, name)
		r.changed[name] = true
	}
	// Said to have changed, but the same: not written again.
	r.changed[names[700]] = true
	r.p.Groups["alpha"] = json.RawMessage(`{"name":"alpha","workers":4}`)
	written["stickyd/groups/alpha"] = true
	r.p.Index = 300
	if err := m.Sync(ctx, r); err != nil {
		t.Fatalf("second sync: %v", err)
	}
	// Ten changed, three gone, a group and the index: nothing else.
	if m.lastOps != 15 {
		t.Errorf("the change wrote %d operations, want 15", m.lastOps)
	}
	got, idx2 := readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, r.p)))
	var maxOther uint64
	for k, i := range idx2 {
		if k == "stickyd/placement/index" {
			continue
		}
		maxOther = max(maxOther, i)
		if i != idx1[k] && !written[k] {
			t.Errorf("%s written though it did not change", k)
		}
	}
	if idx2["stickyd/placement/index"] < maxOther {
		t.Errorf("index key written at %d, before other keys (up to %d)", idx2["stickyd/placement/index"], maxOther)
	}

	// A sync that fails loses its changes; the next publishes everything
	// again (listing Consul first), so nothing is missed, not even keys
	// deleted behind the mirror's back.
	if _, err := agent.Client().KV().DeleteTree("stickyd/placement/users/user-01", nil); err != nil {
		t.Fatal(err)
	}
	u := r.p.Users[names[20]]
	u.Epoch += 5
	r.p.Users[names[20]] = u
	r.changed[names[20]] = true
	r.p.Index = 400
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := m.Sync(cctx, r); err == nil {
		t.Fatal("a sync with a canceled context succeeded")
	}
	if len(r.changed) != 0 {
		t.Fatal("the failed sync did not take the changes")
	}
	if err := m.Sync(ctx, r); err != nil {
		t.Fatalf("sync after the failure: %v", err)
	}
	got, _ = readAll(t, agent)
	compare(t, got, withOperatorKeys(expected(t, r.p)))
}
