package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestPackGolden packs testdata/app with a fixed manifest and compares the
// manifest.json it wrote, byte for byte, with testdata/manifest.golden.json
// (go test -run TestPackGolden -update rewrites it).
func TestPackGolden(t *testing.T) {
	archive, digest := packApp(t)
	if got := digestOf(archive); got != digest {
		t.Fatalf("Pack returned %s, the bytes hash to %s", digest, got)
	}
	name, got := firstEntry(t, archive)
	if name != ManifestName {
		t.Fatalf("first entry %q, want %s", name, ManifestName)
	}
	golden := filepath.Join("testdata", "manifest.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("manifest.json differs from %s (run with -update if intended):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
	m, err := Verify(bytes.NewReader(archive), digest)
	if err != nil {
		t.Fatalf("Verify of a fresh pack: %v", err)
	}

	// Every entry: a regular file with zero time and owner, in order.
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	if !gz.ModTime.IsZero() || gz.Name != "" {
		t.Errorf("gzip header carries time %v, name %q", gz.ModTime, gz.Name)
	}
	var names []string
	tr := tar.NewReader(gz)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if !hdr.ModTime.Equal(time.Unix(0, 0)) || hdr.Uid != 0 || hdr.Gid != 0 || hdr.Uname != "" || hdr.Gname != "" || hdr.Typeflag != tar.TypeReg {
			t.Errorf("entry %s: time %v, owner %d:%d %q:%q, type %q; want zero and a regular file",
				hdr.Name, hdr.ModTime, hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname, hdr.Typeflag)
		}
	}
	if got := strings.Join(names, " "); got != "manifest.json README.txt bin/app lib/settings.json share/greeting.txt" {
		t.Errorf("entries in order: %s", got)
	}
	if m.Runtime != RuntimeGoPlugin || m.Format != FormatVersion || len(m.Files) != 4 {
		t.Fatalf("manifest defaults not filled: %+v", m)
	}
}

// TestPackDeterministic packs the same files twice, and once more from a
// copy with other times and permission bits: the bytes, hence the digest,
// are the same every time.
func TestPackDeterministic(t *testing.T) {
	first, d1 := packApp(t)
	second, d2 := packApp(t)
	if d1 != d2 || !bytes.Equal(first, second) {
		t.Fatalf("packing twice gave %s then %s", d1, d2)
	}

	cp := t.TempDir()
	err := filepath.WalkDir("testdata/app", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("testdata/app", p)
		dst := filepath.Join(cp, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o700)
		}
		fi, _ := d.Info()
		mode := fs.FileMode(0o600)
		if fi.Mode()&0o100 != 0 {
			mode = 0o700 // executable for the owner only: still ModeExec
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(dst, b, mode); err != nil {
			return err
		}
		old := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
		return os.Chtimes(dst, old, old)
	})
	if err != nil {
		t.Fatal(err)
	}
	third, d3 := packDir(t, cp, demoManifest())
	if d3 != d1 || !bytes.Equal(third, first) {
		t.Fatalf("a copy with other times and modes packs to %s, want %s", d3, d1)
	}

	// A changed byte is a changed digest.
	if err := os.Chmod(filepath.Join(cp, "share", "greeting.txt"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cp, "share", "greeting.txt"), []byte("hello from the bundlE\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, d4 := packDir(t, cp, demoManifest()); d4 == d1 {
		t.Fatal("other content, same digest")
	}
}

// TestPackFillsToolchain leaves the toolchain unset: Pack records the Go
// version and platform (here from the running runtime, as the entry is a
// shell script, not a Go binary) without changing the caller's manifest.
func TestPackFillsToolchain(t *testing.T) {
	m := demoManifest()
	m.Toolchain = map[string]string{"node": "v22.1.0"}
	archive, digest := packDir(t, "testdata/app", m)
	got, err := Verify(bytes.NewReader(archive), digest)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"node": "v22.1.0", "go": runtime.Version(), "goos": runtime.GOOS, "goarch": runtime.GOARCH}
	for k, v := range want {
		if got.Toolchain[k] != v {
			t.Errorf("toolchain %s = %q, want %q", k, got.Toolchain[k], v)
		}
	}
	if len(m.Toolchain) != 1 {
		t.Errorf("Pack changed the caller's toolchain map: %v", m.Toolchain)
	}
}

// TestPackRefuses gives Pack what it must not pack: each gives a clear error
// and writes nothing.
func TestPackRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		edit  func(m *Manifest)
		kind  error
		says  []string
	}{
		{
			name: "symlink",
			setup: func(t *testing.T, dir string) {
				if err := os.Symlink("/etc/passwd", filepath.Join(dir, "lib", "passwd")); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{"lib/passwd is a symlink", "regular files"},
		},
		{
			name: "named pipe",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
					t.Skipf("mkfifo: %v", err)
				}
			},
			says: []string{"pipe is a named pipe"},
		},
		{
			name: "manifest.json at the root",
			setup: func(t *testing.T, dir string) {
				if err := os.WriteFile(filepath.Join(dir, ManifestName), []byte("{}"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{"manifest.json", "reserved"},
		},
		{
			name: "entry not in the directory",
			edit: func(m *Manifest) { m.Entry = "bin/missing" },
			kind: ErrInvalidManifest,
			says: []string{`entry "bin/missing" is not a listed file`},
		},
		{
			name: "entry not executable",
			edit: func(m *Manifest) { m.Entry = "README.txt" },
			kind: ErrInvalidManifest,
			says: []string{`entry "README.txt" has mode 0644`},
		},
		{
			name: "no source",
			edit: func(m *Manifest) { m.Sources = nil },
			kind: ErrInvalidManifest,
			says: []string{"sources: none"},
		},
		{
			name: "empty directory",
			setup: func(t *testing.T, dir string) {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			},
			says: []string{"no files to pack"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyApp(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			m := demoManifest()
			if tc.edit != nil {
				tc.edit(&m)
			}
			var buf bytes.Buffer
			_, err := Pack(dir, m, &buf)
			wantErr(t, err, tc.kind, tc.says...)
			if buf.Len() != 0 {
				t.Fatalf("Pack wrote %d bytes before failing", buf.Len())
			}
		})
	}
	if _, err := Pack(filepath.Join(t.TempDir(), "nope"), demoManifest(), &bytes.Buffer{}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("packing a missing directory: %v", err)
	}
}

// copyApp copies testdata/app to a temporary directory.
func copyApp(t *testing.T) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "app")
	if err := os.CopyFS(dst, os.DirFS("testdata/app")); err != nil {
		t.Fatal(err)
	}
	return dst
}
