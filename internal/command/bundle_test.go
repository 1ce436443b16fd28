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

// A Python app packed as a python3 bundle: its directory and a vendored
// dependency, the manifest's WSGI application and Python requirement shown
// by verify and ls; the flags of one runtime refused for the other.
func TestBundlePackPython(t *testing.T) {
	t.Setenv("STICKYD_BUNDLE_ARCHIVE", "")
	src := t.TempDir()
	for name, body := range map[string]string{
		"app/shop/__init__.py":         "",
		"app/shop/wsgi.py":             "def application(environ, start_response):\n    return []\n",
		"app/shop/__pycache__/x.pyc":   "bytecode",
		"vendor/tally/__init__.py":     "N = 1\n",
		"sdk/stickyd/__init__.py":      "",
		"sdk/stickyd/worker.py":        "",
		"sdk/tests/test_not_packed.py": "",
	} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "shop.tar.gz")
	source := "https://git.example.com/acme/shop.git@" + strings.Repeat("ab", 20)
	args := []string{"bundle", "pack", "-app", filepath.Join(src, "app"), "-deps", filepath.Join(src, "vendor"), "-sdk", filepath.Join(src, "sdk"),
		"-wsgi", "shop.wsgi:application", "-requires-python", ">=3.9", "-name", "shop", "-version", "1.0.0", "-arg", "--threads", "-arg", "16",
		"-source", source, "-o", out}
	r := run(t, args...)
	r.expect(t, 0, []string{"Packed shop 1.0.0", "sha256:"}, nil)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	digest := lines[len(lines)-1]
	run(t, args...).expect(t, 0, []string{digest}, nil)
	run(t, "bundle", "verify", out).expect(t, 0, []string{"Verified " + digest, "Runtime   = python3", "Entry     = app/shop/wsgi.py --threads 16",
		"WSGI      = shop.wsgi:application", "Python    = >=3.9", "Path      = app deps", "Files     = 5"}, nil)
	archive := t.TempDir()
	run(t, "bundle", "push", "-archive", archive, out).expect(t, 0, []string{digest}, nil)
	run(t, "bundle", "ls", "-archive", archive).expect(t, 0, []string{digest, "shop", "1.0.0", "python3"}, nil)

	app := filepath.Join(src, "app")
	run(t, "bundle", "pack", "-app", app, "-name", "shop", "-version", "1", "-source", source, "-o", out).
		expect(t, 1, nil, []string{"missing -wsgi, -requires-python (or -interpreter)"})
	run(t, "bundle", "pack", "-runtime", "python3", "-dir", app, "-entry", "shop/wsgi.py", "-wsgi", "shop.wsgi:application", "-interpreter", "python3",
		"-name", "shop", "-version", "1", "-source", source, "-o", out).expect(t, 1, nil, []string{"takes -app", "not -dir and -entry"})
	run(t, "bundle", "pack", "-runtime", "go-plugin", "-dir", app, "-entry", "shop/wsgi.py", "-wsgi", "shop.wsgi:application",
		"-name", "shop", "-version", "1", "-source", source, "-o", out).expect(t, 1, nil, []string{"are for -runtime python3"})
	run(t, "bundle", "pack", "-app", app, "-wsgi", "shop.missing:application", "-requires-python", ">=3.9",
		"-name", "shop", "-version", "1", "-source", source, "-o", out).expect(t, 1, nil, []string{"module shop.missing is not in the bundle"})
	run(t, "bundle", "pack", "-app", app, "-wsgi", "shop.wsgi:application", "-requires-python", "3.11",
		"-name", "shop", "-version", "1", "-source", source, "-o", out).expect(t, 1, nil, []string{`"3.11" is not a version specifier`})
}
