package command

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/placement"
)

// UserListCommand lists the users in the placement maps.
type UserListCommand struct{ Meta }

func (c *UserListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user list [options]

  Lists the users the agent knows, sorted by name: the worker each lives
  on, their state (live, moving, parked), their epoch, their open
  connections and when a front last saw them (to within a tenth of
  lifecycle.forget_after; "-" before the first record).

Options:

  -json              Print the API's JSON instead of a table.
` + apiOptionsHelp)
}

func (c *UserListCommand) Synopsis() string { return "List users and their workers" }

func (c *UserListCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("user list")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, client *apiClient) int {
		body, err := client.get(ctx, "/v1/users")
		if err != nil {
			return c.fail(fmt.Errorf("listing users: %w", err))
		}
		if asJSON {
			c.printJSON(body)
			return 0
		}
		var users []placement.UserInfo
		if err := json.Unmarshal(body, &users); err != nil {
			return c.fail(fmt.Errorf("listing users: decoding the answer: %w", err))
		}
		if len(users) == 0 {
			c.UI.Output("No users")
			return 0
		}
		sort.Slice(users, func(i, j int) bool { return users[i].User < users[j].User })
		rows := make([][]string, len(users))
		for i, u := range users {
			rows[i] = []string{u.User, orDash(u.Worker), userState(u), strconv.FormatUint(u.Epoch, 10), strconv.Itoa(u.Conns), seenAgo(u.Seen, time.Now())}
		}
		c.UI.Output(formatTable([]string{"USER", "WORKER", "STATE", "EPOCH", "CONNS", "SEEN"}, rows))
		return 0
	})
}

// seenAgo says how long ago a person was last seen (unix seconds; 0: not
// recorded yet).
func seenAgo(seen int64, now time.Time) string {
	if seen == 0 {
		return "-"
	}
	d := now.Sub(time.Unix(seen, 0))
	if d < time.Second {
		return "just now"
	}
	return d.Truncate(time.Second).String() + " ago"
}

// userState is a user's state, with the destination while they move.
func userState(u placement.UserInfo) string {
	if u.MovingTo != "" {
		return fmt.Sprintf("%s → %s", orDash(u.State), u.MovingTo)
	}
	return orDash(u.State)
}
