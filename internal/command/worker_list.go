package command

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// WorkerListCommand lists the workers of the agent's pool.
type WorkerListCommand struct{ Meta }

func (c *WorkerListCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd worker list [options]

  Lists the workers of the agent's pool, by group: their state (starting,
  ready, dead, refused, stopped, retired; "cordoned" while they take no
  newcomers), process id, incarnation (how many times the slot was
  launched), when the current process was born, its people and its live
  heap at the last probe. USERS counts the people the maps place on the
  worker, as user list -worker does; HELD those in the worker's memory at its
  last probe: the difference are people parked on it (after a move or a
  drain) who wake there at their next request. An in-process worker's heap
  is the agent's process's, shared with the agent and every other
  in-process worker: it shows as "shared", the process's figure below the
  table. Below the table, how each worker's last
  processes ended, by incarnation (#1, #2, ...; a relaunch keeps how its
  predecessor ended): its exit status or signal, killed for silence (probes
  unanswered), killed for memory, or retired by governance and why; and
  why a slot cannot start now, if it cannot.

Options:

  -json              Print the API's JSON instead of a table (it also has
                     died_at, how_died, ends, launch_error, app and
                     app_version).
` + apiOptionsHelp)
}

func (c *WorkerListCommand) Synopsis() string { return "List workers" }

func (c *WorkerListCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("worker list")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		workers, err := api.Workers(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(fmt.Errorf("listing workers: %w", err))
		}
		if len(workers) == 0 {
			c.UI.Output("No workers")
			return 0
		}
		// The maps' count of each worker's people, which user list
		// counts too: a worker's probe knows only those it holds.
		tally, err := api.Tally(ctx)
		if err != nil {
			return c.fail(fmt.Errorf("listing workers: counting their people: %w", err))
		}
		// The agent's order (by group, then slot) is kept: web-10 stays after
		// web-9.
		rows := make([][]string, len(workers))
		var ends []string
		var notHeld int64
		var shared *client.Worker
		for i, w := range workers {
			pid := "-"
			if w.Pid != 0 {
				pid = strconv.Itoa(w.Pid)
			}
			born := "-"
			if !w.Born.IsZero() {
				born = w.Born.Local().Format(time.RFC3339)
			}
			state := orDash(w.State)
			if w.Cordoned {
				state += ",cordoned"
			}
			if !w.BusySince.IsZero() {
				// Computing in the app, its probes waiting: not mute.
				state += ",busy"
			}
			placed := int64(tally.Workers[w.ID])
			held, heap := "-", "-"
			if !w.LastProbe.IsZero() {
				held = strconv.FormatInt(w.Users, 10)
				notHeld += max(0, placed-w.Users)
				heap = fmt.Sprintf("%.1fMiB", float64(w.HeapBytes)/(1<<20))
				if w.SharedProcess {
					heap = "shared"
					if shared == nil || w.LastProbe.After(shared.LastProbe) {
						shared = &workers[i]
					}
				}
			}
			rows[i] = []string{w.ID, orDash(w.Group), state, pid, strconv.Itoa(w.Incarnation), born, strconv.FormatInt(placed, 10), held, heap}
			ends = append(ends, endsOf(w)...)
		}
		c.UI.Output(formatTable([]string{"ID", "GROUP", "STATE", "PID", "INCARNATION", "BORN", "USERS", "HELD", "HEAP"}, rows))
		if notHeld > 0 {
			c.UI.Output(fmt.Sprintf("\nParked, not held yet: %d (placed on a worker by the maps, they wake there at their next request; "+
				"USERS counts the maps' people, as user list does, HELD those in the worker's memory at its last probe).", notHeld))
		}
		if shared != nil {
			c.UI.Output(fmt.Sprintf("\nHEAP shared: in-process workers run inside the agent, whose process's live heap (%.1fMiB) is theirs and the agent's together.",
				float64(shared.HeapBytes)/(1<<20)))
		}
		if len(ends) > 0 {
			c.UI.Output("\nLast ends:\n" + strings.Join(ends, "\n"))
		}
		return 0
	})
}

// endsOf describes how w's processes ended, oldest first: one line per
// incarnation it remembers ("web-2 #1 at ...: killed for silence: 3 probes
// unanswered; relaunched as #2"), or its last end alone from an agent that
// does not list them, then why it cannot start now, if it cannot.
func endsOf(w client.Worker) []string {
	var out []string
	stamp := func(t time.Time) string { return t.Local().Format(time.RFC3339) }
	for _, e := range w.Ends {
		line := fmt.Sprintf("  %s #%d at %s: %s", w.ID, e.Incarnation, stamp(e.DiedAt), e.How)
		if w.Incarnation > e.Incarnation && w.State != client.WorkerRetired {
			line += fmt.Sprintf("; relaunched as #%d", w.Incarnation)
		}
		out = append(out, line)
	}
	if n := len(w.Ends); w.HowDied != "" && (n == 0 || w.Ends[n-1].How != w.HowDied) {
		out = append(out, fmt.Sprintf("  %s at %s: %s", w.ID, stamp(w.DiedAt), w.HowDied))
	}
	if w.LaunchError != "" && w.LaunchError != w.HowDied {
		out = append(out, fmt.Sprintf("  %s cannot start: %s", w.ID, w.LaunchError))
	}
	return out
}
