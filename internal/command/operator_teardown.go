package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/api/client"
)

// OperatorTeardownCommand takes a Nomad deployment apart, in order.
type OperatorTeardownCommand struct{ Meta }

func (c *OperatorTeardownCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator teardown -yes [options]

  Takes a Nomad deployment of stickyd apart so that nothing is left: the
  leader records the tear-down in raft (no leader registers a group job or
  writes Consul KV again), stops and purges every group job
  (stickyd-group-*) with its Nomad variable and waits until their hosts
  have stopped, and deletes every key under the Consul prefix (stickyd/);
  then this command stops and purges the servers' own job and waits until
  its allocations have stopped.

  Everyone's sessions end: this is for removing a deployment, not for a
  restart (a restart loses no session: "nomad job run" again, or a rolling
  update). "nomad job stop stickyd" alone leaves the group jobs running.

Options:

  -yes               Confirm: without it nothing is done.
  -job=NAME          The servers' Nomad job. Default "stickyd".
  -keep-servers      Leave the servers' job running.

  The servers' job is stopped with the Nomad API of $NOMAD_ADDR (default
  http://127.0.0.1:4646) and $NOMAD_TOKEN.
` + apiOptionsHelp)
}

func (c *OperatorTeardownCommand) Synopsis() string {
	return "Remove a Nomad deployment: group jobs, Consul keys, servers"
}

func (c *OperatorTeardownCommand) Run(args []string) int {
	var yes, keep bool
	var job string
	fs, opts := c.apiFlagSet("operator teardown")
	fs.BoolVar(&yes, "yes", false, "")
	fs.BoolVar(&keep, "keep-servers", false, "")
	fs.StringVar(&job, "job", "stickyd", "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if !yes {
		c.UI.Error("operator teardown ends every session and removes the deployment: run it again with -yes to confirm")
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		stream, err := api.Teardown(ctx)
		if err != nil {
			return c.fail(fmt.Errorf("tearing down: %w", err))
		}
		defer stream.Close()
		done := false
		for {
			s, err := stream.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return c.fail(fmt.Errorf("tearing down: reading the leader's progress: %w", err))
			}
			switch {
			case s.Error != "":
				return c.fail(fmt.Errorf("tearing down: %s (it can be run again)", s.Error))
			case s.Done:
				done = true
			default:
				c.UI.Output(fmt.Sprintf("%-9s %s", s.Step, s.Detail))
			}
		}
		if !done {
			return c.fail(errors.New("tearing down: the leader's answer was cut short; run it again"))
		}
		if keep {
			c.UI.Output("Group jobs and Consul keys removed; the servers' job " + job + " is left running")
			return 0
		}
		if err := stopNomadJob(ctx, job, func(msg string) { c.UI.Output(msg) }); err != nil {
			return c.fail(fmt.Errorf("stopping the servers' job: %w", err))
		}
		c.UI.Output("Torn down: no group job, no server, no key under the Consul prefix")
		return 0
	})
}

// stopNomadJob stops and purges job with the Nomad API of the environment
// and waits (3 minutes at most) until none of its allocations runs.
func stopNomadJob(ctx context.Context, job string, say func(string)) error {
	nc, err := nomadapi.NewClient(nomadapi.DefaultConfig())
	if err != nil {
		return err
	}
	w := (&nomadapi.WriteOptions{}).WithContext(ctx)
	if _, _, err := nc.Jobs().Deregister(job, true, w); err != nil {
		return fmt.Errorf("nomad job stop -purge %s: %w", job, err)
	}
	say("stopped   " + job + " (purged)")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		q := (&nomadapi.QueryOptions{}).WithContext(ctx)
		allocs, _, err := nc.Allocations().List(q)
		if err != nil {
			return fmt.Errorf("listing allocations: %w", err)
		}
		live := 0
		for _, a := range allocs {
			if a.JobID == job && (a.ClientStatus == "pending" || a.ClientStatus == "running") {
				live++
			}
		}
		if live == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d allocations of %s still running after 3m", live, job)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
