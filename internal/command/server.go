package command

import (
	"strings"
)

// ServerCommand is the parent of the server subcommands; alone it prints
// their list.
type ServerCommand struct{ Meta }

func (c *ServerCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd server <subcommand> [options] [args]

  Looks at the stickyd servers: the agents that are members of the raft
  cluster which holds the placement maps. Every subcommand takes -address
  and -token (defaults $STICKYD_ADDR and $STICKYD_TOKEN).

  List the members and which one leads:

      $ stickyd server members

  Run "stickyd server <subcommand> -help" for the options of each.
`)
}

func (c *ServerCommand) Synopsis() string { return "Look at the servers of the cluster" }

func (c *ServerCommand) Run(args []string) int { return c.parent("server", args) }
