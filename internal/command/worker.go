package command

import (
	"strings"
)

// WorkerCommand is the parent of the worker subcommands; alone it prints
// their list.
type WorkerCommand struct{ Meta }

func (c *WorkerCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd worker <subcommand> [options] [args]

  Looks at the workers of the agent's pool and drains them, through the
  agent's admin API. Every subcommand takes -address and -token (defaults
  $STICKYD_ADDR and $STICKYD_TOKEN).

  List the workers:

      $ stickyd worker list

  Move everyone off a worker:

      $ stickyd worker drain web-1

  Run "stickyd worker <subcommand> -help" for the options of each.
`)
}

func (c *WorkerCommand) Synopsis() string { return "Look at and drain workers" }

func (c *WorkerCommand) Run(args []string) int { return c.parent("worker", args) }
