package tfprovider

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

// fakeMaintenance is the admin API's maintenance routes over a map, with
// the checks and answers the API documents. (internal/api serves the real
// ones; these tests move onto it, like the group tests, once it does.)
type fakeMaintenance struct {
	mu      sync.Mutex // guards windows
	windows map[string]apiclient.MaintenanceWindow
}

func newFakeMaintenance(t *testing.T) (*fakeMaintenance, *client) {
	t.Helper()
	f := &fakeMaintenance{windows: map[string]apiclient.MaintenanceWindow{}}
	fail := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
	}
	ok := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/maintenance", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		out := []apiclient.MaintenanceWindow{}
		for _, m := range f.windows {
			out = append(out, m)
		}
		sort.Slice(out, func(a, b int) bool { return out[a].Backend < out[b].Backend })
		ok(w, map[string]any{"backends": out})
	})
	mux.HandleFunc("PUT /v1/maintenance/{backend}", func(w http.ResponseWriter, r *http.Request) {
		backend := r.PathValue("backend")
		var req apiclient.MaintenanceRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			fail(w, 400, "bad body: "+err.Error())
			return
		}
		if !backendRE.MatchString(backend) {
			fail(w, 400, "bad backend name "+backend)
			return
		}
		if req.MaxWait == "" {
			req.MaxWait = "30s"
		}
		d, err := parseMaxWait(req.MaxWait)
		if err != nil {
			fail(w, 400, err.Error())
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		m, running := f.windows[backend]
		if !running {
			m = apiclient.MaintenanceWindow{Backend: backend, Since: time.Now().UTC().Truncate(time.Second), Source: "raft"}
		}
		m.Reason, m.MaxWait = req.Reason, d.String()
		f.windows[backend] = m
		ok(w, m)
	})
	mux.HandleFunc("DELETE /v1/maintenance/{backend}", func(w http.ResponseWriter, r *http.Request) {
		backend := r.PathValue("backend")
		f.mu.Lock()
		defer f.mu.Unlock()
		m, running := f.windows[backend]
		if !running {
			fail(w, 404, "backend "+backend+" is not in maintenance")
			return
		}
		delete(f.windows, backend)
		ok(w, map[string]any{"backend": backend, "ended": true, "lasted": time.Since(m.Since).String()})
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Stickyd-Token") != testToken {
			fail(w, 401, "missing or wrong admin token")
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := newClient(srv.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

func (f *fakeMaintenance) window(backend string) (apiclient.MaintenanceWindow, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.windows[backend]
	return m, ok
}

// maintenancePlan is a configuration as Terraform plans it: id and since
// unknown until apply.
func maintenancePlan(backend, reason, maxWait string) maintenanceModel {
	m := maintenanceModel{
		ID:      types.StringUnknown(),
		Backend: types.StringValue(backend),
		Reason:  types.StringNull(),
		MaxWait: types.StringValue(maxWait),
		Since:   types.StringUnknown(),
	}
	if reason != "" {
		m.Reason = types.StringValue(reason)
	}
	return m
}

func createMaintenance(t *testing.T, r *maintenanceResource, m maintenanceModel) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	resp := resource.CreateResponse{State: emptyState(t, r)}
	r.Create(context.Background(), resource.CreateRequest{Plan: planOf(t, r, m)}, &resp)
	return resp.State, resp.Diagnostics
}

func readMaintenance(t *testing.T, r *maintenanceResource, s tfsdk.State) (tfsdk.State, diag.Diagnostics) {
	t.Helper()
	resp := resource.ReadResponse{State: s}
	r.Read(context.Background(), resource.ReadRequest{State: s}, &resp)
	return resp.State, resp.Diagnostics
}

func deleteMaintenance(t *testing.T, r *maintenanceResource, s tfsdk.State) diag.Diagnostics {
	t.Helper()
	resp := resource.DeleteResponse{State: s}
	r.Delete(context.Background(), resource.DeleteRequest{State: s}, &resp)
	return resp.Diagnostics
}

func modelOf(t *testing.T, s tfsdk.State) maintenanceModel {
	t.Helper()
	var m maintenanceModel
	if d := s.Get(context.Background(), &m); d.HasError() {
		t.Fatalf("state: %v", d)
	}
	return m
}

func TestMaintenanceLifecycle(t *testing.T) {
	f, c := newFakeMaintenance(t)
	r := &maintenanceResource{client: c}

	state, diags := createMaintenance(t, r, maintenancePlan("db-a", "upgrading", "30s"))
	if diags.HasError() || len(diags) > 0 {
		t.Fatalf("create: %v", diags)
	}
	w, ok := f.window("db-a")
	if !ok || w.Reason != "upgrading" || w.MaxWait != "30s" {
		t.Fatalf("the agent has %+v (%v)", w, ok)
	}
	since := w.Since.Format(time.RFC3339)
	want := maintenanceModel{ID: types.StringValue("db-a"), Backend: types.StringValue("db-a"), Reason: types.StringValue("upgrading"),
		MaxWait: types.StringValue("30s"), Since: types.StringValue(since)}
	if got := modelOf(t, state); got != want {
		t.Fatalf("state after create %+v, want %+v", got, want)
	}
	state, diags = readMaintenance(t, r, state)
	if diags.HasError() {
		t.Fatalf("read: %v", diags)
	}
	if got := modelOf(t, state); got != want {
		t.Errorf("state after read %+v, want %+v", got, want)
	}

	// In place: the reason goes, the max wait changes (the agent writes
	// "1m0s"; the state keeps the configuration's "1m"); since stays.
	next := maintenancePlan("db-a", "", "1m")
	next.ID, next.Since = want.ID, want.Since
	uresp := resource.UpdateResponse{State: state}
	r.Update(context.Background(), resource.UpdateRequest{Plan: planOf(t, r, next), State: state}, &uresp)
	if uresp.Diagnostics.HasError() {
		t.Fatalf("update: %v", uresp.Diagnostics)
	}
	if w, _ := f.window("db-a"); w.Reason != "" || w.MaxWait != "1m0s" || w.Since.Format(time.RFC3339) != since {
		t.Errorf("after update the agent has %+v", w)
	}
	if got := modelOf(t, uresp.State); got != next {
		t.Errorf("state after update %+v, want %+v", got, next)
	}
	state, diags = readMaintenance(t, r, uresp.State)
	if got := modelOf(t, state); diags.HasError() || got != next {
		t.Errorf("read after update %+v (%v), want %+v: a reread must not show a change", got, diags, next)
	}

	// Drift: someone changes the window outside Terraform.
	f.mu.Lock()
	w = f.windows["db-a"]
	w.Reason, w.MaxWait = "pg 16.4", "5m0s"
	f.windows["db-a"] = w
	f.mu.Unlock()
	drifted, diags := readMaintenance(t, r, state)
	if got := modelOf(t, drifted); diags.HasError() || got.Reason.ValueString() != "pg 16.4" || got.MaxWait.ValueString() != "5m0s" {
		t.Errorf("read after drift %+v (%v)", got, diags)
	}

	if diags := deleteMaintenance(t, r, drifted); diags.HasError() {
		t.Fatalf("delete: %v", diags)
	}
	if _, ok := f.window("db-a"); ok {
		t.Error("the window is still running")
	}
	state, diags = readMaintenance(t, r, drifted)
	if diags.HasError() || !state.Raw.IsNull() {
		t.Errorf("reading an ended window should drop it: %v", diags)
	}
	if diags := deleteMaintenance(t, r, drifted); diags.HasError() {
		t.Errorf("ending an ended window should succeed: %v", diags)
	}
}

func TestMaintenanceImport(t *testing.T) {
	f, c := newFakeMaintenance(t)
	r := &maintenanceResource{client: c}
	since := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	f.windows["db-a"] = apiclient.MaintenanceWindow{Backend: "db-a", MaxWait: "30s", Since: since, Source: "consul"}

	iresp := resource.ImportStateResponse{State: emptyState(t, r)}
	r.ImportState(context.Background(), resource.ImportStateRequest{ID: "db-a"}, &iresp)
	if iresp.Diagnostics.HasError() {
		t.Fatalf("import: %v", iresp.Diagnostics)
	}
	state, diags := readMaintenance(t, r, iresp.State)
	if diags.HasError() {
		t.Fatalf("read: %v", diags)
	}
	want := maintenanceModel{ID: types.StringValue("db-a"), Backend: types.StringValue("db-a"), Reason: types.StringNull(),
		MaxWait: types.StringValue("30s"), Since: types.StringValue("2026-11-30T10:00:00Z")}
	if got := modelOf(t, state); got != want {
		t.Errorf("imported %+v, want %+v", got, want)
	}

	bad := resource.ImportStateResponse{State: emptyState(t, r)}
	r.ImportState(context.Background(), resource.ImportStateRequest{ID: "DB A"}, &bad)
	wantError(t, bad.Diagnostics, "Invalid import ID", `"DB A" is not a backend`)
}

func TestMaintenanceErrors(t *testing.T) {
	f, c := newFakeMaintenance(t)
	r := &maintenanceResource{client: c}

	t.Run("someone else's window", func(t *testing.T) {
		f.mu.Lock()
		f.windows["db-b"] = apiclient.MaintenanceWindow{Backend: "db-b", Reason: "by hand", MaxWait: "30s",
			Since: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), Source: "consul"}
		f.mu.Unlock()
		_, diags := createMaintenance(t, r, maintenancePlan("db-b", "mine", "30s"))
		wantError(t, diags, `Starting maintenance of "db-b"`, "already in maintenance", "since 2026-11-30T10:00:00Z, source consul", "import")
		if w, _ := f.window("db-b"); w.Reason != "by hand" {
			t.Errorf("the running window was taken over: %+v", w)
		}
	})
	t.Run("refused", func(t *testing.T) {
		// Past the plan-time checks (a value unknown at plan, say): the
		// API's 400 is shown.
		_, diags := createMaintenance(t, r, maintenancePlan("db-c", "", "2h"))
		wantError(t, diags, `Starting maintenance of "db-c"`, "400", `max_wait "2h"`)
	})
	t.Run("unreachable", func(t *testing.T) {
		// A port the OS gave and took back: nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		down, err := newClient(addr, testToken)
		if err != nil {
			t.Fatal(err)
		}
		dr := &maintenanceResource{client: down}
		state := stateOf(t, dr, maintenanceModel{ID: types.StringValue("db-a"), Backend: types.StringValue("db-a"), Reason: types.StringNull(),
			MaxWait: types.StringValue("30s"), Since: types.StringValue("2026-11-30T10:00:00Z")})
		_, diags := readMaintenance(t, dr, state)
		wantError(t, diags, `Reading maintenance of "db-a"`, "cannot reach the stickyd admin API")
		wantError(t, deleteMaintenance(t, dr, state), `Ending maintenance of "db-a"`)
	})
}

func TestMaintenanceValidateConfig(t *testing.T) {
	r := &maintenanceResource{}
	cases := []struct {
		name string
		m    maintenanceModel
		want string
	}{
		{"plain", maintenancePlan("db-a", "", "30s"), ""},
		{"dots", maintenancePlan("pg.main_1", "why", "1h"), ""},
		{"unknown max_wait", maintenanceModel{ID: types.StringUnknown(), Backend: types.StringValue("db-a"), Reason: types.StringNull(), MaxWait: types.StringUnknown(), Since: types.StringUnknown()}, ""},
		{"bad backend", maintenancePlan("DB A", "", "30s"), "Invalid backend"},
		{"long backend", maintenancePlan("a234567890123456789012345678901234567890123456789012345678901234", "", "30s"), "Invalid backend"},
		{"not a duration", maintenancePlan("db-a", "", "soon"), "Invalid max_wait"},
		{"too short", maintenancePlan("db-a", "", "500ms"), "from 1s to 1h"},
		{"too long", maintenancePlan("db-a", "", "61m"), "from 1s to 1h"},
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
