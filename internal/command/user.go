package command

import (
	"strings"
)

// UserCommand is the parent of the user subcommands; alone it prints their
// list.
type UserCommand struct{ Meta }

func (c *UserCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user <subcommand> [options] [args]

  Looks at the people stickyd hosts, moves them between workers and forgets
  them, through
  the agent's admin API. Every subcommand takes -address and -token
  (defaults $STICKYD_ADDR and $STICKYD_TOKEN).

  List the users and where they live:

      $ stickyd user list

  Move a user to another worker:

      $ stickyd user move alice -to web-2

  Forget a user and everything held of them:

      $ stickyd user forget alice

  Run "stickyd user <subcommand> -help" for the options of each.
`)
}

func (c *UserCommand) Synopsis() string { return "Look at, move and forget users" }

func (c *UserCommand) Run(args []string) int { return c.parent("user", args) }
