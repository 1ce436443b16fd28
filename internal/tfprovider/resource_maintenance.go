package tfprovider

import (
	"context"
	"fmt"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

// What the admin API accepts as a backend and as a window's max wait
// (PUT /v1/maintenance/{backend}); checking them here fails at plan, not
// apply.
var backendRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

const (
	defaultMaxWait = "30s"
	minMaxWait     = time.Second
	maxMaxWait     = time.Hour
)

var (
	_ resource.Resource                   = (*maintenanceResource)(nil)
	_ resource.ResourceWithConfigure      = (*maintenanceResource)(nil)
	_ resource.ResourceWithImportState    = (*maintenanceResource)(nil)
	_ resource.ResourceWithValidateConfig = (*maintenanceResource)(nil)
)

// maintenanceResource is stickyd_maintenance: a maintenance window on a
// backend, for as long as the resource exists. While it does, requests
// that need the backend wait (at most max_wait) before their handler runs.
// Creating it starts the window, destroying it ends it; reason and max_wait
// change in place and keep the window's start.
type maintenanceResource struct {
	client *client
}

func newMaintenanceResource() resource.Resource { return &maintenanceResource{} }

type maintenanceModel struct {
	ID      types.String `tfsdk:"id"`
	Backend types.String `tfsdk:"backend"`
	Reason  types.String `tfsdk:"reason"`
	MaxWait types.String `tfsdk:"max_wait"`
	Since   types.String `tfsdk:"since"`
}

func (r *maintenanceResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_maintenance"
}

func (r *maintenanceResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "A maintenance window on a backend: while the resource exists, requests that need the backend wait, " +
			"at most max_wait each, before their handler runs. Destroying the resource ends the window.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Description:   "The backend.",
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"backend": schema.StringAttribute{
				Description:   "The backend in maintenance, as the application names it: 1 to 63 of a-z 0-9 _ . -, starting with a letter or digit. Changing it replaces the window.",
				Required:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"reason": schema.StringAttribute{
				Description: "Why, for whoever looks at stickyd maintenance status.",
				Optional:    true,
			},
			"max_wait": schema.StringAttribute{
				Description: "How long a request waits for the backend before it gives up: a duration from 1s to 1h. Default \"30s\".",
				Optional:    true,
				Computed:    true,
				Default:     stringdefault.StaticString(defaultMaxWait),
			},
			"since": schema.StringAttribute{
				Description:   "When the window started (RFC 3339); changing reason or max_wait keeps it.",
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
		},
	}
}

func (r *maintenanceResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = configureClient(req, resp)
}

// ValidateConfig checks at plan what the API would refuse at apply.
func (r *maintenanceResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m maintenanceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if v := m.Backend; !v.IsUnknown() && !v.IsNull() && !backendRE.MatchString(v.ValueString()) {
		resp.Diagnostics.AddAttributeError(path.Root("backend"), "Invalid backend",
			fmt.Sprintf("Backend %q: use 1-63 of a-z 0-9 _ . -, starting with a letter or digit.", v.ValueString()))
	}
	if v := m.MaxWait; !v.IsUnknown() && !v.IsNull() {
		if _, err := parseMaxWait(v.ValueString()); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("max_wait"), "Invalid max_wait", err.Error())
		}
	}
}

func (r *maintenanceResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan maintenanceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	backend := plan.Backend.ValueString()
	// PUT takes over a window silently; one Terraform does not know of was
	// started by someone else (the CLI, a script writing the Consul key), so
	// it is reported rather than taken over and, on destroy, ended.
	existing, ok, err := r.client.maintenanceWindow(ctx, backend)
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Starting maintenance of %q", backend), err)
		return
	}
	if ok {
		resp.Diagnostics.AddError(fmt.Sprintf("Starting maintenance of %q", backend),
			fmt.Sprintf("Backend %q is already in maintenance (since %s, source %s): import the window with terraform import, or end it first (stickyd maintenance end %s).",
				backend, existing.Since.Format(time.RFC3339), orDash(existing.Source), backend))
		return
	}
	r.put(ctx, &plan, &resp.Diagnostics, "Starting")
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *maintenanceResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state maintenanceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	backend := state.Backend.ValueString()
	w, ok, err := r.client.maintenanceWindow(ctx, backend)
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Reading maintenance of %q", backend), err)
		return
	}
	if !ok {
		// The window ended outside Terraform: the next apply starts it again.
		resp.State.RemoveResource(ctx)
		return
	}
	state.fromWindow(w)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Update changes reason and max_wait in place: PUT on a backend in
