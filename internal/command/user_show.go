package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// UserShowCommand shows one user.
type UserShowCommand struct{ Meta }

func (c *UserShowCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user show [options] USER

  Shows where a user lives: their worker, state, epoch, open connections,
  the worker they are moving to and the parked package they will wake
  from, if any, and what their calls to the AI gateway cost.

Options:

  -json              Print the API's JSON.
` + apiOptionsHelp)
}

func (c *UserShowCommand) Synopsis() string { return "Show one user" }

func (c *UserShowCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("user show")
	fs.BoolVar(&asJSON, "json", false, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	user := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		u, err := api.User(ctx, user, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("showing user %q: %w", user, err))
		}
		kv := [][2]string{
			{"User", u.User},
			{"Worker", orDash(u.Worker)},
			{"State", orDash(u.State)},
		}
		if u.MovingTo != "" {
			kv = append(kv, [2]string{"Moving to", u.MovingTo})
		}
		kv = append(kv, [2]string{"Epoch", strconv.FormatUint(u.Epoch, 10)}, [2]string{"Conns", strconv.Itoa(u.Conns)}, [2]string{"Seen", seenAgo(u.Seen, time.Now())})
		if u.Package != "" {
			kv = append(kv, [2]string{"Package", u.Package})
		}
		if u.GatewayCalls > 0 {
			kv = append(kv, [2]string{"AI gateway cost", fmt.Sprintf("%s in %d calls", formatMicros(u.GatewayMicros), u.GatewayCalls)})
		}
		c.UI.Output(formatKV(kv))
		return 0
	})
}
