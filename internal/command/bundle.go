package command

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundleCommand is the parent of the bundle subcommands; alone it prints
// their list.
type BundleCommand struct{ Meta }

func (c *BundleCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle <subcommand> [options] [args]

  Packs, stores, checks and lists application bundles: immutable,
  content-addressed archives of one exact build, with a manifest recording
  where every piece came from (repository and commit) and how it runs. A
  group runs a bundle; agents only ever read the archive. See
  docs/bundles.md.

  Pack a build and push it to the archive:

      $ stickyd bundle pack -dir out -name app -version 1.4.0 -entry bin/app \
          -source https://git.example.com/acme/app.git@<commit> -o app.tar.gz
      $ stickyd bundle push -archive /srv/bundles app.tar.gz

  Run "stickyd bundle <subcommand> -help" for the options of each.
`)
}

func (c *BundleCommand) Synopsis() string { return "Pack, push, verify and list application bundles" }

func (c *BundleCommand) Run(args []string) int { return c.parent("bundle", args) }

// archiveOptions are the flags naming the bundle archive.
type archiveOptions struct {
	location, token string
}

const archiveOptionsHelp = `
Archive options:

  -archive=LOCATION  The bundle archive: a directory, a file:// URL or an
                     http(s):// URL (stickyd bundle serve). Default
                     $STICKYD_BUNDLE_ARCHIVE.
  -archive-token=T   The token an HTTP archive wants for uploads. Default
                     $STICKYD_BUNDLE_TOKEN.
`

func (o *archiveOptions) flags(fs *flag.FlagSet) {
	fs.StringVar(&o.location, "archive", os.Getenv("STICKYD_BUNDLE_ARCHIVE"), "")
	fs.StringVar(&o.token, "archive-token", os.Getenv("STICKYD_BUNDLE_TOKEN"), "")
}

func (o *archiveOptions) open(readOnly bool) (bundle.Archive, error) {
	if o.location == "" {
		return nil, fmt.Errorf("no bundle archive: pass -archive or set STICKYD_BUNDLE_ARCHIVE")
	}
	return bundle.OpenArchive(o.location, bundle.ArchiveOptions{ReadOnly: readOnly, Token: o.token})
}

// plainFlagSet is a flag set for a command that does not call the admin
// API. Parse it with parseArgs, which reports errors.
func (m *Meta) plainFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}
