package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// UserForgetCommand forgets a user at once.
type UserForgetCommand struct{ Meta }

func (c *UserForgetCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user forget [options] USER

  Forgets a user at once: their connections and their place in the maps,
  what their worker holds of them (their pages' state and subscriptions)
  and their parked package. Their browsers' next requests start afresh, as
  a new visitor's would. Nothing of them can be brought back.

  A user who is moving is refused (exit 1): forget them again once the move
  has settled.

Options:
` + apiOptionsHelp)
}

func (c *UserForgetCommand) Synopsis() string { return "Forget a user and everything held of them" }

func (c *UserForgetCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("user forget")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	user := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		res, err := api.ForgetUser(ctx, user)
		if err != nil {
			return c.fail(fmt.Errorf("forgetting user %q: %w", user, err))
		}
		c.UI.Output(fmt.Sprintf("forgot %s", res.User))
		kv := [][2]string{
			{"Worker", orDash(res.Worker)},
			{"Conns", strconv.Itoa(res.Conns)},
			{"Package", orDash(res.Package)},
		}
		c.UI.Output(formatKV(kv))
		return 0
	})
}
