package keyring

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Where the keys a server brings come from: the ring's files in order
// (none created), else one key file created on first start and read after,
// else an older version's <data_dir>/cookie.key, else none (the cluster's
// ring, made by its leader, is all there is).
func TestConfiguredRing(t *testing.T) {
	dir := t.TempDir()
	write := func(name, key string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey, oldKey := strings.Repeat("n", 32), strings.Repeat("o", 44)
	newPath, oldPath := write("new.key", newKey), write("old.key", oldKey)
	shortPath := write("short.key", "too short")
	ranBefore := func(dataDir string) bool {
		entries, err := os.ReadDir(filepath.Join(dataDir, "raft"))
		return dataDir != "" && err == nil && len(entries) > 0
	}
	keys := func(f Files) ([][]byte, string, error) {
		f.RanBefore = ranBefore(f.DataDir)
		c, err := Read(f)
		return c.keys, c.source, err
	}

	t.Run("ring", func(t *testing.T) {
		got, src, err := keys(Files{Ring: []string{newPath, oldPath}})
		if err != nil || len(got) != 2 || string(got[0]) != newKey || string(got[1]) != oldKey || src != fromFiles {
			t.Fatalf("ring: %q %s %v", got, src, err)
		}
	})
	t.Run("a missing ring file", func(t *testing.T) {
		missing := filepath.Join(dir, "missing.key")
		if _, _, err := keys(Files{Ring: []string{missing, oldPath}}); err == nil || !strings.Contains(err.Error(), "missing.key") {
			t.Fatalf("a missing ring file: %v", err)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Fatal("a missing ring file was created")
		}
	})
	t.Run("a short ring key", func(t *testing.T) {
		if _, _, err := keys(Files{Ring: []string{newPath, shortPath}}); err == nil || !strings.Contains(err.Error(), "needs at least 32") {
			t.Fatalf("a short ring key: %v", err)
		}
	})
	// cookie_key_file: created on a first start, read after; missing on a
	// server that ran before, refused.
	data := t.TempDir()
	t.Run("one key file", func(t *testing.T) {
		created := filepath.Join(dir, "created.key")
		first, src, err := keys(Files{File: created, DataDir: data})
		if err != nil || len(first) != 1 || len(first[0]) != 32 || src != fromFiles {
			t.Fatalf("created key: %q %v", first, err)
		}
		if fi, err := os.Stat(created); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the created key file: %v %v", fi, err)
		}
		if again, _, err := keys(Files{File: created, DataDir: data}); err != nil || !bytes.Equal(again[0], first[0]) {
			t.Fatal("the key file changed across starts")
		}
		if err := os.MkdirAll(filepath.Join(data, "raft"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, "raft", "raft.db"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Remove(created)
		if _, _, err := keys(Files{File: created, DataDir: data}); err == nil || !strings.Contains(err.Error(), "has run before") {
			t.Fatalf("a deleted key on a server that ran before: %v", err)
		}
		if _, err := os.Stat(created); !os.IsNotExist(err) {
			t.Fatal("a key was made anew on a server that ran before")
		}
		if _, _, err := keys(Files{File: shortPath}); err == nil {
			t.Fatal("a short cookie_key_file was taken")
		}
	})
	// No files: an older version's data-dir key seeds, or nothing.
	t.Run("legacy", func(t *testing.T) {
		if got, src, err := keys(Files{DataDir: data}); got != nil || src != "" || err != nil {
			t.Fatalf("no files: %q %s %v", got, src, err)
		}
		if err := os.WriteFile(filepath.Join(data, "cookie.key"), []byte(newKey), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, src, err := keys(Files{DataDir: data}); err != nil || string(got[0]) != newKey || src != fromLegacy {
			t.Fatalf("legacy key: %q %s %v", got, src, err)
		}
		if err := os.WriteFile(filepath.Join(data, "cookie.key"), []byte("short"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, src, err := keys(Files{DataDir: data}); got != nil || src != "" || err != nil {
			t.Fatalf("a short legacy key: %q %s %v", got, src, err)
		}
	})
}
