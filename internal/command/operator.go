package command

import (
	"strings"
)

// OperatorCommand is the parent of the operator subcommands, Consul's
// "operator"; alone it prints their list.
type OperatorCommand struct{ Meta }

func (c *OperatorCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator <subcommand> [options] [args]

  Tools for the operators of a stickyd cluster, named as in Consul and
  Nomad. Every subcommand takes -address and -token (defaults
  $STICKYD_ADDR and $STICKYD_TOKEN).

  List the raft peers:

      $ stickyd operator raft list-peers

  Save the maps as a raft snapshot (a backup; its size is the maps'):

      $ stickyd operator snapshot save backup.snap

  List or rotate the cookie key ring (ids only, never keys):

      $ stickyd operator keyring list
      $ stickyd operator keyring rotate

  Take a Nomad deployment apart (group jobs, Consul keys, the servers):

      $ stickyd operator teardown -yes

  Run "stickyd operator <subcommand> -help" for the options of each.
`)
}

func (c *OperatorCommand) Synopsis() string { return "Tools for cluster operators" }

func (c *OperatorCommand) Run(args []string) int { return c.parent("operator", args) }
