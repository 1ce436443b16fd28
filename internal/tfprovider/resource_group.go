package tfprovider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

// nameRE is what the API accepts as a group name or a rule id
// (internal/api/groups.go); checking it here fails at plan, not apply.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

var (
	_ resource.Resource                   = (*groupResource)(nil)
	_ resource.ResourceWithConfigure      = (*groupResource)(nil)
	_ resource.ResourceWithImportState    = (*groupResource)(nil)
	_ resource.ResourceWithValidateConfig = (*groupResource)(nil)
)

// groupResource is stickyd_group: a group of the catalog, its recipe and
// its size. The API cannot change a group: every change replaces it
// (retire, then create), which the API refuses while people or rules still
// point at the group.
type groupResource struct {
	client *client
}

func newGroupResource() resource.Resource { return &groupResource{} }

type groupModel struct {
	ID          types.String `tfsdk:"id"`
	Name        types.String `tfsdk:"name"`
	Runtime     types.String `tfsdk:"runtime"`
	Interpreter types.String `tfsdk:"interpreter"`
	Bundle      types.String `tfsdk:"bundle"`
	Command     types.String `tfsdk:"command"`
	Args        types.List   `tfsdk:"args"`
	Builtin     types.String `tfsdk:"builtin"`
	Env         types.Map    `tfsdk:"env"`
	Workers     types.Int64  `tfsdk:"workers"`
	MemoryMaxMB types.Int64  `tfsdk:"memory_max_mb"`
	// ReadyTimeout is how long a create waits for the group's first
	// worker (a Nomad job's hosts take a while); not part of the group.
	ReadyTimeout types.String `tfsdk:"ready_timeout"`
}

// defaultReadyTimeout is ready_timeout's default.
const defaultReadyTimeout = "5m"

func (r *groupResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_group"
}

func (r *groupResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	replace := []planmodifier.String{stringplanmodifier.RequiresReplace()}
	resp.Schema = schema.Schema{
		Description: "A group of the stickyd catalog: what runs its workers (a bundle, a plugin command or a builtin application) " +
			"and how many each agent runs. stickyd cannot change a group in place, so any change replaces it; " +
			"the agent refuses to retire a group while people are placed in it, while it is the default, or while a rule sends people there.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Description: "The group's name. It is unknown while the group is being replaced: an assignment whose group " +
					"refers to it is replaced with it (removed before the group is retired).",
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"name": schema.StringAttribute{
				Description:   "The group's name: 1 to 63 of a-z 0-9 _ -, starting with a letter or digit.",
				Required:      true,
				PlanModifiers: replace,
			},
			"runtime": schema.StringAttribute{
				Description: "What runs the workers: \"go-plugin\" (bundle or command), \"builtin\" or \"python3\" (command is a WSGI app, MODULE:CALLABLE). Default from the recipe.",
				Optional:    true,
				Computed:    true,
				PlanModifiers: []planmodifier.String{
					stringplanmodifier.UseStateForUnknown(),
					stringplanmodifier.RequiresReplace(),
				},
			},
			"interpreter": schema.StringAttribute{
				Description:   "The Python that runs a \"python3\" group's workers: a virtualenv's bin/python or a name on every agent's PATH. Default /usr/bin/python3.",
				Optional:      true,
				PlanModifiers: replace,
			},
			"bundle": schema.StringAttribute{
				Description:   "The application bundle (sha256:...) from the agents' archive. Exactly one of bundle, command and builtin.",
				Optional:      true,
				PlanModifiers: replace,
			},
			"command": schema.StringAttribute{
				Description:   "A go-plugin worker binary present on every agent. Exactly one of bundle, command and builtin.",
				Optional:      true,
				PlanModifiers: replace,
			},
			"args": schema.ListAttribute{
				Description:   "The command's arguments.",
				ElementType:   types.StringType,
				Optional:      true,
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()},
			},
			"builtin": schema.StringAttribute{
				Description:   "An application compiled into stickyd (e.g. \"demo\"). Exactly one of bundle, command and builtin.",
				Optional:      true,
				PlanModifiers: replace,
			},
			"env": schema.MapAttribute{
				Description:   "Added to the workers' environment.",
				ElementType:   types.StringType,
				Optional:      true,
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
			},
			"workers": schema.Int64Attribute{
				Description:   "Workers per agent, 1 to 64. Default 1.",
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(1),
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"ready_timeout": schema.StringAttribute{
				Description: "How long creating the group waits until the cluster runs at least one of its workers (a group " +
					"materialised as a Nomad job waits for its hosts), so that assignments applied with it move people at once. " +
					"A duration; \"0s\" does not wait. Default \"" + defaultReadyTimeout + "\". Changing it changes nothing in stickyd.",
				Optional: true,
				Computed: true,
				Default:  stringdefault.StaticString(defaultReadyTimeout),
			},
			"memory_max_mb": schema.Int64Attribute{
				Description:   "A worker's hard memory ceiling in MB; 0 (the default) is none.",
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(0),
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
		},
	}
}

