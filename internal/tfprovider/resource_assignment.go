package tfprovider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

var (
	_ resource.Resource                   = (*assignmentResource)(nil)
	_ resource.ResourceWithConfigure      = (*assignmentResource)(nil)
	_ resource.ResourceWithImportState    = (*assignmentResource)(nil)
	_ resource.ResourceWithValidateConfig = (*assignmentResource)(nil)
)

// assignmentResource is stickyd_assignment: an assignment rule sending one
// person, or everyone whose login attribute matches, to a group. Creating,
// changing or removing one starts a job moving the people it concerns; the
// provider follows it to its end, as "stickyd group assign" does.
type assignmentResource struct {
	client *client
}

func newAssignmentResource() resource.Resource { return &assignmentResource{} }

// assignmentModel mirrors the rule (apiclient.RuleRequest and its id).
type assignmentModel struct {
	ID    types.String `tfsdk:"id"`
	Group types.String `tfsdk:"group"`
	User  types.String `tfsdk:"user"`
	Attr  types.String `tfsdk:"attr"`
	Value types.String `tfsdk:"value"`
}

func (r *assignmentResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_assignment"
}

func (r *assignmentResource) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "An assignment rule: it sends one person (user), or everyone whose login attribute attr equals value, to a group. " +
			"The first matching rule wins; people no rule matches belong to the default group. " +
			"Applying a change waits until the people it concerns have moved.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				Description:   "The rule's id: 1 to 63 of a-z 0-9 _ -. Changing it replaces the rule.",
				Required:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"group": schema.StringAttribute{
				Description: "The group the rule sends people to. Changing it replaces the rule; " +
					"set it to stickyd_group.<name>.id so that replacing the group replaces the rule too.",
				Required:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"user": schema.StringAttribute{
				Description: "The person to send. Exactly one of user and attr.",
				Optional:    true,
			},
			"attr": schema.StringAttribute{
				Description: "A login attribute (what the application declares at login). Exactly one of user and attr.",
				Optional:    true,
			},
			"value": schema.StringAttribute{
				Description: "The value attr must have; only with attr. Default \"\".",
				Optional:    true,
			},
		},
	}
}

func (r *assignmentResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	r.client = configureClient(req, resp)
}

// ValidateConfig checks at plan what the API would refuse at apply.
func (r *assignmentResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m assignmentModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if v := m.ID; !v.IsUnknown() && !v.IsNull() && !nameRE.MatchString(v.ValueString()) {
		resp.Diagnostics.AddAttributeError(path.Root("id"), "Invalid rule id",
			fmt.Sprintf("Rule id %q: use 1-63 of a-z 0-9 _ -, starting with a letter or digit.", v.ValueString()))
	}
	if n, unknown := setCount(m.User, m.Attr); !unknown && n != 1 {
		resp.Diagnostics.AddError("Invalid assignment", "Give exactly one of \"user\" and \"attr\" (with \"value\").")
	}
	if n, unknown := setCount(m.User); !unknown && n == 1 && !m.Value.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("value"), "Invalid assignment", "\"value\" goes with \"attr\", not with \"user\".")
	}
}

func (r *assignmentResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan assignmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := plan.ID.ValueString()
	// PUT replaces a rule silently; a rule Terraform does not know of is
	// someone else's, so it is reported rather than taken over.
	existing, ok, err := r.client.rule(ctx, id)
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Creating stickyd assignment %q", id), err)
		return
	}
	if ok {
		resp.Diagnostics.AddError(fmt.Sprintf("Creating stickyd assignment %q", id),
			fmt.Sprintf("Rule %q exists (it sends %s to %s): import it with terraform import, or choose another id.", id, ruleMatch(existing), existing.Group))
		return
	}
	r.put(ctx, plan, &resp.Diagnostics, "Creating")
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

func (r *assignmentResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state assignmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := state.ID.ValueString()
	rule, ok, err := r.client.rule(ctx, id)
	if err != nil {
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Reading stickyd assignment %q", id), err)
		return
	}
	if !ok {
		resp.State.RemoveResource(ctx)
		return
	}
	state.fromRule(rule)
	resp.Diagnostics.Append(resp.State.Set(ctx, state)...)
}

// Update changes the match in place (PUT replaces a rule by id) and follows
// the moves.
func (r *assignmentResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan assignmentModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.put(ctx, plan, &resp.Diagnostics, "Updating")
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, plan)...)
}

// put stores the rule and follows its job. Moves that fail are a warning,
// not an error: the rule is stored (so is the state), and people it could
// not move stay where they are until the next rule change moves everyone
// who is misplaced.
func (r *assignmentResource) put(ctx context.Context, plan assignmentModel, diags *diag.Diagnostics, verb string) {
	id := plan.ID.ValueString()
	req := apiclient.RuleRequest{Group: plan.Group.ValueString(), User: plan.User.ValueString(), Attr: plan.Attr.ValueString(), Value: plan.Value.ValueString()}
	out, err := r.client.putRule(ctx, id, req)
	if err != nil && out.Job.ID == "" {
		addAPIError(diags, fmt.Sprintf("%s stickyd assignment %q", verb, id), err)
		return
	}
	if err != nil {
		// The rule is stored; only following its job failed.
		diags.AddWarning(fmt.Sprintf("Following the moves of stickyd assignment %q", id), err.Error())
		return
	}
	if !out.ok() {
		diags.AddWarning(fmt.Sprintf("Some people were not moved by stickyd assignment %q", id),
			"The rule is stored, but not everyone it concerns was moved; they stay in their current group until the next rule change moves them.\n\n"+out.summary())
	}
}

func (r *assignmentResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state assignmentModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	id := state.ID.ValueString()
	out, err := r.client.deleteRule(ctx, id)
	switch {
	case err != nil && out.Job.ID == "" && isNotFound(err):
		return // already gone
	case err != nil && out.Job.ID == "":
		addAPIError(&resp.Diagnostics, fmt.Sprintf("Removing stickyd assignment %q", id), err)
	case err != nil:
		resp.Diagnostics.AddWarning(fmt.Sprintf("Following the moves of removing stickyd assignment %q", id), err.Error())
	case !out.ok():
		// The group cannot be retired while someone is still placed
		// there; that refusal, if it comes, names the count.
		resp.Diagnostics.AddWarning(fmt.Sprintf("Some people were not moved back when removing stickyd assignment %q", id),
			"The rule is removed, but not everyone it sent away was moved back.\n\n"+out.summary())
	}
}

// ImportState imports a rule by id.
func (r *assignmentResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

// fromRule writes the rule over m, keeping m's spelling of empty values.
func (m *assignmentModel) fromRule(rule apiclient.Rule) {
	m.ID = types.StringValue(rule.ID)
	m.Group = types.StringValue(rule.Group)
	m.User = stringValue(m.User, rule.User)
	m.Attr = stringValue(m.Attr, rule.Attr)
	m.Value = stringValue(m.Value, rule.Value)
}

// ruleMatch says whom a rule sends.
func ruleMatch(r apiclient.Rule) string {
	if r.User != "" {
		return "user " + r.User
	}
	return fmt.Sprintf("everyone with %s=%s", r.Attr, r.Value)
}
