package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupStatusCommand shows one group and the jobs that concern it.
type GroupStatusCommand struct{ Meta }

func (c *GroupStatusCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group status [options] NAME

  Shows a group: its recipe, its workers, how many people it holds, and the
  promotions and rollbacks that concern it with their progress.

Options:

  -json              Print the API's JSON.
` + apiOptionsHelp)
}

func (c *GroupStatusCommand) Synopsis() string { return "Show a group and its jobs" }

func (c *GroupStatusCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("group status")
	fs.BoolVar(&asJSON, "json", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		v, err := api.Group(ctx, pos[0], client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("group %s: %w", pos[0], err))
		}
		g := v.Group
		role := ""
		switch {
		case g.Default:
			role = " (default)"
		case g.Previous:
			role = " (previous default: rollback returns here)"
		}
		lines := []string{
			fmt.Sprintf("Name     = %s%s", g.Name, role),
			fmt.Sprintf("Source   = %s", g.Source),
			fmt.Sprintf("Runtime  = %s", orDash(g.Runtime)),
			fmt.Sprintf("Build    = %s", build(g)),
			fmt.Sprintf("Workers  = %s", orDash(strings.Join(g.WorkerIDs, " "))),
			fmt.Sprintf("Users    = %d", g.Users),
		}
		c.UI.Output(strings.Join(lines, "\n"))
		if len(v.Jobs) > 0 {
			rows := make([][]string, 0, len(v.Jobs))
			for _, j := range v.Jobs {
				state := "running"
				if j.Done {
					state = "done"
					if j.Error != "" || j.Failed > 0 {
						state = "failed"
					}
				}
				target := j.Group
				if j.From != "" {
					target = j.From + "→" + orDash(j.Group)
				}
				rows = append(rows, []string{j.ID, j.Kind, target, state, fmt.Sprintf("%d/%d", j.Moved, j.Users), fmt.Sprint(j.Failed),
					j.Started.Local().Format(time.RFC3339)})
			}
			c.UI.Output("\nJobs:\n" + formatTable([]string{"ID", "KIND", "GROUPS", "STATE", "MOVED", "FAILED", "STARTED"}, rows))
		}
		return 0
	})
}
