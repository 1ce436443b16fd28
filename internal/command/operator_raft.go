package command

import (
	"strings"

	"github.com/hashicorp/cli"
)

// OperatorRaftCommand is the parent of the raft tools; alone it prints
// their list.
type OperatorRaftCommand struct{ Meta }

func (c *OperatorRaftCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator raft <subcommand> [options] [args]

  Looks at the raft cluster that holds the placement maps. Every
  subcommand takes -address and -token (defaults $STICKYD_ADDR and
  $STICKYD_TOKEN).

  List the raft peers:

      $ stickyd operator raft list-peers

  Run "stickyd operator raft <subcommand> -help" for the options of each.
`)
}

func (c *OperatorRaftCommand) Synopsis() string { return "Look at the raft cluster" }

func (c *OperatorRaftCommand) Run(args []string) int { return cli.RunResultHelp }
