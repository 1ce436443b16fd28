package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// UserMoveCommand moves one user to a worker or a group.
type UserMoveCommand struct{ Meta }

func (c *UserMoveCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user move [options] USER (-to WORKER | -group GROUP)

  Moves a user to another worker, by the one road every move takes:
  barrier up, freeze, park, reassign; they wake at the destination on their
  next frame. With -group, the agent picks the least loaded ready worker of
  that group.

  It prints where the user went, the size of what was carried and how long
  they were frozen. If the move fails (rolled back, unknown user or
  worker, user busy), it prints the agent's reason and exits 1; a rolled
  back user stays home.

Options:

  -to=WORKER         The worker to move the user to.
  -group=GROUP       The group to move the user to.
` + apiOptionsHelp)
}

func (c *UserMoveCommand) Synopsis() string { return "Move a user to another worker" }

func (c *UserMoveCommand) Run(args []string) int {
	var req client.MoveRequest
	fs, opts := c.apiFlagSet("user move")
	fs.StringVar(&req.To, "to", "", "")
	fs.StringVar(&req.Group, "group", "", "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	if (req.To == "") == (req.Group == "") {
		c.UI.Error("give exactly one of -to WORKER and -group GROUP\n\n" + c.Help())
		return 1
	}
	user := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		dest := req.To
		if dest == "" {
			dest = "group " + req.Group
		}
		res, err := api.MoveUser(ctx, user, req)
		if err != nil {
			return c.fail(fmt.Errorf("moving user %q to %s: %w", user, dest, err))
		}
		c.UI.Output(fmt.Sprintf("%s %s %s → %s", outcomeVerb(res.Outcome), orDash(res.User), orDash(res.From), orDash(res.To)))
		kv := [][2]string{
			{"Epoch", strconv.FormatUint(res.Epoch, 10)},
			{"Bytes", fmt.Sprintf("%s (%d bytes)", formatBytes(res.Bytes), res.Bytes)},
			{"Pages", strconv.Itoa(res.Pages)},
			{"Conns", strconv.Itoa(res.Conns)},
		}
		if res.Package != "" {
			kv = append(kv, [2]string{"Package", res.Package})
		}
		kv = append(kv,
			[2]string{"Freeze", formatDuration(res.Freeze)},
			[2]string{"Total", formatDuration(res.Duration)})
		c.UI.Output(formatKV(kv))
		return 0
	})
}

// outcomeVerb words a move's outcome: "moved", "rolled back", ...
func outcomeVerb(outcome string) string {
	if outcome == "" {
		return client.MoveMoved
	}
	return strings.ReplaceAll(outcome, "_", " ")
}
