package supervisor

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// grouped is a fixed set of ready workers with their groups.
type grouped map[string]string

func (g grouped) Ready() []string {
	var out []string
	for w := range g {
		out = append(out, w)
	}
	return out
}
func (g grouped) GroupOf(w string) string { return g[w] }
func (g grouped) Local() []string         { return g.Ready() }

// frozenWorkers are workers that hand over a small package at once.
type frozenWorkers struct{ grouped }

func (frozenWorkers) Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error) {
	return &protocol.Frozen{Package: []byte("state of " + user), Conns: 1, Pages: 1}, nil
}
func (frozenWorkers) Thaw(ctx context.Context, worker, user string, epoch uint64) error { return nil }
func (frozenWorkers) Evict(ctx context.Context, worker, user string) error              { return nil }

// realMover is the one road over the maps, with workers that freeze at once.
func realMover(f *fsm.FSM, d *direct, g grouped) *move.Mover {
	return move.New(move.Config{}, f, d, frozenWorkers{g}, park.NewMemStore())
}

func TestPromoteRollbackAndRules(t *testing.T) {
	f := fsm.New()
	d := &direct{f: f}
	g := grouped{"v1-1": "v1", "v1-2": "v1", "v2-1": "v2"}
	s := New(f, d, g, realMover(f, d, g))
	s.SetFallbackDefault("v1")
	groupOf := func(user string) string {
		u, _ := s.User(user)
		return map[string]string{"v1-1": "v1", "v1-2": "v1", "v2-1": "v2"}[u.Worker]
	}
	// Newcomers land on the default group.
	for i := range 6 {
		w, err := s.Place(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		conn := "c" + strconv.Itoa(i)
		if _, err := s.Connect(t.Context(), conn, "", w); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Login(t.Context(), conn, "u"+strconv.Itoa(i), nil); err != nil {
			t.Fatal(err)
		}
		if g := groupOf("u" + strconv.Itoa(i)); g != "v1" {
			t.Fatalf("newcomer on %s, want the default v1", g)
		}
	}
	// A rule keeps u0 on v1 whatever the default.
	if err := s.PutRule(t.Context(), fsm.Rule{ID: "r1", Group: "v1", User: "u0"}); err != nil {
		t.Fatal(err)
	}
	if err := s.PutRule(t.Context(), fsm.Rule{ID: "r2", Group: "nope", User: "u1"}); !errors.Is(err, ErrNoGroup) {
		t.Fatalf("rule to an unknown group: %v", err)
	}
	var steps int
	res, err := s.Promote(t.Context(), "v2", "", 3, func(move.Result, error) { steps++ })
	if err != nil || res.Users != 5 || res.Moved != 5 || res.Failed != 0 || steps != 5 {
		t.Fatalf("promote: %+v %v (%d steps)", res, err, steps)
	}
	if g := groupOf("u0"); g != "v1" {
		t.Fatalf("u0, kept by a rule, is on %s", g)
	}
	for i := 1; i < 6; i++ {
		if g := groupOf("u" + strconv.Itoa(i)); g != "v2" {
			t.Fatalf("u%d on %s after the promotion", i, g)
		}
	}
	if w, _ := s.Place(t.Context()); w != "v2-1" {
		t.Fatalf("newcomer after the promotion placed on %s", w)
	}
	// v1 cannot be retired: a rule and a person still use it.
	if err := s.PutGroup(t.Context(), fsm.GroupEntry{Name: "v1", Runtime: "builtin", Builtin: "counter", Workers: 2}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteGroup(t.Context(), "v1"); !errors.Is(err, fsm.ErrGroupInUse) {
		t.Fatalf("retiring a group in use: %v", err)
	}
	// Rollback returns everyone to v1.
	prev, res, err := s.Rollback(t.Context(), 2, nil)
	if err != nil || prev != "v1" || res.Moved != 5 {
		t.Fatalf("rollback: %q %+v %v", prev, res, err)
	}
	for i := range 6 {
		if g := groupOf("u" + strconv.Itoa(i)); g != "v1" {
			t.Fatalf("u%d on %s after the rollback", i, g)
		}
	}
	// A login whose attributes match a rule moves the person there.
	if err := s.PutRule(t.Context(), fsm.Rule{ID: "canary", Group: "v2", Attr: "team", Value: "canary"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Login(t.Context(), "c3", "u3", map[string]string{"team": "canary"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for groupOf("u3") != "v2" {
		if time.Now().After(deadline) {
			t.Fatal("u3 not moved to the canary group after logging in as team=canary")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The rule goes: u3 belongs to the default again, and reconciling moves them back.
	if err := s.DeleteRule(t.Context(), "canary"); err != nil {
		t.Fatal(err)
	}
	mis := s.Misplaced(nil)
	if len(mis) != 1 || mis[0].User != "u3" {
		t.Fatalf("misplaced after the rule went: %+v", mis)
	}
	if res, err := s.Reconcile(t.Context(), mis, 1, "rule", nil); err != nil || res.Moved != 1 || groupOf("u3") != "v1" {
		t.Fatalf("reconcile: %+v %v, u3 on %s", res, err, groupOf("u3"))
	}
}
