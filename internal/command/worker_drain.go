package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// WorkerDrainCommand moves everyone off a worker, printing each move as
// the agent makes it.
type WorkerDrainCommand struct{ Meta }

func (c *WorkerDrainCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd worker drain [options] WORKER

  Moves every user off a worker, to the least loaded other ready workers of
  its group (of any group if it is alone). It prints each move as it
  happens, then a summary, and exits 1 if any move failed. The worker keeps
  running; new users can still be placed on it.

  Interrupting (Ctrl-C) stops the drain from starting new moves; the moves
  already made stay made.

Options:

  -parallel=N        How many moves run at a time, 1 to 256. Default 8.
` + apiOptionsHelp)
}

func (c *WorkerDrainCommand) Synopsis() string { return "Move every user off a worker" }

func (c *WorkerDrainCommand) Run(args []string) int {
	var parallel int
	fs, opts := c.apiFlagSet("worker drain")
	fs.IntVar(&parallel, "parallel", 8, "")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	if c.badParallel(parallel) {
		return 1
	}
	worker := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		stream, err := api.DrainWorker(ctx, worker, parallel)
		if err != nil {
			return c.fail(fmt.Errorf("draining %s: %w", worker, err))
		}
		defer stream.Close()
		return c.follow(ctx, worker, stream)
	})
}

// follow prints the drain's progress lines as they come and its summary.
func (c *WorkerDrainCommand) follow(ctx context.Context, worker string, stream *client.Stream[client.DrainProgress]) int {
	var moved, failed int
	for {
		p, err := stream.Next()
		if err != nil {
			seen := fmt.Sprintf("%d moved and %d failed so far", moved, failed)
			switch {
			case ctx.Err() != nil:
				return c.fail(fmt.Errorf("draining %s: interrupted; the agent starts no new moves, and those made stay made (%s)", worker, seen))
			case errors.Is(err, io.EOF):
				return c.fail(fmt.Errorf("draining %s: the agent ended the stream before the drain finished (%s)", worker, seen))
			}
			return c.fail(fmt.Errorf("draining %s: reading progress (%s): %w", worker, seen, err))
		}
		switch {
		case p.Done != nil:
			return c.summary(worker, p, failed)
		case p.Move != nil && p.Error != "":
			failed++
			c.UI.Output(fmt.Sprintf("failed %s %s → %s: %s", orDash(p.Move.User), orDash(p.Move.From), orDash(p.Move.To), p.Error))
		case p.Move != nil:
			moved++
			c.UI.Output(moveLine(p.Move))
		}
	}
}

// moveLine words one move of a drain:
// "moved alice web-1 → web-2 (12 KB, 3 ms)".
func moveLine(r *client.Move) string {
	return fmt.Sprintf("%s %s %s → %s (%s, %s)", outcomeVerb(r.Outcome), orDash(r.User), orDash(r.From), orDash(r.To),
		formatBytes(r.Bytes), formatDuration(r.Duration))
}

// summary prints the drain's last line and returns the exit code: 1 if a
// move failed or the drain stopped early.
func (c *WorkerDrainCommand) summary(worker string, p client.DrainProgress, failed int) int {
	d := p.Done
	if d.Worker != "" {
		worker = d.Worker
	}
	// The agent's counts are the truth; the lines seen only ever add
	// failures it did not count.
	failed = max(failed, d.Failed)
	line := fmt.Sprintf("drained %s: %d of %d users moved, %d failed", worker, d.Moved, d.Users, failed)
	switch {
	case p.Error != "":
		c.UI.Error(fmt.Sprintf("draining %s stopped: %s; %d of %d users moved, %d failed", worker, p.Error, d.Moved, d.Users, failed))
		return 1
	case failed > 0 || d.Moved < d.Users:
		c.UI.Error(line)
		return 1
	}
	c.UI.Output(line)
	return 0
}
