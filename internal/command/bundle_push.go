package command

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundlePushCommand stores a bundle file in the archive.
type BundlePushCommand struct{ Meta }

func (c *BundlePushCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle push [options] FILE

  Stores a bundle file in the archive, under its digest. The bundle is
  verified first (by this command and again by an HTTP archive); pushing a
  bundle the archive already holds is a no-op. It prints the digest.
` + archiveOptionsHelp)
}

func (c *BundlePushCommand) Synopsis() string { return "Store a bundle in the archive" }

func (c *BundlePushCommand) Run(args []string) int {
	var ao archiveOptions
	fs := c.plainFlagSet("bundle push")
	ao.flags(fs)
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	ar, err := ao.open(false)
	if err != nil {
		return c.fail(err)
	}
	digest, m, err := verifyFile(pos[0])
	if err != nil {
		return c.fail(err)
	}
	f, err := os.Open(pos[0])
	if err != nil {
		return c.fail(err)
	}
	defer f.Close()
	ctx, stop := apiContext()
	defer stop()
	if err := ar.Put(ctx, digest, f); err != nil {
		if errors.Is(err, context.Canceled) {
			return c.fail(fmt.Errorf("pushing %s: interrupted", pos[0]))
		}
		return c.fail(fmt.Errorf("pushing %s: %w", pos[0], err))
	}
	c.UI.Output(fmt.Sprintf("Pushed %s %s to %s\n%s", m.Name, m.Version, ao.location, digest))
	return 0
}

// verifyFile digests and verifies a bundle file.
func verifyFile(path string) (string, *bundle.Manifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	digest, err := bundle.DigestOf(f)
	if err != nil {
		return "", nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if _, err := f.Seek(0, 0); err != nil {
		return "", nil, err
	}
	m, err := bundle.Verify(f, digest)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", path, err)
	}
	return digest, m, nil
}