// maintenance keeps the window's start.
func (r *maintenanceResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan maintenanceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.put(ctx, &plan, &resp.Diagnostics, "Updating")
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// put starts or updates the window and writes the agent's answer over m.
func (r *maintenanceResource) put(ctx context.Context, m *maintenanceModel, diags *diag.Diagnostics, verb string) {
	backend := m.Backend.ValueString()
	w, err := r.client.putMaintenance(ctx, backend, apiclient.MaintenanceRequest{Reason: m.Reason.ValueString(), MaxWait: m.MaxWait.ValueString()})
	if err != nil {
		addAPIError(diags, fmt.Sprintf("%s maintenance of %q", verb, backend), err)
		return
	}
	m.fromWindow(w)
}

func (r *maintenanceResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state maintenanceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	backend := state.Backend.ValueString()
	if err := r.client.endMaintenance(ctx, backend); err != nil && !isNotFound(err) {
		// A 404 means the window has ended already.
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Ending maintenance of %q", backend), err)
	}
}

// ImportState imports a window by its backend.
func (r *maintenanceResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !backendRE.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q is not a backend; import a stickyd_maintenance by its backend.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("backend"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

// fromWindow writes the agent's window over m, keeping m's spelling of an
// empty reason and of an equal max wait ("1m" stays "1m", not "1m0s").
func (m *maintenanceModel) fromWindow(w apiclient.MaintenanceWindow) {
	m.ID = types.StringValue(w.Backend)
	m.Backend = types.StringValue(w.Backend)
	m.Reason = stringValue(m.Reason, w.Reason)
	m.MaxWait = durationValue(m.MaxWait, w.MaxWait)
	m.Since = types.StringNull()
	if !w.Since.IsZero() {
		m.Since = types.StringValue(w.Since.UTC().Format(time.RFC3339))
	}
}

// durationValue is v, or prior when both are the same duration.
func durationValue(prior types.String, v string) types.String {
	if !prior.IsNull() && !prior.IsUnknown() {
		a, errA := time.ParseDuration(prior.ValueString())
		b, errB := time.ParseDuration(v)
		if errA == nil && errB == nil && a == b {
			return prior
		}
	}
	return types.StringValue(v)
}

// parseMaxWait reads a window's max wait, 1s to 1h.
func parseMaxWait(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < minMaxWait || d > maxMaxWait {
		return 0, fmt.Errorf("max_wait %q: want a duration from 1s to 1h, such as \"30s\" or \"5m\"", s)
	}
	return d, nil
}

// maintenanceWindow finds one backend's window; ok is false when the
// backend is not in maintenance.
func (c *client) maintenanceWindow(ctx context.Context, backend string) (apiclient.MaintenanceWindow, bool, error) {
	all, err := c.api.MaintenanceWindows(ctx)
	if err != nil {
		return apiclient.MaintenanceWindow{}, false, said(err)
	}
	for _, w := range all {
		if w.Backend == backend {
			return w, true, nil
		}
	}
	return apiclient.MaintenanceWindow{}, false, nil
}

// putMaintenance starts a window, or changes the reason and max wait of
// the running one (keeping its start), and returns it as the agent stored
// it.
func (c *client) putMaintenance(ctx context.Context, backend string, req apiclient.MaintenanceRequest) (apiclient.MaintenanceWindow, error) {
	w, err := c.api.StartMaintenance(ctx, backend, req)
	return w, said(err)
}

// endMaintenance ends a window. A backend not in maintenance is an
// *apiclient.Error 404 (see isNotFound).
func (c *client) endMaintenance(ctx context.Context, backend string) error {
	_, err := c.api.EndMaintenance(ctx, backend)
	return said(err)
}
