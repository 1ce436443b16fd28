package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"
)

// demoManifest is the fixed manifest the tests pack testdata/app with: two
// sources from two repositories, a fixed toolchain.
func demoManifest() Manifest {
	return Manifest{
		Name:    "demo",
		Version: "1.4.2",
		Entry:   "bin/app",
		Args:    []string{"--greeting", "hi"},
		Sources: []Source{
			{Repo: "https://git.example.com/acme/demo.git", Commit: "3f786850e387550fdab836ed7e6dc881de23001b"},
			{Repo: "git@git.example.com:acme/shared.git", Commit: "89e6c98d92887913cadf06b2adb97f26cde4849b", Path: "go/ui"},
		},
		Toolchain: map[string]string{"go": "go1.26.8", "goos": "linux", "goarch": "amd64"},
	}
}

// packApp packs testdata/app with demoManifest.
func packApp(t *testing.T) (archive []byte, digest string) {
	t.Helper()
	return packDir(t, "testdata/app", demoManifest())
}

// packDir packs dir with m.
func packDir(t *testing.T, dir string, m Manifest) (archive []byte, digest string) {
	t.Helper()
	var buf bytes.Buffer
	d, err := Pack(dir, m, &buf)
	if err != nil {
		t.Fatalf("Pack(%s): %v", dir, err)
	}
	return buf.Bytes(), d
}

// digestOf is the digest of b, computed here independently of the package.
func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// hexSum is the hex SHA-256 of s.
func hexSum(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// tarEntry is one entry of a crafted archive.
type tarEntry struct {
	name string
	body string
	mode int64 // 0 means 0644
	typ  byte  // 0 means a regular file
	link string
	size int64 // -1 means len(body)
}

func reg(name, body string, mode int64) tarEntry {
	return tarEntry{name: name, body: body, mode: mode, size: -1}
}

// craft writes a .tar.gz of entries with archive/tar directly, bypassing
// Pack's checks, and appends tail after the gzip stream.
func craft(t *testing.T, entries []tarEntry, tail string) []byte {
	t.Helper()
	return craftInner(t, entries, "", tail)
}

// craftInner is craft, also writing inner into the gzip stream after the
// end of the tar archive.
func craftInner(t *testing.T, entries []tarEntry, inner, tail string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: e.typ, Linkname: e.link}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
		}
		if hdr.Typeflag == 0 {
			hdr.Typeflag = tar.TypeReg
		}
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("crafting %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatalf("crafting %q: %v", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(gz, inner); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	buf.WriteString(tail)
	return buf.Bytes()
}

// smallFiles are the files of crafted bundles.
var smallFiles = []tarEntry{
	reg("bin/app", "#!/bin/sh\necho hi\n", 0o755),
	reg("share/greeting.txt", "hello\n", 0o644),
}

// manifestOf is a valid manifest listing entries as they are.
func manifestOf(entries []tarEntry) Manifest {
	m := demoManifest()
	m.Format, m.Runtime = FormatVersion, RuntimeGoPlugin
	for _, e := range entries {
		m.Files = append(m.Files, File{Path: e.name, Size: int64(len(e.body)), SHA256: hexSum(e.body), Mode: FileMode(e.mode)})
	}
	return m
}

// manifestEntry is manifest.json holding m.
func manifestEntry(t *testing.T, m Manifest) tarEntry {
	t.Helper()
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	return reg(ManifestName, string(b), 0o644)
}

// firstEntry returns the name and content of an archive's first entry.
func firstEntry(t *testing.T, archive []byte) (string, []byte) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return hdr.Name, b
}

// wantErr fails unless err matches kind and its message holds every part.
func wantErr(t *testing.T, err, kind error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", kind)
	}
	if kind != nil && !errors.Is(err, kind) {
		t.Fatalf("error %q does not match %v", err, kind)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not say %q", err, p)
		}
	}
}
