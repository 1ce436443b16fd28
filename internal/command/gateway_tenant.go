package command

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GatewayTenantCommand is the parent of the tenant subcommands.
type GatewayTenantCommand struct{ Meta }

func (c *GatewayTenantCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway tenant <subcommand> [options]

  Tenants of the AI gateway: a team or a customer whose API keys share an
  allowance (a budget per day, per month or over its life, calls and tokens
  per minute, calls at once, models). A call of a tenant's key must fit
  both the key's allowance and the tenant's. Held in the replicated maps:
  a change takes effect on every server at once, without a restart.

      $ stickyd gateway tenant create -budget 500 -period month acme
      $ stickyd gateway tenant set -rpm 600 acme
      $ stickyd gateway tenant list
      $ stickyd gateway tenant delete acme

  Run "stickyd gateway tenant <subcommand> -help" for the options of each.
`)
}

func (c *GatewayTenantCommand) Synopsis() string { return "Manage the gateway's tenants" }

func (c *GatewayTenantCommand) Run(args []string) int { return c.parent("gateway tenant", args) }

// GatewayTenantCreateCommand creates a tenant.
type GatewayTenantCreateCommand struct{ Meta }

func (c *GatewayTenantCreateCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway tenant create [options] NAME

  Creates a tenant (NAME: letters, digits, '.', '_', '-'). Give it keys
  with stickyd gateway key create -tenant NAME.

Options:
` + allowanceHelp + `
` + apiOptionsHelp)
}

func (c *GatewayTenantCreateCommand) Synopsis() string { return "Create a tenant" }

func (c *GatewayTenantCreateCommand) Run(args []string) int {
	var al allowanceFlags
	fs, opts := c.apiFlagSet("gateway tenant create")
	al.register(fs)
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	budget, period, models, err := al.parsed()
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	t := client.GatewayTenant{Name: pos[0], BudgetMicros: budget, Period: period, RPM: al.rpm, TPM: al.tpm, Concurrency: al.concurrency, Models: models}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		if _, err := api.CreateGatewayTenant(ctx, t); !answered(err) {
			return c.fail(gatewayError("creating tenant "+pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Tenant %s created. Give it keys with: stickyd gateway key create -tenant %s NAME", pos[0], pos[0]))
		return 0
	})
}

// GatewayTenantSetCommand changes a tenant's allowance.
type GatewayTenantSetCommand struct{ Meta }

func (c *GatewayTenantSetCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway tenant set [options] NAME

  Changes what the options given set of a tenant's allowance; the rest
  stays. -budget=0 removes its budget, -rpm=0 its RPM, -models= its list
  (every model), and so on.

Options:
` + allowanceHelp + `
` + apiOptionsHelp)
}

func (c *GatewayTenantSetCommand) Synopsis() string {
	return "Change a tenant's budget, limits or models"
}

func (c *GatewayTenantSetCommand) Run(args []string) int {
	var al allowanceFlags
	fs, opts := c.apiFlagSet("gateway tenant set")
	al.register(fs)
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	budget, period, models, err := al.parsed()
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	var p client.GatewayAllowancePatch
	given := false
	fs.Visit(func(f *flag.Flag) {
		given = given || f.Name == "budget" || f.Name == "period" || f.Name == "rpm" || f.Name == "tpm" || f.Name == "concurrency" || f.Name == "models"
		switch f.Name {
		case "budget":
			p.BudgetMicros = &budget
		case "period":
			p.Period = &period
		case "rpm":
			p.RPM = &al.rpm
		case "tpm":
			p.TPM = &al.tpm
		case "concurrency":
			p.Concurrency = &al.concurrency
		case "models":
			if models == nil {
				models = []string{}
			}
			p.Models = &models
		}
	})
	if !given {
		c.UI.Error("nothing to change: give -budget, -period, -rpm, -tpm, -concurrency or -models\n\n" + c.Help())
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		t, err := api.SetGatewayTenant(ctx, pos[0], p)
		if err != nil {
			if !answered(err) {
				return c.fail(gatewayError("changing tenant "+pos[0], err))
			}
			c.UI.Output(fmt.Sprintf("Tenant %s changed.", pos[0]))
			return 0
		}
		cells := allowanceCells(t.BudgetMicros, t.Period, t.RPM, t.TPM, t.Concurrency, t.Models)
		c.UI.Output(fmt.Sprintf("Tenant %s changed: budget %s (%s), rpm %s, tpm %s, concurrency %s, models %s.", t.Name,
			cells[0], cells[1], cells[2], cells[3], cells[4], cells[5]))
		return 0
	})
}

// GatewayTenantListCommand lists the tenants.
type GatewayTenantListCommand struct{ Meta }

func (c *GatewayTenantListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway tenant list [options]

  Lists the tenants, by name: their budget and period, limits (RPM, TPM,
  CONC: calls at once; "-" is none), models, how many keys they have and
  what their keys' calls cost in all (COST, CALLS), from the leader's
  counters.

Options:

  -json              Print the API's JSON instead (each tenant's cost by
                     day, month and model too).
` + apiOptionsHelp)
}

func (c *GatewayTenantListCommand) Synopsis() string {
	return "List the gateway's tenants and their costs"
}

func (c *GatewayTenantListCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("gateway tenant list")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		l, err := api.GatewayTenants(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(gatewayError("listing the gateway's tenants", err))
		}
		if len(l.Tenants) == 0 {
			c.UI.Output("No tenants were created (stickyd gateway tenant create).")
			return 0
		}
		rows := make([][]string, len(l.Tenants))
		for i, t := range l.Tenants {
			row := append([]string{t.Name}, allowanceCells(t.BudgetMicros, t.Period, t.RPM, t.TPM, t.Concurrency, t.Models)...)
			rows[i] = append(row, strconv.Itoa(t.Keys), formatMicros(t.Cost.Total.Micros), strconv.FormatInt(t.Cost.Total.Calls, 10))
		}
		c.UI.Output(formatTable([]string{"NAME", "BUDGET", "PERIOD", "RPM", "TPM", "CONC", "MODELS", "KEYS", "COST", "CALLS"}, rows))
		if l.Source == "replica" {
			c.UI.Warn("The leader could not be asked: the costs are this agent's replicated counters, which may lag by a moment.")
		}
		return 0
	})
}

// GatewayTenantDeleteCommand deletes a tenant.
type GatewayTenantDeleteCommand struct{ Meta }

func (c *GatewayTenantDeleteCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway tenant delete [options] NAME

  Deletes a tenant that has no keys (revoke them first: stickyd gateway
  key revoke). Its counters stay.
` + apiOptionsHelp)
}

func (c *GatewayTenantDeleteCommand) Synopsis() string { return "Delete a tenant without keys" }

func (c *GatewayTenantDeleteCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("gateway tenant delete")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		if err := api.DeleteGatewayTenant(ctx, pos[0]); !answered(err) {
			return c.fail(gatewayError("deleting tenant "+pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Tenant %s deleted.", pos[0]))
		return 0
	})
}
