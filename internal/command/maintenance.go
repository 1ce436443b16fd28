package command

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// MaintenanceCommand is the parent of the maintenance subcommands; alone it
// prints their list.
type MaintenanceCommand struct{ Meta }

func (c *MaintenanceCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd maintenance <subcommand> [options] [args]

  While a backend (a database, say) is in maintenance, requests that need it
  wait for it, up to the window's max wait, before their handler runs.

  Every subcommand takes -address and -token (defaults $STICKYD_ADDR and
  $STICKYD_TOKEN).

  Start a window, look at it, end it:

      $ stickyd maintenance start -reason "upgrading to 16.4" -max-wait 45s db-a
      $ stickyd maintenance status
      $ stickyd maintenance end db-a

  When the agents have a consul block, the windows are the Consul KV keys
  stickyd/maintenance/BACKEND (under the block's prefix, "stickyd/" by
  default), which these commands write; a script can flip them directly.
  The value is the reason, or {"reason": "...", "max_wait": "45s"}:

      $ consul kv put stickyd/maintenance/db-a "upgrading to 16.4"
      $ consul kv delete stickyd/maintenance/db-a

  Run "stickyd maintenance <subcommand> -help" for the options of each.
`)
}

func (c *MaintenanceCommand) Synopsis() string {
	return "Hold requests while a backend is in maintenance"
}

func (c *MaintenanceCommand) Run(args []string) int { return c.parent("maintenance", args) }

// What the admin API accepts as a backend and a window's max wait
// (PUT /v1/maintenance/{backend}). They are checked here too, so that a
// typo fails before any call.
var backendRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

const (
	defaultMaxWait = 30 * time.Second
	minMaxWait     = time.Second
	maxMaxWait     = time.Hour
)

// badBackend reports (and says) that name cannot be a backend.
func (m *Meta) badBackend(name string) bool {
	if !backendRE.MatchString(name) {
		m.UI.Error(fmt.Sprintf("backend %q: want 1 to 63 of a-z 0-9 _ . -, starting with a letter or digit", name))
		return true
	}
	return false
}

// parseMaxWait reads a window's max wait; it says why when s is not a
// duration from 1s to 1h.
func (m *Meta) parseMaxWait(s string) (time.Duration, bool) {
	d, err := time.ParseDuration(s)
	if err != nil || d < minMaxWait || d > maxMaxWait {
		m.UI.Error(fmt.Sprintf("-max-wait=%q: want a duration from 1s to 1h, such as 30s or 5m", s))
		return 0, false
	}
	return d, true
}

// formatAge writes how long ago t was, coarsely: 42s, 5m, 3h10m, 2d4h.
func formatAge(t, now time.Time) string {
	d := max(now.Sub(t), 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}
