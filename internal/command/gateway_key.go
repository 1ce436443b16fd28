package command

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GatewayKeyCommand is the parent of the API key subcommands.
type GatewayKeyCommand struct{ Meta }

func (c *GatewayKeyCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway key <subcommand> [options]

  API keys of the AI gateway, created through the admin API and held in
  the replicated maps as their SHA-256: a key is shown once, when it is
  created. Each has its own budget (per day, per month or over its life),
  limits (calls and tokens per minute, calls at once) and models, and may
  belong to a tenant (stickyd gateway tenant), whose own allowance holds
  too. A change takes effect on every server at once, without a restart.

  The configuration's api_keys still work beside them (the static way, to
  bootstrap): the names of both are one namespace.

      $ stickyd gateway key create -tenant acme -budget 20 -period month -rpm 60 ci-bot
      $ stickyd gateway key list
      $ stickyd gateway key revoke ci-bot

  Run "stickyd gateway key <subcommand> -help" for the options of each.
`)
}

func (c *GatewayKeyCommand) Synopsis() string {
	return "Create, list and revoke the gateway's API keys"
}

func (c *GatewayKeyCommand) Run(args []string) int { return c.parent("gateway key", args) }

// GatewayKeyCreateCommand creates an API key.
type GatewayKeyCreateCommand struct{ Meta }

func (c *GatewayKeyCreateCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway key create [options] NAME

  Creates an API key of the gateway and prints it on stdout, alone: this
  is the only time it is shown (the cluster keeps its hash). Callers send
  it as a bearer token (Authorization: Bearer KEY, or x-api-key: KEY).
  NAME (letters, digits, '.', '_', '-') names the key in the counters; its
  calls' sessions are NAME and NAME/SESSION.

Options:

  -tenant=NAME       The tenant the key belongs to (it must exist).` + allowanceHelp + `
  -json              Print the API's JSON (the key in "secret").
` + apiOptionsHelp)
}

func (c *GatewayKeyCreateCommand) Synopsis() string { return "Create an API key (shown once)" }

func (c *GatewayKeyCreateCommand) Run(args []string) int {
	var (
		tenant string
		al     allowanceFlags
		asJSON bool
	)
	fs, opts := c.apiFlagSet("gateway key create")
	fs.StringVar(&tenant, "tenant", "", "")
	al.register(fs)
	fs.BoolVar(&asJSON, "json", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	budget, period, models, err := al.parsed()
	if err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	req := client.GatewayKeyRequest{Name: pos[0], Tenant: tenant, BudgetMicros: budget, Period: period, RPM: al.rpm, TPM: al.tpm,
		Concurrency: al.concurrency, Models: models}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		k, err := api.CreateGatewayKey(ctx, req, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(gatewayError("creating key "+pos[0], err))
		}
		of := ""
		if k.Key.Tenant != "" {
			of = " of tenant " + k.Key.Tenant
		}
		c.UI.Warn(fmt.Sprintf("Key %s%s created. This is the only time it is shown: store it now.", k.Key.Name, of))
		c.UI.Output(k.Secret)
		return 0
	})
}

// GatewayKeyListCommand lists the API keys.
type GatewayKeyListCommand struct{ Meta }

func (c *GatewayKeyListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway key list [options]

  Lists the API keys created through the admin API, by name: their tenant,
  the last four characters of the key, their budget and period, limits
  (RPM, TPM, CONC: calls at once; "-" is none) and models. The
  configuration's api_keys are not listed.

Options:

  -tenant=NAME       Only the keys of this tenant.
  -json              Print the API's JSON instead.
` + apiOptionsHelp)
}

func (c *GatewayKeyListCommand) Synopsis() string { return "List the gateway's API keys" }

func (c *GatewayKeyListCommand) Run(args []string) int {
	var (
		tenant string
		asJSON bool
	)
	fs, opts := c.apiFlagSet("gateway key list")
	fs.StringVar(&tenant, "tenant", "", "")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		l, err := api.GatewayKeys(ctx, client.KeepBody(&body))
		if asJSON && answered(err) && tenant == "" {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(gatewayError("listing the gateway's keys", err))
		}
		var keys []client.GatewayKey
		for _, k := range l.Keys {
			if tenant == "" || k.Tenant == tenant {
				keys = append(keys, k)
			}
		}
		if asJSON {
			if keys == nil {
				keys = []client.GatewayKey{}
			}
			b, _ := json.Marshal(client.GatewayKeyList{Keys: keys})
			c.printJSON(b)
			return 0
		}
		var rows [][]string
		for _, k := range keys {
			t := k.Tenant
			if t == "" {
				t = "-"
			}
			row := append([]string{k.Name, t, "…" + k.Hint}, allowanceCells(k.BudgetMicros, k.Period, k.RPM, k.TPM, k.Concurrency, k.Models)...)
			rows = append(rows, append(row, formatCreated(k.Created)))
		}
		if len(rows) == 0 {
			if tenant != "" {
				c.UI.Output(fmt.Sprintf("Tenant %s has no API keys.", tenant))
			} else {
				c.UI.Output("No API keys were created (stickyd gateway key create).")
			}
			return 0
		}
		c.UI.Output(formatTable([]string{"NAME", "TENANT", "KEY", "BUDGET", "PERIOD", "RPM", "TPM", "CONC", "MODELS", "CREATED"}, rows))
		return 0
	})
}

// GatewayKeyRevokeCommand revokes an API key.
type GatewayKeyRevokeCommand struct{ Meta }

func (c *GatewayKeyRevokeCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway key revoke [options] NAME

  Revokes an API key created through the admin API: every server refuses
  its calls from then on (401). Its counters stay. A key of the
  configuration's api_keys is removed there instead.
` + apiOptionsHelp)
}

func (c *GatewayKeyRevokeCommand) Synopsis() string { return "Revoke an API key" }

func (c *GatewayKeyRevokeCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("gateway key revoke")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		if err := api.RevokeGatewayKey(ctx, pos[0]); !answered(err) {
			return c.fail(gatewayError("revoking key "+pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Key %s revoked: its calls are refused from now on.", pos[0]))
		return 0
	})
}
