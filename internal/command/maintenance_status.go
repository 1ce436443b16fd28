package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// MaintenanceStatusCommand lists the backends in maintenance.
type MaintenanceStatusCommand struct{ Meta }

func (c *MaintenanceStatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd maintenance status [options]

  Lists the backends in maintenance now: why, since when and for how long,
  how long a request waits at most, how many requests wait on each now (as
  of the workers' last probes) and how many gave up waiting since the agents
  started. SOURCE says where the window lives: "raft" (the agents'
  replicated maps) or "consul" (a Consul KV key, when the agents have a
  consul block; "stickyd maintenance start" writes it too).

Options:

  -json              Print the API's JSON instead of a table.
` + apiOptionsHelp)
}

func (c *MaintenanceStatusCommand) Synopsis() string { return "List the backends in maintenance" }

func (c *MaintenanceStatusCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("maintenance status")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		windows, err := api.MaintenanceWindows(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("listing maintenance windows: %w", err))
		}
		if len(windows) == 0 {
			c.UI.Output("No backend is in maintenance.")
			return 0
		}
		now := time.Now()
		// The API's order (by backend) is kept.
		rows := make([][]string, len(windows))
		for i, w := range windows {
			since, age := "-", "-"
			if !w.Since.IsZero() {
				since, age = w.Since.Local().Format(time.RFC3339), formatAge(w.Since, now)
			}
			rows[i] = []string{w.Backend, orDash(w.Reason), since, age, orDash(w.MaxWait),
				strconv.FormatInt(w.Waiting, 10), strconv.FormatUint(w.TimedOut, 10), orDash(w.Source)}
		}
		c.UI.Output(formatTable([]string{"BACKEND", "REASON", "SINCE", "AGE", "MAX-WAIT", "WAITING", "TIMED-OUT", "SOURCE"}, rows))
		return 0
	})
}
