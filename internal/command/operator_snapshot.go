package command

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/api/client"
)

// OperatorSnapshotCommand is the snapshot subcommands' parent.
type OperatorSnapshotCommand struct{ Meta }

func (c *OperatorSnapshotCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator snapshot <subcommand> [options] [args]

  Saves the maps (the raft state: people, connections, groups, rules,
  jobs) as a raft snapshot, as the server asked holds them.

      $ stickyd operator snapshot save backup.snap
`)
}

func (c *OperatorSnapshotCommand) Synopsis() string { return "Save the maps as a raft snapshot" }

func (c *OperatorSnapshotCommand) Run(args []string) int { return c.parent("operator snapshot", args) }

// OperatorSnapshotSaveCommand writes a raft snapshot of the maps to a file.
type OperatorSnapshotSaveCommand struct{ Meta }

func (c *OperatorSnapshotSaveCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd operator snapshot save [options] FILE

  Takes a raft snapshot of the maps on the server asked (the latest one,
  if nothing was written since the last) and writes it to FILE (written
  whole, then renamed into place), and prints its size: what a member
  that fell behind receives to catch up.
` + apiOptionsHelp)
}

func (c *OperatorSnapshotSaveCommand) Synopsis() string { return "Save the maps to a file" }

func (c *OperatorSnapshotSaveCommand) Run(args []string) int {
	fs, opts := c.apiFlagSet("operator snapshot save")
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	file := pos[0]
	return c.withAPI(opts, func(ctx context.Context, api *client.Client) int {
		rc, err := api.Snapshot(ctx)
		if err != nil {
			return c.fail(fmt.Errorf("saving a snapshot: %w", err))
		}
		defer rc.Close()
		tmp, err := os.CreateTemp(filepath.Dir(file), ".snapshot-*")
		if err != nil {
			return c.fail(fmt.Errorf("saving a snapshot: %w", err))
		}
		defer os.Remove(tmp.Name())
		n, err := io.Copy(tmp, rc)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), file)
		}
		if err != nil {
			return c.fail(fmt.Errorf("saving a snapshot to %s: %w", file, err))
		}
		c.UI.Output(fmt.Sprintf("Saved the maps to %s (%d bytes)", file, n))
		return 0
	})
}