func (r *groupResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = configureClient(req, resp)
}

// ValidateConfig checks at plan what the API would refuse at apply.
func (r *groupResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m groupModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if v := m.Name; !v.IsUnknown() && !v.IsNull() && !nameRE.MatchString(v.ValueString()) {
		resp.Diagnostics.AddAttributeError(path.Root("name"), "Invalid group name",
			fmt.Sprintf("Group name %q: use 1-63 of a-z 0-9 _ -, starting with a letter or digit.", v.ValueString()))
	}
	if n, unknown := setCount(m.Bundle, m.Command, m.Builtin); !unknown && n != 1 {
		resp.Diagnostics.AddError("Invalid group recipe", "Give exactly one of \"bundle\", \"command\" and \"builtin\".")
	}
	if v := m.Runtime; !v.IsUnknown() && !v.IsNull() && v.ValueString() != "go-plugin" && v.ValueString() != "builtin" && v.ValueString() != "python3" {
		resp.Diagnostics.AddAttributeError(path.Root("runtime"), "Invalid runtime",
			fmt.Sprintf("Runtime %q: stickyd runs \"go-plugin\", \"builtin\" and \"python3\".", v.ValueString()))
	}
	if v := m.Workers; !v.IsUnknown() && !v.IsNull() && (v.ValueInt64() < 1 || v.ValueInt64() > 64) {
		resp.Diagnostics.AddAttributeError(path.Root("workers"), "Invalid workers", fmt.Sprintf("workers = %d: want 1 to 64.", v.ValueInt64()))
	}
	if v := m.ReadyTimeout; !v.IsUnknown() && !v.IsNull() {
		if d, err := time.ParseDuration(v.ValueString()); err != nil || d < 0 {
			resp.Diagnostics.AddAttributeError(path.Root("ready_timeout"), "Invalid ready_timeout",
				fmt.Sprintf("ready_timeout = %q: want a duration like \"5m\" (\"0s\": do not wait).", v.ValueString()))
		}
	}
	if v := m.MemoryMaxMB; !v.IsUnknown() && !v.IsNull() && v.ValueInt64() < 0 {
		resp.Diagnostics.AddAttributeError(path.Root("memory_max_mb"), "Invalid memory_max_mb", "memory_max_mb must not be negative.")
	}
}

func (r *groupResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan groupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	greq := apiclient.GroupRequest{
		Runtime:     plan.Runtime.ValueString(),
		Interpreter: plan.Interpreter.ValueString(),
		Bundle:      plan.Bundle.ValueString(),
		Command:     plan.Command.ValueString(),
		Builtin:     plan.Builtin.ValueString(),
		Workers:     int(plan.Workers.ValueInt64()),
		MemoryMaxMB: int(plan.MemoryMaxMB.ValueInt64()),
	}
	resp.Diagnostics.Append(plan.Args.ElementsAs(ctx, &greq.Args, false)...)
	resp.Diagnostics.Append(plan.Env.ElementsAs(ctx, &greq.Env, false)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := plan.Name.ValueString()
	e, err := r.client.createGroup(ctx, name, greq)
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Creating stickyd group %q", name), err)
		return
	}
	resp.Diagnostics.Append(plan.fromEntry(ctx, e)...)
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	wait, _ := time.ParseDuration(plan.ReadyTimeout.ValueString())
	if err := r.waitReady(ctx, name, wait); err != nil {
		// Recorded in the state (it exists), reported as an error: the
		// resource is tainted, as a Nomad job whose deployment failed.
		resp.Diagnostics.AddError(fmt.Sprintf("Waiting for stickyd group %q", name), err.Error())
	}
}

