package benchkit

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BuildStickyd builds the stickyd command (without the race detector: the
// tests run it as a tool and as a deployed binary) into a temporary
// directory and returns its path.
func BuildStickyd(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stickyd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/stickyd/stickyd/cmd/stickyd").CombinedOutput(); err != nil {
		t.Fatalf("building stickyd: %v\n%s", err, out)
	}
	return bin
}

// PackBundles builds the worker binary of package pkg (under
// plugins/examples) and packs it into a new directory archive once per
// release with the real stickyd command line (stickyd, from BuildStickyd),
// each release's manifest naming its version and the entry point's
// arguments. It returns the archive and the digests, in order. The test's
// working directory is two levels below the repository (test/<suite>).
func PackBundles(t testing.TB, stickyd, name, pkg string, releases ...[]string) (archive string, digests []string) {
	t.Helper()
	build := t.TempDir()
	entry := "bin/" + name + "-worker"
	if out, err := exec.Command("go", "build", "-o", filepath.Join(build, entry), "github.com/stickyd/stickyd/plugins/examples/"+pkg).CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	// Where the build came from: this checkout, or (an exported tree)
	// as best we can say.
	source := []string{"-git", "../..", "-allow-dirty"}
	if _, err := bundle.SourceFromGit("../..", true); err != nil {
		source = []string{"-source", "https://example.invalid/stickyd.git@" + strings.Repeat("0", 40)}
	}
	archive = t.TempDir()
	for i, args := range releases {
		file := filepath.Join(t.TempDir(), "bundle.tar.gz")
		pack := append([]string{"bundle", "pack", "-dir", build, "-name", name, "-version", strconv.Itoa(i+1) + ".0.0",
			"-entry", entry, "-o", file}, source...)
		for _, a := range args {
			pack = append(pack, "-arg", a)
		}
		out, err := exec.Command(stickyd, pack...).CombinedOutput()
		if err != nil {
			t.Fatalf("stickyd %s: %v\n%s", strings.Join(pack, " "), err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		digests = append(digests, lines[len(lines)-1])
		if out, err := exec.Command(stickyd, "bundle", "push", "-archive", archive, file).CombinedOutput(); err != nil {
			t.Fatalf("stickyd bundle push: %v\n%s", err, out)
		}
	}
	return archive, digests
}
