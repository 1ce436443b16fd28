package command

import (
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundleVerifyCommand checks a bundle and prints its manifest.
type BundleVerifyCommand struct{ Meta }

func (c *BundleVerifyCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle verify [options] FILE|DIGEST

  Verifies a bundle, from a file or from the archive by digest: its bytes
  hash to its digest, its manifest is valid, and every file matches the
  manifest (size, sha256, mode), none missing or extra. Prints the
  manifest's summary; exits 1, saying what is wrong, for a tampered bundle.
` + archiveOptionsHelp)
}

func (c *BundleVerifyCommand) Synopsis() string { return "Check a bundle and show its manifest" }

func (c *BundleVerifyCommand) Run(args []string) int {
	var ao archiveOptions
	fs := c.plainFlagSet("bundle verify")
	ao.flags(fs)
	pos, ok := c.parseArgs(fs, args, 1, c.Help)
	if !ok {
		return 1
	}
	var (
		digest string
		m      *bundle.Manifest
		err    error
	)
	if _, serr := os.Stat(pos[0]); serr == nil {
		digest, m, err = verifyFile(pos[0])
	} else {
		if digest, err = bundle.ParseDigest(pos[0]); err != nil {
			return c.fail(fmt.Errorf("%s is neither a file nor a digest: %w", pos[0], err))
		}
		var ar bundle.Archive
		if ar, err = ao.open(true); err != nil {
			return c.fail(err)
		}
		ctx, stop := apiContext()
		defer stop()
		rc, oerr := ar.Open(ctx, digest)
		if oerr != nil {
			return c.fail(oerr)
		}
		defer rc.Close()
		m, err = bundle.Verify(rc, digest)
	}
	if err != nil {
		return c.fail(err)
	}
	c.UI.Output(manifestSummary(digest, m))
	return 0
}

// manifestSummary words a verified manifest for people.
func manifestSummary(digest string, m *bundle.Manifest) string {
	size := 0
	for _, f := range m.Files {
		size += int(f.Size)
	}
	lines := []string{
		"Verified " + digest,
		fmt.Sprintf("Name      = %s", m.Name),
		fmt.Sprintf("Version   = %s", m.Version),
		fmt.Sprintf("Runtime   = %s", m.Runtime),
		fmt.Sprintf("Entry     = %s %s", m.Entry, strings.Join(m.Args, " ")),
	}
	if py := m.Python; py != nil {
		python := py.RequiresPython
		switch {
		case python == "":
			python = py.Interpreter
		case py.Interpreter != "":
			python += " (" + py.Interpreter + ")"
		}
		lines = append(lines, fmt.Sprintf("WSGI      = %s", py.WSGI), fmt.Sprintf("Python    = %s", python),
			fmt.Sprintf("Path      = %s", strings.Join(py.Path, " ")))
	}
	lines = append(lines,
		fmt.Sprintf("Files     = %d (%s)", len(m.Files), formatBytes(size)),
	)
	keys := make([]string, 0, len(m.Toolchain))
	for k := range m.Toolchain {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var tc []string
	for _, k := range keys {
		tc = append(tc, k+"="+m.Toolchain[k])
	}
	lines = append(lines, "Toolchain = "+strings.Join(tc, " "), "Sources:")
	for _, s := range m.Sources {
		lines = append(lines, "  "+s.String())
	}
	return strings.Join(lines, "\n")
}
