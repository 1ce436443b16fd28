package command

import (
	"context"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupPromoteCommand makes a group the default and moves everyone over.
type GroupPromoteCommand struct{ Meta }

func (c *GroupPromoteCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group promote [options] NEW

  Makes NEW the default group and moves everyone who belongs to the default
  (everyone no assignment rule sends elsewhere) over to it, hot: each person
  keeps their session, and pages whose state the new build reads keep it.
  Newcomers land on NEW at once. Each move is printed as it happens, then a
  summary; the command exits 1 if any move failed.

  The promotion runs on the agent: interrupting this command (Ctrl-C) stops
  following it, not the promotion. "stickyd group rollback" moves people
  back to the previous default.

Options:

  -from=OLD          Move only the people in group OLD (default: everyone
                     who belongs to the default group).
  -parallel=N        Moves at a time, 1 to 256. Default 8.
  -detach            Return at once with the job's id instead of following.
` + apiOptionsHelp)
}

func (c *GroupPromoteCommand) Synopsis() string {
	return "Make a group the default and move everyone over"
}

func (c *GroupPromoteCommand) Run(args []string) int {
	var from string
	var parallel int
	var detach bool
	fs, opts := c.apiFlagSet("group promote")
	fs.StringVar(&from, "from", "", "")
	fs.IntVar(&parallel, "parallel", 8, "")
	fs.BoolVar(&detach, "detach", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	if c.badParallel(parallel) {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		return c.startJob(ctx, api, "promoting "+pos[0], detach, func() (client.Job, error) {
			return api.PromoteGroup(ctx, pos[0], from, parallel)
		})
	})
}

// GroupRollbackCommand returns to the previous default group.
type GroupRollbackCommand struct{ Meta }

func (c *GroupRollbackCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group rollback [options]

  Makes the previous default group the default again and moves back
  everyone the last promotion moved: the same road as a promotion, the other
  way. Each move is printed, then a summary; exit 1 if any move failed.

Options:

  -parallel=N        Moves at a time, 1 to 256. Default 8.
  -detach            Return at once with the job's id instead of following.
` + apiOptionsHelp)
}

func (c *GroupRollbackCommand) Synopsis() string {
	return "Move everyone back to the previous default group"
}

func (c *GroupRollbackCommand) Run(args []string) int {
	var parallel int
	var detach bool
	fs, opts := c.apiFlagSet("group rollback")
	fs.IntVar(&parallel, "parallel", 8, "")
	fs.BoolVar(&detach, "detach", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if c.badParallel(parallel) {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		return c.startJob(ctx, api, "rolling back", detach, func() (client.Job, error) {
			return api.Rollback(ctx, parallel)
		})
	})
}
