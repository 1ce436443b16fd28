package command

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// MaintenanceStartCommand puts a backend in maintenance.
type MaintenanceStartCommand struct{ Meta }

func (c *MaintenanceStartCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd maintenance start [options] BACKEND

  Puts BACKEND in maintenance: from now on, every request that needs it
  waits (at most the max wait) before its handler runs, until
  "stickyd maintenance end BACKEND". Starting a window on a backend already
  in maintenance replaces its reason and max wait and keeps its start time.

  BACKEND is 1 to 63 of a-z 0-9 _ . -, starting with a letter or digit, as
  the application names it.

Options:

  -reason=TEXT       Why, for whoever looks at "stickyd maintenance status".
  -max-wait=DURATION How long a request waits for the backend before it
                     gives up, 1s to 1h. Default 30s.
` + apiOptionsHelp)
}

func (c *MaintenanceStartCommand) Synopsis() string { return "Put a backend in maintenance" }

func (c *MaintenanceStartCommand) Run(args []string) int {
	var reason, maxWaitText string
	fs, opts := c.apiFlagSet("maintenance start")
	fs.StringVar(&reason, "reason", "", "")
	fs.StringVar(&maxWaitText, "max-wait", defaultMaxWait.String(), "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok || c.badBackend(pos[0]) {
		return 1
	}
	maxWait, ok := c.parseMaxWait(maxWaitText)
	if !ok {
		return 1
	}
	backend := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		req := client.MaintenanceRequest{Reason: reason, MaxWait: maxWait.String()}
		w, err := api.StartMaintenance(ctx, backend, req)
		if err != nil {
			return c.fail(fmt.Errorf("starting maintenance of %s: %w", backend, err))
		}
		backend = cmp.Or(w.Backend, backend)
		since := "-"
		if !w.Since.IsZero() {
			since = w.Since.Local().Format(time.RFC3339)
		}
		c.UI.Output(fmt.Sprintf("Backend %s is in maintenance: requests that need it wait, at most %s each, before their handler runs.", backend, orDash(w.MaxWait)))
		kv := [][2]string{{"Backend", backend}, {"Since", since}, {"Max wait", orDash(w.MaxWait)}}
		if w.Reason != "" {
			kv = append(kv, [2]string{"Reason", w.Reason})
		}
		c.UI.Output(formatKV(kv))
		c.UI.Output("End it with: stickyd maintenance end " + backend)
		return 0
	})
}
