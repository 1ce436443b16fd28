package command

import (
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GatewayCommand is the parent of the gateway subcommands; alone it prints
// their list.
type GatewayCommand struct{ Meta }

func (c *GatewayCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway <subcommand> [options]

  The AI gateway is one endpoint, on the servers with a gateway block, for
  many model providers: it holds each model to its concurrency limit across
  the cluster, fails over between the model's deployments, and adds the
  cost of every answer to its session, its day and the total.

  These subcommands read it through the admin API. Every one takes -address
  and -token (defaults $STICKYD_ADDR and $STICKYD_TOKEN).

  What the calls cost, in total, per day and per session:

      $ stickyd gateway usage
      $ stickyd gateway usage -session alice -days 30

  Each model's slots and the health of its deployments:

      $ stickyd gateway health

  API keys and tenants, with their budgets, limits and models:

      $ stickyd gateway tenant create -budget 500 -period month acme
      $ stickyd gateway key create -tenant acme -rpm 60 ci-bot

  Run "stickyd gateway <subcommand> -help" for the options of each.
`)
}

func (c *GatewayCommand) Synopsis() string {
	return "Look at the AI gateway's costs and health, manage its keys and tenants"
}

func (c *GatewayCommand) Run(args []string) int { return c.parent("gateway", args) }

// gatewayError wraps an error of a gateway call with what was being done.
// The gateway's routes exist only on agents with a gateway block, so a 404
// says so.
func gatewayError(doing string, err error) error {
	if client.IsNotFound(err) {
		return fmt.Errorf("%s: %w (does the agent's configuration have a gateway block?)", doing, err)
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// formatMicros writes micro-dollars as dollars to the micro-dollar:
// 1234 is "$0.001234". Integer arithmetic keeps it exact.
func formatMicros(m int64) string {
	sign := ""
	u := uint64(m)
	if m < 0 {
		sign, u = "-", uint64(-m)
	}
	return fmt.Sprintf("%s$%d.%06d", sign, u/1e6, u%1e6)
}
