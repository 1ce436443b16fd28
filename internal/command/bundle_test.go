package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The bundle commands on a real directory archive: pack, push, list,
// verify by file and by digest, and a tampered bundle refused.
func TestBundleCommands(t *testing.T) {
	t.Setenv("STICKYD_BUNDLE_ARCHIVE", "")
	build := t.TempDir()
	if err := os.MkdirAll(filepath.Join(build, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, "bin", "app"), []byte("#!/bin/sh\necho hello\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, "data.txt"), []byte("reference data\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "app.tar.gz")
	commit := strings.Repeat("ab", 20)
	args := []string{"bundle", "pack", "-dir", build, "-name", "app", "-version", "1.0.0", "-entry", "bin/app",
		"-source", "https://git.example.com/acme/app.git@" + commit, "-source", "https://git.example.com/acme/lib.git@" + strings.Repeat("cd", 20) + ":go",
		"-toolchain", "go=go1.26.8", "-toolchain", "goos=linux", "-toolchain", "goarch=amd64", "-o", out}
	r := run(t, args...)
	r.expect(t, 0, []string{"Packed app 1.0.0", "sha256:"}, nil)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	digest := lines[len(lines)-1]
	if !strings.HasPrefix(digest, "sha256:") || len(digest) != 71 {
		t.Fatalf("pack printed no digest last: %q", r.stdout)
	}
	// Packing again gives the same digest.
	r = run(t, args...)
	r.expect(t, 0, []string{digest}, nil)

	run(t, "bundle", "pack", "-dir", build, "-o", out).expect(t, 1, nil, []string{"missing -name, -version, -entry"})
	run(t, "bundle", "pack", "-dir", build, "-name", "app", "-version", "1", "-entry", "bin/app", "-o", out).
		expect(t, 1, nil, []string{"-source"})
	run(t, "bundle", "pack", "-dir", build, "-name", "app", "-version", "1", "-entry", "bin/app", "-source", "repo@nope", "-o", out).
		expect(t, 1, nil, []string{"nope"})

	archive := t.TempDir()
	run(t, "bundle", "push", out).expect(t, 1, nil, []string{"no bundle archive"})
	run(t, "bundle", "push", "-archive", archive, out).expect(t, 0, []string{digest}, nil)
	run(t, "bundle", "ls", "-archive", archive).expect(t, 0, []string{digest, "app", "1.0.0", "go-plugin"}, nil)
	run(t, "bundle", "verify", out).expect(t, 0, []string{"Verified " + digest, "bin/app", "https://git.example.com/acme/lib.git@" + strings.Repeat("cd", 20) + ":go"}, nil)
	run(t, "bundle", "verify", "-archive", archive, digest).expect(t, 0, []string{"Verified " + digest}, nil)
	run(t, "bundle", "verify", "-archive", archive, "sha256:"+strings.Repeat("0", 64)).expect(t, 1, nil, []string{"not found"})

	// One byte changed: refused, and the message says so.
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	tampered := filepath.Join(t.TempDir(), "tampered.tar.gz")
	if err := os.WriteFile(tampered, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r = run(t, "bundle", "verify", tampered)
	if r.code != 1 || r.stderr == "" {
		t.Fatalf("tampered bundle: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// Pushed under its own (new) digest, a damaged archive still fails
	// verification before it is stored.
	run(t, "bundle", "push", "-archive", archive, tampered).expect(t, 1, nil, nil)
	run(t, "bundle", "ls", "-archive", archive).expect(t, 0, []string{digest}, nil)
}
