package park

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestStores(t *testing.T) {
	fs, err := NewFileStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Store{"file": fs, "mem": NewMemStore()} {
		t.Run(name, func(t *testing.T) {
			d, err := s.Put([]byte("state"), true)
			if err != nil {
				t.Fatal(err)
			}
			if d != Digest([]byte("state")) || !strings.HasPrefix(d, "sha256:") {
				t.Fatalf("digest %q", d)
			}
			if again, _ := s.Put([]byte("state"), true); again != d {
				t.Fatal("same content, other digest")
			}
			b, err := s.Get(d)
			if err != nil || string(b) != "state" {
				t.Fatalf("get: %q %v", b, err)
			}
			if _, err := s.Get(Digest([]byte("other"))); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get absent: %v", err)
			}
			for _, bad := range []string{"", "md5:abc", "sha256:xyz", "sha256:" + strings.Repeat("g", 64)} {
				if _, err := s.Get(bad); !errors.Is(err, ErrBadDigest) {
					t.Fatalf("get %q: %v", bad, err)
				}
			}
			if err := s.Delete(d); err != nil {
				t.Fatal(err)
			}
			if err := s.Delete(d); err != nil {
				t.Fatalf("second delete: %v", err)
			}
			if _, err := s.Get(d); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get deleted: %v", err)
			}
		})
	}
}

func TestFileStoreDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	s, _ := NewFileStore(dir)
	d, _ := s.Put([]byte("precious"), true)
	h, _ := hexOf(d)
	if err := os.WriteFile(filepath.Join(dir, h), []byte("tampered"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tampered package: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Fatalf("temporary file left behind: %s", e.Name())
		}
	}
}
