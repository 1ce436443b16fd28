package tfprovider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/stickyd/stickyd/internal/fsm"
)

func builtinGroup(name string, workers int64) groupModel {
	return groupModel{
		ID:          types.StringUnknown(),
		Name:        types.StringValue(name),
		Runtime:     types.StringUnknown(),
		Bundle:      types.StringNull(),
		Command:     types.StringNull(),
		Args:        types.ListNull(types.StringType),
		Builtin:     types.StringValue("demo"),
		Env:         types.MapNull(types.StringType),
		Workers:     types.Int64Value(workers),
		MemoryMaxMB: types.Int64Value(0),
	}
}

func createGroup(t *testing.T, r *groupResource, m groupModel) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	req := resource.CreateRequest{Plan: planOf(t, r, m)}
	resp := resource.CreateResponse{State: emptyState(t, r)}
	r.Create(context.Background(), req, &resp)
	return resp.State, resp.Diagnostics
}

func readGroup(t *testing.T, r *groupResource, s tfsdk.State) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	resp := resource.ReadResponse{State: s}
	r.Read(context.Background(), resource.ReadRequest{State: s}, &resp)
	return resp.State, resp.Diagnostics
}

func deleteGroup(t *testing.T, r *groupResource, s tfsdk.State) diag.Diagnostics {
	t.Helper()
	resp := resource.DeleteResponse{State: s}
	r.Delete(context.Background(), resource.DeleteRequest{State: s}, &resp)
	return resp.Diagnostics
}

// wantError fails unless diags hold an error whose text has every part.
func wantError(t *testing.T, diags diag.Diagnostics, parts ...string) {
	t.Helper()
	if !diags.HasError() {
		t.Fatalf("want an error with %q, got %v", parts, diags)
	}
	var all strings.Builder
	for _, d := range diags.Errors() {
		all.WriteString(d.Summary() + ": " + d.Detail() + "\n")
	}
	for _, p := range parts {
		if !strings.Contains(all.String(), p) {
			t.Errorf("error %q does not say %q", all.String(), p)
		}
	}
}

func TestGroupLifecycle(t *testing.T) {
	f, c := newFake(t)
	r := &groupResource{client: c}

	state, diags := createGroup(t, r, builtinGroup("canary", 3))
	if diags.HasError() {
		t.Fatalf("create: %v", diags)
	}
	var got groupModel
	state.Get(context.Background(), &got)
	if got.ID.ValueString() != "canary" || got.Runtime.ValueString() != "builtin" || got.Workers.ValueInt64() != 3 {
		t.Errorf("state after create: %+v", got)
	}
	if !got.Args.IsNull() || !got.Env.IsNull() || !got.Command.IsNull() {
		t.Errorf("empty values should stay null: %+v", got)
	}
	if g := f.groups["canary"]; g.Builtin != "demo" || g.Workers != 3 || g.Runtime != "builtin" {
		t.Errorf("the agent stored %+v", g)
	}

	state, diags = readGroup(t, r, state)
	if diags.HasError() {
		t.Fatalf("read: %v", diags)
	}
	var read groupModel
	state.Get(context.Background(), &read)
	if !read.Workers.Equal(got.Workers) || !read.Runtime.Equal(got.Runtime) || !read.Args.Equal(got.Args) {
		t.Errorf("read changed the state: %+v, was %+v", read, got)
	}

	if diags := deleteGroup(t, r, state); diags.HasError() {
		t.Fatalf("delete: %v", diags)
	}
	if _, ok := f.groups["canary"]; ok {
		t.Error("the group is still in the catalog")
	}
	state, diags = readGroup(t, r, state)
	if diags.HasError() || !state.Raw.IsNull() {
		t.Errorf("reading a retired group should drop it from the state: %v, %v", diags, state.Raw)
	}
	if diags := deleteGroup(t, r, stateOf(t, r, got)); diags.HasError() {
		t.Errorf("deleting a retired group should succeed: %v", diags)
	}
}

