package command

import (
	"strings"
)

// OperatorRaftCommand is the parent of the raft tools; alone it prints
// their list.
type OperatorRaftCommand struct{ Meta }

func (c *OperatorRaftCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator raft <subcommand> [options] [args]

  Looks after the raft cluster that holds the placement maps. Every
  subcommand takes -address and -token (defaults $STICKYD_ADDR and
  $STICKYD_TOKEN).

  List the raft peers:

      $ stickyd operator raft list-peers

  Remove a server that is gone for good, or hand leadership away:

      $ stickyd operator raft remove-peer stickyd-server-2
      $ stickyd operator raft transfer-leader

  Run "stickyd operator raft <subcommand> -help" for the options of each.
`)
}

func (c *OperatorRaftCommand) Synopsis() string { return "Look at the raft cluster" }

func (c *OperatorRaftCommand) Run(args []string) int { return c.parent("operator raft", args) }
