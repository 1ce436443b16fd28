package command

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// MonitorCommand shows the live population of the pool.
type MonitorCommand struct{ Meta }

func (c *MonitorCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd monitor [options]

  Shows the live population of the whole pool in one reading: every
  worker of every agent (state, group, people, connections, pages, memory,
  CPU, saturation), then every person (where they live, which group, how
  heavy: handler time, frames, state bytes), then governance's latest
  decisions. A worker that does not answer its probes shows up as
  "unreachable" with its last known numbers; it never holds the reading up.
  The same reading is the monitor web page at /_stickyd/monitor/.

Options:

  -json              Print the API's JSON.
  -watch=DURATION    Print a new reading every DURATION (e.g. 2s) until
                     interrupted.
  -people=N          Show the first N people by name (at most 1000), the
                     heaviest first (default 20; 0 shows none). The count
                     of everyone, by state and group, is always shown.
` + apiOptionsHelp)
}

func (c *MonitorCommand) Synopsis() string { return "Show the live population of the pool" }

func (c *MonitorCommand) Run(args []string) int {
	var asJSON bool
	var watch time.Duration
	var people int
	fs, opts := c.apiFlagSet("monitor")
	fs.BoolVar(&asJSON, "json", false, "")
	fs.DurationVar(&watch, "watch", 0, "")
	fs.IntVar(&people, "people", 20, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if watch < 0 || people < 0 || people > client.MaxPageLimit {
		c.UI.Error(fmt.Sprintf("-watch must not be negative and -people must be 0 to %d", client.MaxPageLimit))
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		for {
			// The reading carries a page of people; -people=0 asks for
			// the smallest.
			var body []byte
			v, err := api.Monitor(ctx, max(people, 1), client.KeepBody(&body))
			switch {
			case asJSON && answered(err):
				c.printJSON(body)
			case err != nil:
				if watch > 0 && ctx.Err() != nil {
					return 0
				}
				return c.fail(fmt.Errorf("reading the monitor: %w", err))
			default:
				c.UI.Output(formatView(v, people))
			}
			if watch == 0 {
				return 0
			}
			select {
			case <-ctx.Done():
				return 0
			case <-time.After(watch):
				c.UI.Output("")
			}
		}
	})
}

// formatView words a reading as tables.
func formatView(v client.MonitorView, people int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Reading of %s by %s (leader %s, default group %s)\n", v.At.Local().Format(time.RFC3339), v.Agent, orDash(v.Leader), orDash(v.Default))
	if len(v.Unreachable) > 0 {
		fmt.Fprintf(&b, "Agents not answering (last known numbers shown): %s\n", strings.Join(v.Unreachable, ", "))
	}
	for _, m := range v.Maintenance {
		reason := ""
		if m.Reason != "" {
			reason = " (" + m.Reason + ")"
		}
		fmt.Fprintf(&b, "Backend %s in maintenance since %s%s: %d waiting, %d timed out (max wait %s)\n",
			m.Backend, m.Since.Local().Format("15:04:05"), reason, m.Waiting, m.TimedOut, m.MaxWait)
	}
	rows := make([][]string, 0, len(v.Workers))
	var shared *client.MonitorWorker
	for i, w := range v.Workers {
		state := w.State
		if w.Cordoned {
			state += ",cordoned"
		}
		heap, rss, cpu := formatBytes(int(w.HeapBytes)), formatBytes(int(w.RSSBytes)), fmt.Sprintf("%.1fs", w.CPUSeconds)
		if w.SharedProcess {
			// The agent's process's figures, not this worker's: said once
			// below the table.
			heap, rss, cpu = "shared", "shared", "shared"
			if shared == nil || w.LastProbe.After(shared.LastProbe) {
				shared = &v.Workers[i]
			}
		}
		rows = append(rows, []string{w.ID, w.Group, orDash(w.Runtime), state, strconv.FormatInt(w.Users, 10), strconv.FormatInt(w.Conns, 10),
			strconv.FormatInt(w.Pages, 10), heap, rss, cpu, saturation(w.Saturation)})
	}
	b.WriteString("\n" + formatTable([]string{"WORKER", "GROUP", "RUNTIME", "STATE", "USERS", "CONNS", "PAGES", "HEAP", "RSS", "CPU", "SATURATION"}, rows))
	if shared != nil {
		fmt.Fprintf(&b, "\n\nshared: in-process workers run inside the agent %s, whose process's heap %s, RSS %s and CPU time %.1fs are theirs and the agent's together.",
			orDash(shared.Agent), formatBytes(int(shared.HeapBytes)), formatBytes(int(shared.RSSBytes)), shared.CPUSeconds)
	}
	fmt.Fprintf(&b, "\n\n%s", formatTally(v.Tally))
	if people > 0 && len(v.People) > 0 {
		ps := append([]client.MonitorPerson(nil), v.People...)
		sort.SliceStable(ps, func(i, j int) bool { return ps[i].BusySeconds > ps[j].BusySeconds })
		if len(ps) > people {
			ps = ps[:people]
		}
		rows = rows[:0]
		for _, p := range ps {
			rows = append(rows, []string{p.User, p.Worker, orDash(p.Group), p.State, strconv.Itoa(p.Conns), strconv.FormatInt(p.Pages, 10),
				fmt.Sprintf("%.3fs", p.BusySeconds), strconv.FormatUint(p.Frames, 10), formatBytes(int(p.StateBytes))})
		}
		fmt.Fprintf(&b, "\n\nPeople (the first %d by name of %d, the heaviest first):\n", len(ps), v.Tally.Users)
		b.WriteString(formatTable([]string{"USER", "WORKER", "GROUP", "STATE", "CONNS", "PAGES", "BUSY", "FRAMES", "WRITTEN"}, rows))
	}
	if n := len(v.Events); n > 0 {
		b.WriteString("\n\nGovernance, latest decisions:\n")
		for _, e := range v.Events[max(0, n-5):] {
			fmt.Fprintf(&b, "  %s %s %s\n", e.At.Local().Format("15:04:05"), e.Kind, e.Reason)
		}
	}
	return strings.TrimRight(b.String(), "\n")
}

// formatTally words the people's counts: "People: 1000000 (999000 live,
// 1000 parked); by group: web 600000, db 400000".
func formatTally(t client.UserTally) string {
	line := fmt.Sprintf("People: %d", t.Users)
	var states []string
	for _, s := range []string{client.UserLive, client.UserMoving, client.UserParked} {
		if n := t.State[s]; n > 0 {
			states = append(states, fmt.Sprintf("%d %s", n, s))
		}
	}
	if len(states) > 0 {
		line += " (" + strings.Join(states, ", ") + ")"
	}
	groups := make([]string, 0, len(t.Groups))
	for g := range t.Groups {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool {
		return t.Groups[groups[i]] > t.Groups[groups[j]] || t.Groups[groups[i]] == t.Groups[groups[j]] && groups[i] < groups[j]
	})
	for i, g := range groups {
		groups[i] = fmt.Sprintf("%s %d", g, t.Groups[g])
	}
	if len(groups) > 0 {
		line += "; by group: " + strings.Join(groups, ", ")
	}
	return line
}

// saturation words the saturation per resource: "cpu 12% memory 40%".
func saturation(s map[string]float64) string {
	if len(s) == 0 {
		return "-"
	}
	var parts []string
	for _, r := range []string{"cpu", "memory", "goroutines", "mailbox"} {
		if v, ok := s[r]; ok {
			parts = append(parts, fmt.Sprintf("%s=%.0f%%", r, v*100))
		}
	}
	return strings.Join(parts, ",")
}