// waitReady waits until the cluster runs at least one worker of group,
// polling the API, for at most wait.
func (r *groupResource) waitReady(ctx context.Context, name string, wait time.Duration) error {
	if wait <= 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	for {
		g, err := r.client.group(ctx, name)
		if err == nil && g.Ready > 0 {
			tflog.Info(ctx, "stickyd group ready", map[string]any{"group": name, "workers": len(g.WorkerIDs), "after": time.Since(start).String()})
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the group is created, but no worker of it runs after %s (ready_timeout): "+
				"assignments to it move nobody until one does. Check its hosts (stickyd group status %s; nomad job status stickyd-group-%s)", wait, name, name)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (r *groupResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state groupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.Name.ValueString()
	g, err := r.client.group(ctx, name)
	if isNotFound(err) {
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Reading stickyd group %q", name), err)
		return
	}
	if g.Source != "" && g.Source != "catalog" {
		resp.Diagnostics.AddError(fmt.Sprintf("stickyd group %q is not in the catalog", name),
			fmt.Sprintf("Group %q comes from an agent's configuration file (source %q): edit that file to change it. "+
				"Terraform manages the groups created through the admin API only.", name, g.Source))
		return
	}
	resp.Diagnostics.Append(state.fromEntry(ctx, g.GroupRecipe)...)
	if state.ReadyTimeout.IsNull() {
		state.ReadyTimeout = types.StringValue(defaultReadyTimeout) // imported
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Update changes only ready_timeout, which lives in Terraform's state:
// every attribute of the group itself requires replacement, since the API
// has no call that changes a group.
func (r *groupResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state groupModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.ReadyTimeout = plan.ReadyTimeout
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

func (r *groupResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state groupModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	name := state.Name.ValueString()
	err := r.client.retireGroup(ctx, name)
	if err == nil || isNotFound(err) {
		return
	}
	var ae *apiclient.Error
	if errors.As(err, &ae) && ae.Status == http.StatusConflict {
		resp.Diagnostics.AddError(fmt.Sprintf("Retiring stickyd group %q", name),
			fmt.Sprintf("The admin API refused: %s.\n\nA group is retired only when nobody is placed in it, it is not the default group "+
				"and no rule sends people there: promote another group, or remove the assignments first "+
				"(an assignment whose group is stickyd_group.<name>.id is replaced with the group).", ae.Message))
		return
	}
	addAPIError(&resp.Diagnostics, fmt.Sprintf("Retiring stickyd group %q", name), err)
}

// ImportState imports a catalog group by name.
func (r *groupResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !nameRE.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import ID", fmt.Sprintf("%q is not a group name; import a stickyd_group by its name.", req.ID))
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
}

// fromEntry writes what the agent stored over m, keeping m's spelling of
// empty values.
func (m *groupModel) fromEntry(ctx context.Context, e apiclient.GroupRecipe) diag.Diagnostics {
	var diags diag.Diagnostics
	m.ID = types.StringValue(e.Name)
	m.Name = types.StringValue(e.Name)
	m.Runtime = types.StringValue(e.Runtime)
	m.Interpreter = stringValue(m.Interpreter, e.Interpreter)
	m.Bundle = stringValue(m.Bundle, e.Bundle)
	m.Command = stringValue(m.Command, e.Command)
	m.Builtin = stringValue(m.Builtin, e.Builtin)
	var d diag.Diagnostics
	m.Args, d = listValue(ctx, m.Args, e.Args)
	diags.Append(d...)
	m.Env, d = mapValue(ctx, m.Env, e.Env)
	diags.Append(d...)
	m.Workers = types.Int64Value(int64(e.Workers))
	m.MemoryMaxMB = types.Int64Value(int64(e.MemoryMaxMB))
	return diags
}

// addAPIError adds an error diagnostic showing what the API said.
func addAPIError(diags *diag.Diagnostics, summary string, err error) {
	var ae *apiclient.Error
	if errors.As(err, &ae) {
		diags.AddError(summary, fmt.Sprintf("The admin API answered %d: %s", ae.Status, ae.Message))
		return
	}
	diags.AddError(summary, err.Error())
}
