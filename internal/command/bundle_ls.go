package command

import (
	"encoding/json"
	"fmt"
	"strings"
)

// BundleLsCommand lists the bundles of the archive.
type BundleLsCommand struct{ Meta }

func (c *BundleLsCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle ls [options]

  Lists the bundles of the archive: digest, name, version, runtime, size.
  The descriptions are read from each bundle's manifest, not verified (use
  stickyd bundle verify).

Options:

  -json              Print JSON.
` + archiveOptionsHelp)
}

func (c *BundleLsCommand) Synopsis() string { return "List the archive's bundles" }

func (c *BundleLsCommand) Run(args []string) int {
	var ao archiveOptions
	var asJSON bool
	fs := c.plainFlagSet("bundle ls")
	ao.flags(fs)
	fs.BoolVar(&asJSON, "json", false, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	ar, err := ao.open(true)
	if err != nil {
		return c.fail(err)
	}
	ctx, stop := apiContext()
	defer stop()
	entries, err := ar.List(ctx)
	if err != nil {
		return c.fail(fmt.Errorf("listing %s: %w", ao.location, err))
	}
	if asJSON {
		b, _ := json.Marshal(entries)
		c.printJSON(b)
		return 0
	}
	if len(entries) == 0 {
		c.UI.Output("No bundles")
		return 0
	}
	rows := make([][]string, 0, len(entries))
	for _, e := range entries {
		if e.Problem != "" {
			rows = append(rows, []string{e.Digest, "?", "?", "?", formatBytes(int(e.Size))})
			continue
		}
		rows = append(rows, []string{e.Digest, e.Name, e.Version, e.Runtime, formatBytes(int(e.Size))})
	}
	c.UI.Output(formatTable([]string{"DIGEST", "NAME", "VERSION", "RUNTIME", "SIZE"}, rows))
	return 0
}
