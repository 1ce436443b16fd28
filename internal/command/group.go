package command

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// GroupCommand is the parent of the group subcommands; alone it prints their
// list.
type GroupCommand struct{ Meta }

func (c *GroupCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd group <subcommand> [options] [args]

  Manages the groups of workers: each runs one build of the application
  (a bundle) on one runtime. People belong to the default group unless an
  assignment rule sends them elsewhere; promoting a group makes it the
  default and moves everyone over hot, rolling back moves them back.

  Create a group from a bundle, promote it, roll back:

      $ stickyd group create -bundle sha256:3f1c… -workers 3 v2
      $ stickyd group promote v2
      $ stickyd group rollback

  Send one person ahead, or a whole team:

      $ stickyd group assign -user maria canary
      $ stickyd group assign -attr team=qa canary
      $ stickyd group unassign maria-canary

  Run "stickyd group <subcommand> -help" for the options of each.
`)
}

func (c *GroupCommand) Synopsis() string { return "Create, promote, roll back and retire groups" }

func (c *GroupCommand) Run(args []string) int { return c.parent("group", args) }

// followJob prints a job's moves as they happen and its summary; it returns
// the exit code: 1 if a move failed or the job stopped with an error.
// What names the job in messages ("promoting v2").
func (m *Meta) followJob(ctx context.Context, api *client.Client, id, what string) int {
	stream, err := api.FollowJob(ctx, id)
	if err != nil {
		return m.fail(fmt.Errorf("%s: following job %s: %w", what, id, err))
	}
	defer stream.Close()
	return m.readJob(ctx, stream, id, what)
}

func (m *Meta) readJob(ctx context.Context, stream *client.Stream[client.JobProgress], id, what string) int {
	var moved, failed int
	for {
		p, err := stream.Next()
		if err != nil {
			seen := fmt.Sprintf("%d moved and %d failed so far", moved, failed)
			switch {
			case ctx.Err() != nil:
				return m.fail(fmt.Errorf("%s: stopped following (%s); the agent carries on: stickyd group status, or GET /v1/jobs/%s", what, seen, id))
			case errors.Is(err, io.EOF):
				return m.fail(fmt.Errorf("%s: the agent ended the stream before the job finished (%s)", what, seen))
			}
			return m.fail(fmt.Errorf("%s: reading progress (%s): %w", what, seen, err))
		}
		switch {
		case p.Job != nil:
			j := p.Job
			failed = max(failed, j.Failed)
			line := fmt.Sprintf("%s: %d of %d people moved, %d failed", what, j.Moved, j.Users, failed)
			switch {
			case j.Error != "":
				m.UI.Error(fmt.Sprintf("%s stopped: %s; %d of %d people moved, %d failed", what, j.Error, j.Moved, j.Users, failed))
				return 1
			case failed > 0:
				m.UI.Error(line)
				return 1
			}
			m.UI.Output(line)
			return 0
		case p.Move != nil && p.Error != "":
			failed++
			m.UI.Output(fmt.Sprintf("failed %s %s → %s: %s", orDash(p.Move.User), orDash(p.Move.From), orDash(p.Move.To), p.Error))
		case p.Move != nil:
			moved++
			m.UI.Output(moveLine(p.Move))
		}
	}
}

// startJob calls start, a route that starts a job (detached), and then
// follows the job unless detach is set.
func (m *Meta) startJob(ctx context.Context, api *client.Client, what string, detach bool, start func() (client.Job, error)) int {
	j, err := start()
	var de *client.DecodeError
	switch {
	case errors.As(err, &de):
		return m.fail(fmt.Errorf("%s: the agent's answer names no job: %s", what, strings.TrimSpace(string(de.Body))))
	case err != nil:
		return m.fail(fmt.Errorf("%s: %w", what, err))
	}
	if detach {
		// Any server reports it: its state is in raft.
		hint := "stickyd group list"
		if g := cmp.Or(j.Group, j.From); g != "" {
			hint = "stickyd group status " + g
		}
		m.UI.Output(fmt.Sprintf("%s: job %s started (on %s); follow it with: %s", what, j.ID, orDash(j.Agent), hint))
		return 0
	}
	return m.followJob(ctx, api, j.ID, what)
}
