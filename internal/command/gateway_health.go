package command

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GatewayHealthCommand shows each model's slots and its deployments'
// health.
type GatewayHealthCommand struct{ Meta }

func (c *GatewayHealthCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd gateway health [options]

  Shows, per model, its slots (calls running of its concurrency limit,
  calls queued of its queue bound) and the health of its deployments, as
  the leader sees them: it runs every call, and a follower asks it.

  A deployment is degraded, and skipped until a probe finds it answering
  again, when too many of its calls fail in the health window (the last
  minute), after consecutive timeouts, or when its account's spend limit or
  quota is reached. REQUESTS and FAILURES count its calls in the window.
  Deployments are listed by name, not in the order they are tried.

Options:

  -json              Print the API's JSON instead of tables.
` + apiOptionsHelp)
}

func (c *GatewayHealthCommand) Synopsis() string {
	return "Show the gateway's slots and deployments' health"
}

func (c *GatewayHealthCommand) Run(args []string) int {
	var asJSON bool
	fs, opts := c.apiFlagSet("gateway health")
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		var body []byte
		models, err := api.GatewayHealth(ctx, client.KeepBody(&body))
		if asJSON && answered(err) {
			c.printJSON(body)
			return 0
		}
		if err != nil {
			return c.fail(gatewayError("reading the gateway's health", err))
		}
		c.UI.Output(healthReport(models))
		return 0
	})
}

// healthReport writes the models for people, sorted by name: a line of
// slots, then a table of deployments.
func healthReport(models map[string]client.ModelHealth) string {
	if len(models) == 0 {
		return "The gateway has no models."
	}
	parts := make([]string, 0, len(models))
	for _, name := range slices.Sorted(maps.Keys(models)) {
		m := models[name]
		s := m.Slots
		part := fmt.Sprintf("Model %s: %d/%d running, %d/%d queued\n", name, s.InFlight, s.Capacity, s.Queued, s.QueueMax)
		if len(m.Deployments) == 0 {
			parts = append(parts, part+"No deployments")
			continue
		}
		var rows [][]string
		for _, d := range slices.Sorted(maps.Keys(m.Deployments)) {
			h := m.Deployments[d]
			rows = append(rows, []string{d, healthText(h), strconv.Itoa(h.Requests), strconv.Itoa(h.Failures)})
		}
		parts = append(parts, part+formatTable([]string{"DEPLOYMENT", "HEALTH", "REQUESTS", "FAILURES"}, rows))
	}
	return strings.Join(parts, "\n\n")
}

// healthText is "ok", or "degraded since TIME (REASON)" without what the
// API left out.
func healthText(h client.DeploymentHealth) string {
	if !h.Degraded {
		return "ok"
	}
	s := "degraded"
	if !h.Since.IsZero() {
		s += " since " + h.Since.Local().Format(time.RFC3339)
	}
	if h.Reason != "" {
		s += " (" + h.Reason + ")"
	}
	return s
}
