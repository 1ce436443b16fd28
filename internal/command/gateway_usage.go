package command

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GatewayUsageCommand shows what the gateway's calls cost.
type GatewayUsageCommand struct{ Meta }

// topSessions is how many sessions the table shows; -json has them all.
const topSessions = 20

func (c *GatewayUsageCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway usage [options]

  Shows what the AI gateway's calls cost: the total, then per day (newest
  first, in the calendar of the gateway's day_zone), per API key and per
  session (the costliest first, the top 20). The counters are the leader's:
  every finished call is in them. When the leader cannot be asked, the
  agent answers from its copy of the replicated maps, which may lag by a
  moment, and says so.

  Costs are in US dollars, to the micro-dollar, from each deployment's
  price block. IN counts the input tokens read uncached (written to the
  prompt cache included), CACHED those read from the prompt cache, OUT the
  output tokens.

Options:

  -session=NAME      Show this session alone instead of the top 20. The
                     total and the days stay those of every session.
  -days=N            How many days to show, newest first; 0 shows every
                     day. Default 7.
  -json              Print the API's JSON instead (every day, every session
                     or NAME alone; costs in micro-dollars, "micros"). It
                     does not take -days.
` + apiOptionsHelp)
}

func (c *GatewayUsageCommand) Synopsis() string {
	return "Show the gateway's costs per day and session"
}

func (c *GatewayUsageCommand) Run(args []string) int {
	var (
		session string
		days    int
		asJSON  bool
	)
	fs, opts := c.apiFlagSet("gateway usage")
	fs.StringVar(&session, "session", "", "")
	fs.IntVar(&days, "days", 7, "")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if days < 0 {
		c.UI.Error(fmt.Sprintf("-days=%d: want 0 (every day) or more", days))
		return 1
	}
	if asJSON && flagGiven(fs.Visit, "days") {
		c.UI.Error("-days shortens the table of days; -json prints every day")
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		answer, err := api.GatewayUsage(ctx, session, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(gatewayError("reading the gateway's usage", err))
		}
		c.UI.Output(usageReport(answer.GatewayCounters, session, days))
		if answer.Source == "replica" {
			c.UI.Warn("The leader could not be asked: these are this agent's replicated counters, which may lag by a moment.")
		}
		return 0
	})
}

// flagGiven reports whether the flag name was given on the command line
// (visit is the FlagSet's Visit).
func flagGiven(visit func(func(*flag.Flag)), name string) bool {
	given := false
	visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

// usageReport writes the counters for people: the total, the newest days
// (every one when days is 0) and the costliest sessions, or session alone.
func usageReport(c client.GatewayCounters, session string, days int) string {
	if c.Total.Calls == 0 && len(c.Days) == 0 {
		return "The gateway has charged no calls yet."
	}
	var b strings.Builder
	b.WriteString(formatKV([][2]string{
		{"Total cost", formatMicros(c.Total.Micros)},
		{"Total calls", strconv.FormatInt(c.Total.Calls, 10)},
		{"Total tokens", fmt.Sprintf("%d in, %d cached, %d out", tokensIn(c.Total.Usage), c.Total.Usage.CachedInput, c.Total.Usage.Output)},
	}))

	// Days are YYYY-MM-DD: the newest sorts last.
	names := slices.Sorted(maps.Keys(c.Days))
	slices.Reverse(names)
	shown := names
	if days > 0 && len(shown) > days {
		shown = shown[:days]
	}
	scope := ""
	if session != "" {
		scope = "every session, "
	}
	if len(shown) < len(names) {
		fmt.Fprintf(&b, "\n\nDays (%snewest %d of %d)\n", scope, len(shown), len(names))
	} else {
		fmt.Fprintf(&b, "\n\nDays (%snewest first)\n", scope)
	}
	rows := make([][]string, len(shown))
	for i, d := range shown {
		rows[i] = tallyRow(d, c.Days[d])
	}
	b.WriteString(formatTable([]string{"DAY", "COST", "CALLS", "IN", "CACHED", "OUT"}, rows))

	if len(c.Keys) > 0 && session == "" {
		keys := slices.Sorted(maps.Keys(c.Keys))
		b.WriteString("\n\nAPI keys\n")
		rows := make([][]string, len(keys))
		for i, k := range keys {
			rows[i] = tallyRow(k, c.Keys[k])
		}
		b.WriteString(formatTable([]string{"KEY", "COST", "CALLS", "IN", "CACHED", "OUT"}, rows))
	}
	if session != "" {
		t := c.Sessions[session]
		if t.Calls == 0 {
			fmt.Fprintf(&b, "\n\nSession %s has made no calls.", session)
			return b.String()
		}
		fmt.Fprintf(&b, "\n\nSession %s\n", session)
		b.WriteString(formatTable([]string{"SESSION", "COST", "CALLS", "IN", "CACHED", "OUT"}, [][]string{tallyRow(session, t)}))
		return b.String()
	}
	if len(c.Sessions) == 0 {
		return b.String()
	}
	sessions := slices.SortedFunc(maps.Keys(c.Sessions), func(x, y string) int {
		tx, ty := c.Sessions[x], c.Sessions[y]
		return cmp.Or(cmp.Compare(ty.Micros, tx.Micros), cmp.Compare(ty.Calls, tx.Calls), strings.Compare(x, y))
	})
	if len(sessions) > topSessions {
		fmt.Fprintf(&b, "\n\nSessions (top %d of %d, costliest first)\n", topSessions, len(sessions))
		sessions = sessions[:topSessions]
	} else {
		b.WriteString("\n\nSessions (costliest first)\n")
	}
	rows = make([][]string, len(sessions))
	for i, s := range sessions {
		rows[i] = tallyRow(s, c.Sessions[s])
	}
	b.WriteString(formatTable([]string{"SESSION", "COST", "CALLS", "IN", "CACHED", "OUT"}, rows))
	return b.String()
}

// tallyRow is a row of the days' or sessions' table. Calls that named no
// session are counted under "".
func tallyRow(name string, t client.GatewayTally) []string {
	if name == "" {
		name = "(none)"
	}
	return []string{name, formatMicros(t.Micros), strconv.FormatInt(t.Calls, 10),
		strconv.FormatInt(tokensIn(t.Usage), 10), strconv.FormatInt(t.Usage.CachedInput, 10), strconv.FormatInt(t.Usage.Output, 10)}
}

// tokensIn is the input read uncached: the tokens the provider bills at
// its input price, those written to the prompt cache included.
func tokensIn(u client.TokenUsage) int64 { return u.Input + u.CacheWrite }
