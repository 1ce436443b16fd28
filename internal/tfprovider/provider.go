// Package tfprovider is the Terraform provider "stickyd": it manages the
// catalog's groups (stickyd_group), assignment rules (stickyd_assignment)
// and backends' maintenance windows (stickyd_maintenance) through the admin
// HTTP API, exactly as the CLI's group and maintenance commands do. It
// holds no state of its own and never reaches into an agent except by that
// API; it never manages groups from an agent's configuration file.
package tfprovider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Address is the provider's source address, the one Terraform's
// required_providers and a CLI configuration's dev_overrides name. It is a
// local address: the provider is installed from a directory, not a
// registry.
const Address = "stickyd.local/stickyd/stickyd"

// DefaultAddress is the admin API address when neither the provider block
// nor $STICKYD_ADDR gives one (the agent's default admin.address).
const DefaultAddress = "http://127.0.0.1:4650"

var _ provider.Provider = (*stickydProvider)(nil)

// New returns the provider's constructor, as providerserver.Serve wants it.
func New(version string) func() provider.Provider {
	return func() provider.Provider { return &stickydProvider{version: version} }
}

type stickydProvider struct {
	version string
}

type providerModel struct {
	Address types.String `tfsdk:"address"`
	Token   types.String `tfsdk:"token"`
}

func (p *stickydProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "stickyd"
	resp.Version = p.version
}

func (p *stickydProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		Description: "Manages stickyd groups, assignment rules and maintenance windows through the admin HTTP API.",
		Attributes: map[string]schema.Attribute{
			"address": schema.StringAttribute{
				Description: "The admin API address (http://HOST:PORT). Default $STICKYD_ADDR, else " + DefaultAddress + ".",
				Optional:    true,
			},
			"token": schema.StringAttribute{
				Description: "The admin token, sent as X-Stickyd-Token. Default $STICKYD_TOKEN.",
				Optional:    true,
				Sensitive:   true,
			},
		},
	}
}

func (p *stickydProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg providerModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	for name, v := range map[string]types.String{"address": cfg.Address, "token": cfg.Token} {
		if v.IsUnknown() {
			resp.Diagnostics.AddAttributeError(path.Root(name), "Unknown stickyd "+name,
				"The provider's "+name+" is not known until apply; give it a value known at plan time, or leave it out and set STICKYD_"+envSuffix(name)+".")
		}
	}
	if resp.Diagnostics.HasError() {
		return
	}
	address := cfg.Address.ValueString()
	if address == "" {
		address = os.Getenv("STICKYD_ADDR")
	}
	if address == "" {
		address = DefaultAddress
	}
	token := cfg.Token.ValueString()
	if token == "" {
		token = os.Getenv("STICKYD_TOKEN")
	}
	c, err := newClient(address, token)
	if err != nil {
		resp.Diagnostics.AddError("Configuring the stickyd provider", err.Error())
		return
	}
	resp.ResourceData = c
}

func envSuffix(attr string) string {
	if attr == "address" {
		return "ADDR"
	}
	return "TOKEN"
}

func (p *stickydProvider) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{newGroupResource, newAssignmentResource, newMaintenanceResource}
}

func (p *stickydProvider) DataSources(context.Context) []func() datasource.DataSource {
	return nil
}

// configureClient takes the provider's client from a resource's Configure
// request; it is nil before the provider is configured (validation).
func configureClient(req resource.ConfigureRequest, resp *resource.ConfigureResponse) *client {
	if req.ProviderData == nil {
		return nil
	}
	c, ok := req.ProviderData.(*client)
	if !ok {
		resp.Diagnostics.AddError("Unexpected provider data", "The stickyd provider passed its resources something other than its API client; this is a bug in the provider.")
		return nil
	}
	return c
}
