package command

import (
	"context"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// MaintenanceEndCommand takes a backend out of maintenance.
type MaintenanceEndCommand struct{ Meta }

func (c *MaintenanceEndCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd maintenance end [options] BACKEND

  Takes BACKEND out of maintenance: the requests waiting on it run now, and
  new ones no longer wait. It prints how long the window lasted, and exits 1
  if BACKEND was not in maintenance.
` + apiOptionsHelp)
}

func (c *MaintenanceEndCommand) Synopsis() string { return "Take a backend out of maintenance" }

func (c *MaintenanceEndCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("maintenance end")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok || c.badBackend(pos[0]) {
		return 1
	}
	backend := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		e, err := api.EndMaintenance(ctx, backend)
		if err != nil {
			return c.fail(fmt.Errorf("ending maintenance of %s: %w", backend, err))
		}
		if e.Lasted == "" {
			c.UI.Output(fmt.Sprintf("Backend %s is out of maintenance.", backend))
			return 0
		}
		c.UI.Output(fmt.Sprintf("Backend %s is out of maintenance; the window lasted %s.", backend, e.Lasted))
		return 0
	})
}
