package tfprovider

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/stickyd/stickyd/internal/fsm"
)

func userRule(id, group, user string) assignmentModel {
	return assignmentModel{
		ID:    types.StringValue(id),
		Group: types.StringValue(group),
		User:  types.StringValue(user),
		Attr:  types.StringNull(),
		Value: types.StringNull(),
	}
}

func createAssignment(t *testing.T, r *assignmentResource, m assignmentModel) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	resp := resource.CreateResponse{State: emptyState(t, r)}
	r.Create(context.Background(), resource.CreateRequest{Plan: planOf(t, r, m)}, &resp)
	return resp.State, resp.Diagnostics
}

func readAssignment(t *testing.T, r *assignmentResource, s tfsdk.State) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	resp := resource.ReadResponse{State: s}
	r.Read(context.Background(), resource.ReadRequest{State: s}, &resp)
	return resp.State, resp.Diagnostics
}

func deleteAssignment(t *testing.T, r *assignmentResource, s tfsdk.State) diag.Diagnostics {
	t.Helper()
	resp := resource.DeleteResponse{State: s}
	r.Delete(context.Background(), resource.DeleteRequest{State: s}, &resp)
	return resp.Diagnostics
}

func (f *fakeGroups) rule(id string) (fsm.Rule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.rules {
		if r.ID == id {
			return r, true
		}
	}
	return fsm.Rule{}, false
}

func TestAssignmentLifecycle(t *testing.T) {
	f, c := newFake(t)
	f.misplaced = []string{"maria"}
	r := &assignmentResource{client: c}

	state, diags := createAssignment(t, r, userRule("maria-web", "web", "maria"))
	if diags.HasError() || len(diags) > 0 {
		t.Fatalf("create: %v", diags)
	}
	if got, ok := f.rule("maria-web"); !ok || got != (fsm.Rule{ID: "maria-web", Group: "web", User: "maria"}) {
		t.Fatalf("the agent has %+v (%v)", got, ok)
	}
	state, diags = readAssignment(t, r, state)
	if diags.HasError() {
		t.Fatalf("read: %v", diags)
	}
	var m assignmentModel
	state.Get(context.Background(), &m)
	if m != userRule("maria-web", "web", "maria") {
		t.Errorf("read %+v", m)
	}

	// In place: the same id, now a team.
	next := assignmentModel{ID: m.ID, Group: m.Group, User: types.StringNull(), Attr: types.StringValue("team"), Value: types.StringValue("qa")}
	uresp := resource.UpdateResponse{State: state}
	r.Update(context.Background(), resource.UpdateRequest{Plan: planOf(t, r, next), State: state}, &uresp)
	if uresp.Diagnostics.HasError() {
		t.Fatalf("update: %v", uresp.Diagnostics)
	}
	if got, _ := f.rule("maria-web"); got != (fsm.Rule{ID: "maria-web", Group: "web", Attr: "team", Value: "qa"}) {
		t.Errorf("after update the agent has %+v", got)
	}

	if diags := deleteAssignment(t, r, uresp.State); diags.HasError() {
		t.Fatalf("delete: %v", diags)
	}
	if _, ok := f.rule("maria-web"); ok {
		t.Error("the rule is still there")
	}
	state, diags = readAssignment(t, r, uresp.State)
	if diags.HasError() || !state.Raw.IsNull() {
		t.Errorf("reading a removed rule should drop it: %v", diags)
	}
	if diags := deleteAssignment(t, r, uresp.State); diags.HasError() {
		t.Errorf("removing a removed rule should succeed: %v", diags)
	}
}

func TestAssignmentErrors(t *testing.T) {
	f, c := newFake(t)
	r := &assignmentResource{client: c}

	t.Run("no such group", func(t *testing.T) {
		_, diags := createAssignment(t, r, userRule("maria-nope", "nope", "maria"))
		wantError(t, diags, `Creating stickyd assignment "maria-nope"`, "404", `no such group "nope"`)
	})
	t.Run("someone else's rule", func(t *testing.T) {
		f.mu.Lock()
		f.rules = []fsm.Rule{{ID: "qa-web", Group: "web", Attr: "team", Value: "qa"}}
		f.mu.Unlock()
		_, diags := createAssignment(t, r, userRule("qa-web", "web", "maria"))
		wantError(t, diags, `Rule "qa-web" exists`, "everyone with team=qa", "import")
		if got, _ := f.rule("qa-web"); got.User != "" {
			t.Errorf("the existing rule was replaced: %+v", got)
		}
	})
	t.Run("moves fail", func(t *testing.T) {
		f.mu.Lock()
		f.misplaced, f.moveErr = []string{"ana", "bo"}, errors.New("freeze timed out")
		f.mu.Unlock()
		state, diags := createAssignment(t, r, userRule("ana-web", "web", "ana"))
		if diags.HasError() {
			t.Fatalf("failed moves should warn, not fail: %v", diags)
		}
		if state.Raw.IsNull() {
			t.Fatal("the rule is stored, so the state should hold it")
		}
		w := diags.Warnings()
		if len(w) != 1 || !strings.Contains(w[0].Detail(), "0 of 2 people moved, 2 failed") || !strings.Contains(w[0].Detail(), "ana w-1 → w-2: freeze timed out") {
			t.Errorf("warning: %v", w)
		}
	})
}

func TestAssignmentValidateConfig(t *testing.T) {
	r := &assignmentResource{}
	cases := []struct {
		name string
		m    assignmentModel
		want string
	}{
		{"user", userRule("a", "web", "maria"), ""},
		{"attr", assignmentModel{ID: types.StringValue("a"), Group: types.StringValue("web"), User: types.StringNull(), Attr: types.StringValue("team"), Value: types.StringValue("qa")}, ""},
		{"neither", assignmentModel{ID: types.StringValue("a"), Group: types.StringValue("web"), User: types.StringNull(), Attr: types.StringNull(), Value: types.StringNull()}, "exactly one"},
		{"both", assignmentModel{ID: types.StringValue("a"), Group: types.StringValue("web"), User: types.StringValue("maria"), Attr: types.StringValue("team"), Value: types.StringNull()}, "exactly one"},
		{"value with user", assignmentModel{ID: types.StringValue("a"), Group: types.StringValue("web"), User: types.StringValue("maria"), Attr: types.StringNull(), Value: types.StringValue("qa")}, "goes with"},
		{"bad id", userRule("Maria Web", "web", "maria"), "Invalid rule id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := planOf(t, r, tc.m)
			var resp resource.ValidateConfigResponse
			r.ValidateConfig(context.Background(), resource.ValidateConfigRequest{Config: tfsdk.Config{Schema: p.Schema, Raw: p.Raw}}, &resp)
			if tc.want == "" {
				if resp.Diagnostics.HasError() {
					t.Errorf("want valid, got %v", resp.Diagnostics)
				}
				return
			}
			wantError(t, resp.Diagnostics, tc.want)
		})
	}
}
