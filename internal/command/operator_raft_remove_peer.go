package command

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// OperatorRaftRemovePeerCommand removes a server that is gone for good
// from the raft configuration.
type OperatorRaftRemovePeerCommand struct{ Meta }

func (c *OperatorRaftRemovePeerCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator raft remove-peer [options] ID

  Removes the peer ID (its raft id, the agent's name: see
  "stickyd operator raft list-peers") from the raft configuration. Use it
  for a server that is gone for good, so that it no longer counts towards
  the quorum. A server that is still running asks to be taken back within
  seconds: stop it first. A replaced Nomad allocation needs no removal:
  the new one takes its predecessor's place by name.

  The leader cannot remove itself: run "stickyd operator raft
  transfer-leader" first.
` + apiOptionsHelp)
}

func (c *OperatorRaftRemovePeerCommand) Synopsis() string { return "Remove a raft peer that is gone" }

func (c *OperatorRaftRemovePeerCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("operator raft remove-peer")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		if err := api.RemovePeer(ctx, pos[0]); err != nil {
			return c.fail(fmt.Errorf("removing raft peer %q: %w", pos[0], err))
		}
		c.UI.Output(fmt.Sprintf("Removed peer %q from the raft configuration", pos[0]))
		return 0
	})
}

// OperatorRaftTransferLeaderCommand asks the leader to hand leadership to
// another voter.
type OperatorRaftTransferLeaderCommand struct{ Meta }

func (c *OperatorRaftTransferLeaderCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator raft transfer-leader [options]

  Asks the raft leader to hand leadership to another voter (the most
  up-to-date one, or the one -id names), and waits until it has: before
  stopping the leader's machine for maintenance, or to remove it from the
  configuration.

Options:

  -id=<raft id>
    The voter to hand leadership to (see "stickyd operator raft
    list-peers"). Default: the most up-to-date other voter.
` + apiOptionsHelp)
}

func (c *OperatorRaftTransferLeaderCommand) Synopsis() string {
	return "Hand raft leadership to another server"
}

func (c *OperatorRaftTransferLeaderCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("operator raft transfer-leader")
	id := fs.String("id", "", "the voter to hand leadership to")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		// The answer is printed as it came: {"from": ..., "leader": ...}.
		var b []byte
		_, err := api.TransferLeader(ctx, *id, client.KeepBody(&b))
		var de *client.DecodeError
		switch {
		case errors.As(err, &de):
			b = de.Body
		case err != nil:
			return c.fail(fmt.Errorf("transferring leadership: %w", err))
		}
		c.UI.Output("Leadership transferred: " + strings.TrimSpace(string(b)))
		return 0
	})
}
