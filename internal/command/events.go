package command

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// EventsCommand lists governance's recent decisions, with their reasons.
type EventsCommand struct{ Meta }

func (c *EventsCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd events [options]

  Lists the agent's recent governance events, oldest first: every decision
  (a move off a saturated worker, a start, a replacement, a drain) with its
  reason and numbers, and what became of it (completed, failed, blocked).
  Empty when no group enables governance.

Options:

  -json              Print the API's JSON instead of a table.
` + apiOptionsHelp)
}

func (c *EventsCommand) Synopsis() string { return "List governance decisions and their reasons" }

func (c *EventsCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("events")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		events, err := api.Events(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("listing events: %w", err))
		}
		if len(events) == 0 {
			c.UI.Output("No governance events")
			return 0
		}
		rows := make([][]string, len(events))
		for i, e := range events {
			rows[i] = []string{e.At.Local().Format(time.TimeOnly), e.Kind, orDash(e.Worker), orDash(e.User), orDash(e.To), e.Reason}
		}
		c.UI.Output(formatTable([]string{"TIME", "KIND", "WORKER", "USER", "TO", "REASON"}, rows))
		return 0
	})
}
