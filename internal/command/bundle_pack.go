package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundlePackCommand packs a build output into a bundle.
type BundlePackCommand struct{ Meta }

func (c *BundlePackCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle pack [options] -dir BUILD -name NAME -version V -entry PATH -o FILE

  Packs every file under BUILD into a bundle: a deterministic .tar.gz whose
  manifest records the application's name and version, the entry point and
  its arguments, the runtime, the toolchain that built it and the exact
  origin of the sources, commit by commit (one -source or -git per
  repository). It prints the bundle's digest (sha256:…), its name from now
  on. The same build and manifest always give the same digest.

Options:

  -dir=BUILD         The build output to pack (required).
  -name=NAME         The application's name (required).
  -version=V         The application's version (required).
  -entry=PATH        The entry point inside BUILD, e.g. bin/app (required).
  -arg=A             An argument of the entry point; repeat for more.
  -runtime=R         What runs the entry point. Default go-plugin.
  -source=REPO@COMMIT[:PATH]
                     A repository the build came from, at a full commit
                     id; repeat for each repository.
  -git=DIR           A local git checkout the build came from: its origin
                     and HEAD are recorded. Refused with uncommitted
                     changes unless -allow-dirty.
  -allow-dirty       Record a dirty checkout (marked so in the manifest).
  -toolchain=K=V     A toolchain fact (go, goos and goarch are filled from
                     the entry point's build information when missing).
  -o=FILE            Where to write the bundle (required).
`)
}

func (c *BundlePackCommand) Synopsis() string { return "Pack a build into a bundle" }

func (c *BundlePackCommand) Run(args []string) int {
	var dir, out string
	var sources, gits, toolchain, entryArgs stringList
	var allowDirty bool
	var m bundle.Manifest
	fs := c.plainFlagSet("bundle pack")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&m.Name, "name", "", "")
	fs.StringVar(&m.Version, "version", "", "")
	fs.StringVar(&m.Entry, "entry", "", "")
	fs.Var(&entryArgs, "arg", "")
	fs.StringVar(&m.Runtime, "runtime", bundle.RuntimeGoPlugin, "")
	fs.Var(&sources, "source", "")
	fs.Var(&gits, "git", "")
	fs.BoolVar(&allowDirty, "allow-dirty", false, "")
	fs.Var(&toolchain, "toolchain", "")
	fs.StringVar(&out, "o", "", "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	var missing []string
	for _, f := range []struct{ flag, v string }{{"-dir", dir}, {"-name", m.Name}, {"-version", m.Version}, {"-entry", m.Entry}, {"-o", out}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		c.UI.Error(fmt.Sprintf("missing %s (see -help)", strings.Join(missing, ", ")))
		return 1
	}
	if len(sources)+len(gits) == 0 {
		c.UI.Error("give at least one -source REPO@COMMIT or -git DIR: a bundle records where it came from")
		return 1
	}
	m.Args = entryArgs
	for _, s := range sources {
		src, err := bundle.ParseSource(s)
		if err != nil {
			return c.fail(err)
		}
		m.Sources = append(m.Sources, src)
	}
	for _, g := range gits {
		src, err := bundle.SourceFromGit(g, allowDirty)
		if err != nil {
			return c.fail(err)
		}
		m.Sources = append(m.Sources, src)
	}
	var err error
	if m.Toolchain, err = keyValues("-toolchain", toolchain); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	// Write next to the destination, then rename: a failed pack leaves no
	// half bundle under the name.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".bundle-*.tmp")
	if err != nil {
		return c.fail(fmt.Errorf("writing the bundle: %w", err))
	}
	defer os.Remove(tmp.Name())
	digest, err := bundle.Pack(dir, m, tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return c.fail(err)
	}
	size := 0
	if fi, err := os.Stat(out); err == nil {
		size = int(fi.Size())
	}
	c.UI.Output(fmt.Sprintf("Packed %s %s (%s) into %s\n%s", m.Name, m.Version, formatBytes(size), out, digest))
	return 0
}
