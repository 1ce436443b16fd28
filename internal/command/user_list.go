package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stickyd/stickyd/internal/api/client"
)

// UserListCommand lists the users in the placement maps, a page at a time.
type UserListCommand struct{ Meta }

func (c *UserListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd user list [options]

  Lists the people the agent knows, by name, a page at a time: the worker
  each lives on, their state (live, moving, parked), their epoch, their
  open connections and when a front last saw them (to within a tenth of
  lifecycle.forget_after; "-" before the first record).

  Without -all it prints one page and, when more people follow, says on
  stderr how to ask for the next one. With -all it asks for every page in
  turn and prints them as one table.

Options:

  -worker=ID         Only the people homed on this worker.
  -group=NAME        Only the people homed on a worker of this group.
  -state=STATE       Only the people in this state: live, moving or parked.
  -limit=N           People per page, 1 to 1000 (default 100).
  -cursor=CURSOR     Start after the page that gave this cursor.
  -all               Print every page, not only the first.
  -json              Print the API's JSON: each page's answer, one after
                     the other ({"users": [...], "next": CURSOR}).
` + apiOptionsHelp)
}

func (c *UserListCommand) Synopsis() string { return "List users and their workers" }

func (c *UserListCommand) Run(args []string) int {
	var (
		asJSON, all                  bool
		worker, group, state, cursor string
		limit                        int
	)
	fs, opts := c.apiFlagSet("user list")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.BoolVar(&all, "all", false, "")
	fs.StringVar(&worker, "worker", "", "")
	fs.StringVar(&group, "group", "", "")
	fs.StringVar(&state, "state", "", "")
	fs.StringVar(&cursor, "cursor", "", "")
	fs.IntVar(&limit, "limit", client.DefaultPageLimit, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if limit < 1 || limit > client.MaxPageLimit {
		c.UI.Error(fmt.Sprintf("-limit=%d: want 1 to %d", limit, client.MaxPageLimit))
		return 1
	}
	query := client.UsersQuery{Worker: worker, Group: group, State: state, Cursor: cursor, Limit: limit}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		table := &streamTable{header: []string{"USER", "WORKER", "STATE", "EPOCH", "CONNS", "SEEN"}}
		listed := 0
		for {
			var body []byte
			page, err := api.Users(ctx, query, client.KeepBody(&body))
			if err != nil {
				return c.fail(fmt.Errorf("listing users: %w", err))
			}
			if asJSON {
				c.printJSON(body)
			} else if len(page.Users) > 0 {
				now := time.Now()
				rows := make([][]string, len(page.Users))
				for i, u := range page.Users {
					rows[i] = []string{u.User, orDash(u.Worker), userState(u), strconv.FormatUint(u.Epoch, 10), strconv.Itoa(u.Conns), seenAgo(u.Seen, now)}
				}
				c.UI.Output(table.format(rows))
			}
			listed += len(page.Users)
			if page.Next == "" {
				break
			}
			if !all {
				c.UI.Warn(fmt.Sprintf("More people follow: add -cursor=%s for the next page, or -all for every page.", page.Next))
				break
			}
			query.Cursor = page.Next
		}
		if listed == 0 && !asJSON {
			if worker != "" || group != "" || state != "" {
				c.UI.Output("Nobody matches")
			} else {
				c.UI.Output("No users")
			}
		}
		return 0
	})
}

// streamTable formats a table that arrives a page at a time: the header
// before the first page, each column as wide as the widest cell seen so
// far, three spaces apart, so that columns only ever widen.
type streamTable struct {
	header  []string
	widths  []int
	started bool
}

func (t *streamTable) format(rows [][]string) string {
	if t.widths == nil {
		t.widths = make([]int, len(t.header))
		for i, h := range t.header {
			t.widths[i] = utf8.RuneCountInString(h)
		}
	}
	for _, r := range rows {
		for i, cell := range r {
			t.widths[i] = max(t.widths[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	line := func(r []string) {
		for i, cell := range r {
			if i == len(r)-1 {
				b.WriteString(cell)
				break
			}
			b.WriteString(cell)
			b.WriteString(strings.Repeat(" ", t.widths[i]-utf8.RuneCountInString(cell)+3))
		}
		b.WriteString("\n")
	}
	if !t.started {
		line(t.header)
		t.started = true
	}
	for _, r := range rows {
		line(r)
	}
	return strings.TrimRight(b.String(), "\n")
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
func userState(u client.User) string {
	if u.MovingTo != "" {
		return fmt.Sprintf("%s → %s", orDash(u.State), u.MovingTo)
	}
	return orDash(u.State)
}