func TestGroupKeepsEmptyValues(t *testing.T) {
	_, c := newFake(t)
	r := &groupResource{client: c}
	m := builtinGroup("canary", 1)
	m.Builtin = types.StringNull()
	m.Command = types.StringValue("/bin/worker")
	m.Args = types.ListValueMust(types.StringType, nil)
	m.Env = types.MapValueMust(types.StringType, nil)
	state, diags := createGroup(t, r, m)
	if diags.HasError() {
		t.Fatalf("create: %v", diags)
	}
	state, diags = readGroup(t, r, state)
	if diags.HasError() {
		t.Fatalf("read: %v", diags)
	}
	var got groupModel
	state.Get(context.Background(), &got)
	if got.Args.IsNull() || got.Env.IsNull() || got.Runtime.ValueString() != "go-plugin" {
		t.Errorf("want [] and {} kept and runtime go-plugin, got %+v", got)
	}
}

func TestGroupAPIErrors(t *testing.T) {
	f, c := newFake(t)
	r := &groupResource{client: c}

	t.Run("exists", func(t *testing.T) {
		_, diags := createGroup(t, r, builtinGroup("web", 1))
		wantError(t, diags, `Creating stickyd group "web"`, "409", `group "web" exists (config); retire it first`)
	})
	t.Run("recipe refused", func(t *testing.T) {
		m := builtinGroup("both", 1)
		m.Command = types.StringValue("/bin/worker")
		_, diags := createGroup(t, r, m)
		wantError(t, diags, "400", `give exactly one of "bundle", "command" and "builtin"`)
	})
	t.Run("import a config group", func(t *testing.T) {
		m := builtinGroup("web", 1)
		m.ID = types.StringValue("web")
		_, diags := readGroup(t, r, stateOf(t, r, m))
		wantError(t, diags, "not in the catalog", "configuration file")
	})
	t.Run("retire refused", func(t *testing.T) {
		state, diags := createGroup(t, r, builtinGroup("canary", 1))
		if diags.HasError() {
			t.Fatal(diags)
		}
		f.mu.Lock()
		f.rules = append(f.rules, fsm.Rule{ID: "maria-canary", Group: "canary", User: "maria"})
		f.mu.Unlock()
		wantError(t, deleteGroup(t, r, state), `Retiring stickyd group "canary"`, "rule maria-canary sends people there", "remove the assignments first")
		f.mu.Lock()
		f.rules, f.placed["canary"] = nil, 2
		f.mu.Unlock()
		wantError(t, deleteGroup(t, r, state), "2 people are still placed there")
	})
	t.Run("wrong token", func(t *testing.T) {
		bad, err := newClient(c.api.Address(), "nope")
		if err != nil {
			t.Fatal(err)
		}
		_, diags := readGroup(t, &groupResource{client: bad}, stateOf(t, r, builtinGroup("canary", 1)))
		wantError(t, diags, "403", "wrong admin token")
	})
}

func TestGroupValidateConfig(t *testing.T) {
	r := &groupResource{}
	cases := []struct {
		name string
		edit func(*groupModel)
		want string // "" for valid
	}{
		{"builtin", func(*groupModel) {}, ""},
		{"unknown recipe waits", func(m *groupModel) { m.Builtin = types.StringUnknown() }, ""},
		{"no recipe", func(m *groupModel) { m.Builtin = types.StringNull() }, "exactly one"},
		{"two recipes", func(m *groupModel) { m.Bundle = types.StringValue("sha256:ab") }, "exactly one"},
		{"bad name", func(m *groupModel) { m.Name = types.StringValue("Canary!") }, "Invalid group name"},
		{"bad runtime", func(m *groupModel) { m.Runtime = types.StringValue("docker") }, "Invalid runtime"},
		{"too many workers", func(m *groupModel) { m.Workers = types.Int64Value(65) }, "want 1 to 64"},
		{"negative memory", func(m *groupModel) { m.MemoryMaxMB = types.Int64Value(-1) }, "must not be negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := builtinGroup("canary", 1)
			m.Runtime = types.StringNull()
			m.ID = types.StringNull()
			tc.edit(&m)
			p := planOf(t, r, m)
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

func TestGroupImportState(t *testing.T) {
	r := &groupResource{}
	resp := resource.ImportStateResponse{State: emptyState(t, r)}
	r.ImportState(context.Background(), resource.ImportStateRequest{ID: "canary"}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	var m groupModel
	resp.State.Get(context.Background(), &m)
	if m.Name.ValueString() != "canary" || m.ID.ValueString() != "canary" {
		t.Errorf("imported %+v", m)
	}
	bad := resource.ImportStateResponse{State: emptyState(t, r)}
	r.ImportState(context.Background(), resource.ImportStateRequest{ID: "Not A Name"}, &bad)
	wantError(t, bad.Diagnostics, "not a group name")
}
