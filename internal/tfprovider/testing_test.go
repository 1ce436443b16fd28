package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

const testToken = "test-token"

// fakeGroups is an in-memory catalog behind the real API handler, so the
// provider meets the API's own routes, checks, messages and jobs.
type fakeGroups struct {
	mu sync.Mutex // guards everything below
	// groups are the catalog's; config are an agent configuration's.
	groups map[string]fsm.GroupEntry
	config map[string]fsm.GroupEntry
	rules  []fsm.Rule
	def    string
	// placed counts the people placed in each group.
	placed map[string]int
	// misplaced are the people every job moves; moveErr fails each move.
	misplaced []string
	moveErr   error
}

var _ api.Groups = (*fakeGroups)(nil)

func (f *fakeGroups) PutGroup(_ context.Context, g fsm.GroupEntry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	g.Created = uint64(len(f.groups) + 10)
	f.groups[g.Name] = g
	return nil
}

func (f *fakeGroups) DeleteGroup(_ context.Context, group string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.groups[group]; !ok {
		return fmt.Errorf("retiring group %q: %w in the catalog", group, supervisor.ErrNoGroup)
	}
	if n := f.placed[group]; n > 0 {
		return fmt.Errorf("retiring group %q: %w: %d people are still placed there", group, fsm.ErrGroupInUse, n)
	}
	if f.def == group {
		return fmt.Errorf("removing group %q: %w: it is the default group", group, fsm.ErrGroupInUse)
	}
	for _, r := range f.rules {
		if r.Group == group {
			return fmt.Errorf("removing group %q: %w: rule %s sends people there", group, fsm.ErrGroupInUse, r.ID)
		}
	}
	delete(f.groups, group)
	return nil
}

func (f *fakeGroups) PutRule(_ context.Context, r fsm.Rule) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, catalog := f.groups[r.Group]
	_, config := f.config[r.Group]
	if !catalog && !config {
		return fmt.Errorf("rule %s: %w %q", r.ID, supervisor.ErrNoGroup, r.Group)
	}
	for i := range f.rules {
		if f.rules[i].ID == r.ID {
			f.rules[i] = r
			return nil
		}
	}
	f.rules = append(f.rules, r)
	return nil
}

func (f *fakeGroups) DeleteRule(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, r := range f.rules {
		if r.ID == id {
			f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("no rule %q", id)
}

func (f *fakeGroups) Promote(context.Context, string, string, int, func(move.Result, error)) (supervisor.ReconcileResult, error) {
	return supervisor.ReconcileResult{}, errors.New("not in the fake")
}

func (f *fakeGroups) Rollback(context.Context, int, func(move.Result, error)) (string, supervisor.ReconcileResult, error) {
	return "", supervisor.ReconcileResult{}, errors.New("not in the fake")
}

func (f *fakeGroups) Misplaced(func(placement.UserInfo, string) bool) []placement.UserInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []placement.UserInfo
	for _, u := range f.misplaced {
		out = append(out, placement.UserInfo{User: u, Worker: "w-1"})
	}
	return out
}

func (f *fakeGroups) Reconcile(_ context.Context, users []placement.UserInfo, _ int, _ string, progress func(move.Result, error)) (supervisor.ReconcileResult, error) {
	f.mu.Lock()
	err := f.moveErr
	f.mu.Unlock()
	res := supervisor.ReconcileResult{Users: len(users)}
	for _, u := range users {
		progress(move.Result{User: u.User, From: u.Worker, To: "w-2"}, err)
		if err != nil {
			res.Failed++
		} else {
			res.Moved++
		}
	}
	return res, nil
}

func (f *fakeGroups) DefaultGroup() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.def
}

func (f *fakeGroups) view() api.GroupsView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := api.GroupsView{Default: f.def, Rules: append([]fsm.Rule(nil), f.rules...)}
	for _, g := range f.config {
		v.Groups = append(v.Groups, api.GroupInfo{GroupEntry: g, Source: "config", Default: g.Name == f.def})
	}
	for _, g := range f.groups {
		v.Groups = append(v.Groups, api.GroupInfo{GroupEntry: g, Source: "catalog", Default: g.Name == f.def})
	}
	sort.Slice(v.Groups, func(a, b int) bool { return v.Groups[a].Name < v.Groups[b].Name })
	return v
}

// newFake starts the API on a fake catalog holding the config group "web"
// (the default) and returns the catalog and a client of the API.
func newFake(t *testing.T) (*fakeGroups, *client) {
	t.Helper()
	f := &fakeGroups{
		groups: map[string]fsm.GroupEntry{},
		config: map[string]fsm.GroupEntry{"web": {Name: "web", Runtime: "builtin", Builtin: "demo", Workers: 2}},
		def:    "web",
		placed: map[string]int{},
	}
	srv := httptest.NewServer(api.Handler(api.Config{Token: testToken, Groups: f, GroupsView: f.view, CheckGovernance: func([]byte) error { return nil }}))
	t.Cleanup(srv.Close)
	c, err := newClient(srv.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// schemaOf returns a resource's schema.
func schemaOf(t *testing.T, r resource.Resource) tfsdk.Plan {
	t.Helper()
	var resp resource.SchemaResponse
	r.Schema(context.Background(), resource.SchemaRequest{}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("schema: %v", resp.Diagnostics)
	}
	return tfsdk.Plan{Schema: resp.Schema, Raw: tftypes.NewValue(resp.Schema.Type().TerraformType(context.Background()), nil)}
}

// planOf returns a plan (and its Raw value for a config or state) holding m.
func planOf(t *testing.T, r resource.Resource, m any) tfsdk.Plan {
	t.Helper()
	p := schemaOf(t, r)
	if d := p.Set(context.Background(), m); d.HasError() {
		t.Fatalf("setting plan: %v", d)
	}
	return p
}

func stateOf(t *testing.T, r resource.Resource, m any) tfsdk.State {
	p := planOf(t, r, m)
	return tfsdk.State{Schema: p.Schema, Raw: p.Raw}
}

func emptyState(t *testing.T, r resource.Resource) tfsdk.State {
	p := schemaOf(t, r)
	return tfsdk.State{Schema: p.Schema, Raw: p.Raw}
}
