package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// countingArchive counts the Opens that reach an archive.
type countingArchive struct {
	Archive
	opens atomic.Int64
}

func (c *countingArchive) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	c.opens.Add(1)
	return c.Archive.Open(ctx, digest)
}

// fixedArchive serves the same bytes for every digest: a lying archive.
type fixedArchive struct{ b []byte }

func (f fixedArchive) Put(context.Context, string, io.Reader) error { return ErrReadOnly }
func (f fixedArchive) Open(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(f.b)), nil
}
func (f fixedArchive) List(context.Context) ([]Entry, error) { return nil, nil }

// dirArchiveWith is a directory archive holding the test app's bundle.
func dirArchiveWith(t *testing.T) (a *DirArchive, digest string) {
	t.Helper()
	a, err := NewDirArchive(filepath.Join(t.TempDir(), "archive"), false)
	if err != nil {
		t.Fatal(err)
	}
	archive, digest := packApp(t)
	if err := a.Put(context.Background(), digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	return a, digest
}

// runEntry runs an opened bundle's entry point with its manifest's
// arguments and returns what it printed.
func runEntry(t *testing.T, o *Opened) string {
	t.Helper()
	out, err := exec.Command(o.EntryPath(), o.Manifest.Args...).CombinedOutput()
	if err != nil {
		t.Fatalf("running %s: %v\n%s", o.EntryPath(), err, out)
	}
	return string(out)
}

// wantOutput is what testdata/app/bin/app prints with demoManifest's args.
const wantOutput = "app args: --greeting hi\nhello from the bundle\n"

// TestCacheOpen opens a bundle from a directory archive: it is unpacked,
// read-only, and runs; the second Open uses the cache and reads nothing
// from the archive.
func TestCacheOpen(t *testing.T) {
	ctx := context.Background()
	da, digest := dirArchiveWith(t)
	a := &countingArchive{Archive: da}
	c := &Cache{Dir: filepath.Join(t.TempDir(), "cache"), Archive: a}

	o, err := c.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	h := digest[len(DigestPrefix):]
	if o.Dir != filepath.Join(c.Dir, h) || o.Digest != digest || o.Manifest.Name != "demo" {
		t.Fatalf("Opened %+v", o)
	}
	if o.EntryPath() != filepath.Join(o.Dir, "bin", "app") {
		t.Fatalf("EntryPath = %s", o.EntryPath())
	}
	if got := runEntry(t, o); got != wantOutput {
		t.Fatalf("entry printed %q, want %q", got, wantOutput)
	}
	// Every file and directory is read-only; the tree is exactly the
	// manifest's files plus manifest.json.
	var files []string
	err = filepath.WalkDir(o.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(o.Dir, p)
		want := fs.FileMode(0o444)
		switch {
		case d.IsDir() || rel == "bin/app":
			want = 0o555
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", rel, fi.Mode().Perm(), want)
		}
		if !d.IsDir() {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(files, " "); got != "README.txt bin/app lib/settings.json manifest.json share/greeting.txt" {
		t.Fatalf("unpacked files: %s", got)
	}
	if names := dirNames(t, c.Dir); len(names) != 1 {
		t.Fatalf("cache dir holds %v, want only the bundle (no temporary directories)", names)
	}

	// Second Open, same Cache and a new one (a restarted agent): from the
	// cache only.
	for _, cc := range []*Cache{c, {Dir: c.Dir, Archive: a}} {
		again, err := cc.Open(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if again.Dir != o.Dir || again.Manifest.Entry != "bin/app" {
			t.Fatalf("second Open: %+v", again)
		}
	}
	if n := a.opens.Load(); n != 1 {
		t.Fatalf("the archive was opened %d times, want 1", n)
	}
	// A cache without an archive still serves what it holds.
	if _, err := (&Cache{Dir: c.Dir}).Open(ctx, digest); err != nil {
		t.Fatalf("cache without archive: %v", err)
	}
}

// TestCacheTampered changes an unpacked copy in the ways one can: each is
// refused with ErrTampered, a message naming the difference and saying it
// is not fetched again; and it is not (the archive is not asked). After
// Remove, Open fetches a fresh copy.
func TestCacheTampered(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		says   string
	}{
		{
			name: "content changed, same size",
			tamper: func(t *testing.T, dir string) {
				rewrite(t, filepath.Join(dir, "share", "greeting.txt"), "HELLO from the bundle\n", 0o444)
			},
			says: "file share/greeting.txt: sha256 mismatch (manifest 24a4991a5d60…, on disk " + hexSum("HELLO from the bundle\n")[:12] + "…)",
		},
		{
			name: "entry point replaced",
			tamper: func(t *testing.T, dir string) {
				rewrite(t, filepath.Join(dir, "bin", "app"), "#!/bin/sh\necho pwned\n", 0o555)
			},
			says: "file bin/app: size mismatch (manifest 234, on disk 21 bytes)",
		},
		{
			name: "made writable",
			tamper: func(t *testing.T, dir string) {
				if err := os.Chmod(filepath.Join(dir, "lib", "settings.json"), 0o644); err != nil {
					t.Fatal(err)
				}
			},
			says: "file lib/settings.json: mode 0644, want 0444",
		},
		{
			name: "file added",
			tamper: func(t *testing.T, dir string) {
				writable(t, filepath.Join(dir, "lib"))
				rewrite(t, filepath.Join(dir, "lib", "evil.so"), "\x7fELF", 0o444)
				readonly(t, filepath.Join(dir, "lib"))
			},
			says: "file lib/evil.so: not in the bundle",
		},
		{
			name: "file removed",
			tamper: func(t *testing.T, dir string) {
				writable(t, dir)
				if err := os.Remove(filepath.Join(dir, "README.txt")); err != nil {
					t.Fatal(err)
				}
				readonly(t, dir)
			},
			says: "file README.txt: missing",
		},
		{
			name: "symlink in place of a file",
			tamper: func(t *testing.T, dir string) {
				writable(t, filepath.Join(dir, "share"))
				p := filepath.Join(dir, "share", "greeting.txt")
				if err := os.Remove(p); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink("/etc/hostname", p); err != nil {
					t.Fatal(err)
				}
				readonly(t, filepath.Join(dir, "share"))
			},
			says: "share/greeting.txt: a symlink, not a regular file",
		},
		{
			name: "manifest edited",
			tamper: func(t *testing.T, dir string) {
				p := filepath.Join(dir, ManifestName)
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				rewrite(t, p, strings.Replace(string(b), `"bin/app"`, `"bin/other"`, 1), 0o444)
			},
			says: `manifest.json: invalid manifest: entry "bin/other" is not a listed file`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			da, digest := dirArchiveWith(t)
			a := &countingArchive{Archive: da}
			c := &Cache{Dir: t.TempDir(), Archive: a}
			o, err := c.Open(ctx, digest)
			if err != nil {
				t.Fatal(err)
			}
			tc.tamper(t, o.Dir)
			_, err = c.Open(ctx, digest)
			wantErr(t, err, ErrTampered, "cached bundle "+digest, tc.says, "not fetched again", "remove "+o.Dir)
			if n := a.opens.Load(); n != 1 {
				t.Fatalf("the archive was opened %d times: a tampered copy must not be re-fetched silently", n)
			}
			if err := c.Remove(ctx, digest); err != nil {
				t.Fatal(err)
			}
			fresh, err := c.Open(ctx, digest)
			if err != nil {
				t.Fatalf("Open after Remove: %v", err)
			}
			if got := runEntry(t, fresh); got != wantOutput {
				t.Fatalf("fresh copy printed %q", got)
			}
		})
	}
}

// TestCacheRefusesBadArchive fetches from an archive that serves the wrong
// bytes, and from one that lacks the bundle: refused, and nothing is left in
// the cache.
func TestCacheRefusesBadArchive(t *testing.T) {
	ctx := context.Background()
	archive, digest := packApp(t)
	bad := bytes.Clone(archive)
	bad[len(bad)-20] ^= 0x40
	other := craft(t, append([]tarEntry{manifestEntry(t, manifestOf(smallFiles))}, smallFiles...), "")

	for name, tc := range map[string]struct {
		a    Archive
		kind error
	}{
		"flipped byte":      {fixedArchive{bad}, ErrTampered},
		"another bundle":    {fixedArchive{other}, ErrTampered},
		"not in archive":    {NewMemArchive(), ErrNotFound},
		"no archive at all": {nil, ErrNotFound},
	} {
		t.Run(name, func(t *testing.T) {
			c := &Cache{Dir: t.TempDir(), Archive: tc.a}
			_, err := c.Open(ctx, digest)
			wantErr(t, err, tc.kind, digest)
			if names := dirNames(t, c.Dir); len(names) != 0 {
				t.Fatalf("a refused bundle left %v in the cache", names)
			}
		})
	}
	if _, err := (&Cache{Dir: t.TempDir()}).Open(ctx, "latest"); !errors.Is(err, ErrBadDigest) {
		t.Fatalf("bad digest: %v", err)
	}
}

// TestCacheConcurrentOpens opens one digest from many goroutines at once,
// half through one Cache and half through Caches of their own on the same
// directory (as separate agents would): all succeed, with one copy.
func TestCacheConcurrentOpens(t *testing.T) {
	ctx := context.Background()
	a, digest := dirArchiveWith(t)
	dir := t.TempDir()
	shared := &Cache{Dir: dir, Archive: a}
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	dirs := make(chan string, n)
	start := make(chan struct{})
	for i := range n {
		c := shared
		if i%2 == 1 {
			c = &Cache{Dir: dir, Archive: a}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			o, err := c.Open(ctx, digest)
			if err != nil {
				errs <- fmt.Errorf("open %d: %w", i, err)
				return
			}
			dirs <- o.Dir
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	close(dirs)
	for err := range errs {
		t.Error(err)
	}
	seen := map[string]bool{}
	for d := range dirs {
		seen[d] = true
	}
	if len(seen) != 1 {
		t.Fatalf("Opens returned %d directories: %v", len(seen), seen)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Fatalf("cache holds %v after concurrent opens, want one bundle and no temporary directories", names)
	}
	o, err := shared.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	if got := runEntry(t, o); got != wantOutput {
		t.Fatalf("entry printed %q", got)
	}
}

// rewrite replaces a read-only file's content and sets its mode.
func rewrite(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	_ = os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writable(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func readonly(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
}
