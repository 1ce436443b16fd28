package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupListCommand lists the groups, the rules and the recent jobs.
type GroupListCommand struct{ Meta }

func (c *GroupListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group list [options]

  Lists the groups: where each came from (an agent's configuration file or
  the catalog), its runtime and build, its workers and how many people it
  holds; the default group is marked "*", the one a rollback returns to "<".
  Then the assignment rules.

Options:

  -json              Print the API's JSON instead of tables.
` + apiOptionsHelp)
}

func (c *GroupListCommand) Synopsis() string { return "List groups and assignment rules" }

func (c *GroupListCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("group list")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		v, err := api.Groups(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("listing groups: %w", err))
		}
		rows := make([][]string, 0, len(v.Groups))
		for _, g := range v.Groups {
			mark := ""
			switch {
			case g.Default:
				mark = "*"
			case g.Previous:
				mark = "<"
			}
			rows = append(rows, []string{g.Name + mark, g.Source, orDash(g.Runtime), build(g), strconv.Itoa(len(g.WorkerIDs)), strconv.Itoa(g.Users)})
		}
		c.UI.Output(formatTable([]string{"NAME", "SOURCE", "RUNTIME", "BUILD", "WORKERS", "USERS"}, rows))
		if len(v.Rules) > 0 {
			rows = rows[:0]
			for _, r := range v.Rules {
				match := "user=" + r.User
				if r.User == "" {
					match = r.Attr + "=" + r.Value
				}
				rows = append(rows, []string{r.ID, match, r.Group})
			}
			c.UI.Output("\nRules (the first that matches wins):\n" + formatTable([]string{"ID", "MATCH", "GROUP"}, rows))
		}
		return 0
	})
}

// build names what a group runs, shortly.
func build(g client.Group) string {
	switch {
	case g.Bundle != "":
		b := g.Bundle
		if len(b) > 19 {
			b = b[:19] + "…"
		}
		return b
	case g.Command != "":
		return g.Command
	case g.Builtin != "":
		return "builtin:" + g.Builtin
	}
	return "-"
}
