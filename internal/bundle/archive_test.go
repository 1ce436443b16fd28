package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDirArchive puts, re-puts, opens and lists bundles in a directory
// archive; a bad upload is refused and leaves nothing behind.
func TestDirArchive(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "archive")
	a, err := OpenArchive(dir, ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	archive, digest := packApp(t)
	h := digest[len(DigestPrefix):]
	if err := a.Put(ctx, digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, h+".tar.gz"))
	if err != nil {
		t.Fatalf("layout <dir>/<hex>.tar.gz: %v", err)
	}
	if fi.Mode().Perm() != 0o444 {
		t.Errorf("stored bundle has mode %v, want read-only", fi.Mode())
	}
	if err := a.Put(ctx, h, bytes.NewReader(archive)); err != nil {
		t.Fatalf("putting again (bare hex digest): %v", err)
	}

	// A tampered upload under a new digest, and a tampered one under the
	// digest already held: both refused, nothing written.
	bad := bytes.Clone(archive)
	bad[len(bad)/3] ^= 0xff
	if err := a.Put(ctx, digestOf(append(bytes.Clone(archive), 1)), bytes.NewReader(bad)); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered upload: %v", err)
	}
	if err := a.Put(ctx, digest, bytes.NewReader(bad)); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered re-upload: %v", err)
	}
	if err := a.Put(ctx, "sha256:abc", bytes.NewReader(archive)); !errors.Is(err, ErrBadDigest) {
		t.Fatalf("bad digest: %v", err)
	}
	names := dirNames(t, dir)
	if len(names) != 1 || names[0] != h+".tar.gz" {
		t.Fatalf("archive directory holds %v, want only %s.tar.gz", names, h)
	}

	rc, err := a.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, archive) {
		t.Fatalf("Open returned %d bytes (%v), want the %d put", len(got), err, len(archive))
	}
	if _, err := a.Open(ctx, digestOf([]byte("nothing"))); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Open of an absent bundle: %v", err)
	}

	// List: the bundle; a damaged file is listed with its problem; other
	// names are ignored.
	junk := strings.Repeat("e", 64)
	if err := os.WriteFile(filepath.Join(dir, junk+".tar.gz"), []byte("this is not a gzip stream at all"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}
	entries, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []Entry{
		{Digest: "sha256:" + junk, Size: 32, Problem: "not a gzip stream: gzip: invalid header"},
		{Digest: digest, Size: int64(len(archive)), Name: "demo", Version: "1.4.2", Runtime: RuntimeGoPlugin},
	}
	if len(entries) != len(want) || entries[0] != want[0] || entries[1] != want[1] {
		t.Fatalf("List = %+v\nwant %+v", entries, want)
	}
}

// TestReadOnlyArchive opens an archive read-only: Put is refused before
// reading anything, while Open and List work. The directory is also made
// 0555; tests may run as root, for whom that does not bind, so the option
// is what is proven here.
func TestReadOnlyArchive(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	archive, digest := packApp(t)
	w, err := OpenArchive(dir, ArchiveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Put(ctx, digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	readOnlyDir(t, dir)

	for _, loc := range []string{dir, "file://" + dir} {
		a, err := OpenArchive(loc, ArchiveOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		r := &countingReader{r: bytes.NewReader(archive)}
		if err := a.Put(ctx, digest, r); !errors.Is(err, ErrReadOnly) {
			t.Fatalf("Put on %s opened read-only: %v", loc, err)
		}
		if r.n != 0 {
			t.Fatalf("a refused Put read %d bytes", r.n)
		}
		rc, err := a.Open(ctx, digest)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Verify(rc, digest); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if es, err := a.List(ctx); err != nil || len(es) != 1 {
			t.Fatalf("List = %v, %v", es, err)
		}
	}
	if _, err := OpenArchive(filepath.Join(dir, "missing"), ArchiveOptions{ReadOnly: true}); err == nil {
		t.Fatal("a missing directory opened read-only")
	}
}

// TestOpenArchive maps locations to archives and refuses the rest.
func TestOpenArchive(t *testing.T) {
	dir := t.TempDir()
	for loc, want := range map[string]string{
		dir:                          "*bundle.DirArchive",
		"file://" + dir:              "*bundle.DirArchive",
		"file://localhost" + dir:     "*bundle.DirArchive",
		"http://127.0.0.1:4646/b":    "*bundle.HTTPArchive",
		"https://bundles.example/x/": "*bundle.HTTPArchive",
	} {
		a, err := OpenArchive(loc, ArchiveOptions{})
		if err != nil {
			t.Errorf("OpenArchive(%q): %v", loc, err)
			continue
		}
		if got := typeName(a); got != want {
			t.Errorf("OpenArchive(%q) is %s, want %s", loc, got, want)
		}
	}
	for loc, says := range map[string]string{
		"":                      "no location",
		"s3://bucket/bundles":   "unsupported scheme",
		"file://otherhost/srv":  "local path",
		"file:relative/dir":     "absolute path",
		"http://":               "no host",
		"https://h/x?token=abc": "query",
	} {
		_, err := OpenArchive(loc, ArchiveOptions{})
		wantErr(t, err, nil, says)
	}
	if a, _ := OpenArchive("https://bundles.example/x/", ArchiveOptions{}); a.(*HTTPArchive).URL("index.json") != "https://bundles.example/x/index.json" {
		t.Errorf("URL = %s", a.(*HTTPArchive).URL("index.json"))
	}
}

// TestMemArchive is the in-memory archive's contract: verified puts, opens,
// lists.
func TestMemArchive(t *testing.T) {
	ctx := context.Background()
	a := NewMemArchive()
	archive, digest := packApp(t)
	bad := bytes.Clone(archive)
	bad[100] ^= 1
	if err := a.Put(ctx, digest, bytes.NewReader(bad)); !errors.Is(err, ErrTampered) {
		t.Fatalf("tampered: %v", err)
	}
	if _, err := a.Open(ctx, digest); !errors.Is(err, ErrNotFound) {
		t.Fatalf("open after a refused put: %v", err)
	}
	if err := a.Put(ctx, digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	rc, err := a.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(rc, digest); err != nil {
		t.Fatal(err)
	}
	if es, _ := a.List(ctx); len(es) != 1 || es[0].Name != "demo" {
		t.Fatalf("List = %+v", es)
	}
}

// readOnlyDir makes dir 0555 for the rest of the test.
func readOnlyDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
}

// dirNames lists a directory, hidden names included.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// typeName is the short type name of v, "*bundle.DirArchive".
func typeName(v any) string { return fmt.Sprintf("%T", v) }
