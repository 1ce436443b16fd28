package park

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func files(t *testing.T, dir string) int {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// Held packages stay in memory up to the bound, go to disk after
// flushAfter or at Sync, and a package deleted while held never touches
// the disk.
func TestTieredHoldsInMemory(t *testing.T) {
	dir := t.TempDir()
	fs, err := NewFileStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := NewTiered(fs, 10, time.Hour)
	defer s.Close()
	a, _ := s.Hold([]byte("aaaa"))
	b, _ := s.Hold([]byte("bbbb"))
	c, _ := s.Hold([]byte("cccc")) // past the bound: to disk at once
	if n, bytes, spills := s.Held(); n != 2 || bytes != 8 || spills != 1 {
		t.Fatalf("held %d packages, %d bytes, %d spills", n, bytes, spills)
	}
	if files(t, dir) != 1 || !s.Has(c) || !s.Has(a) {
		t.Fatalf("%d files, has c %v, has a %v", files(t, dir), s.Has(c), s.Has(a))
	}
	if got, err := s.Get(a); err != nil || string(got) != "aaaa" {
		t.Fatalf("get a: %q %v", got, err)
	}
	if err := s.Delete(a); err != nil || s.Has(a) {
		t.Fatalf("delete a: %v, still has it %v", err, s.Has(a))
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	if n, _, _ := s.Held(); n != 0 || files(t, dir) != 2 {
		t.Fatalf("after sync: %d held, %d files", n, files(t, dir))
	}
	if got, err := s.Get(b); err != nil || string(got) != "bbbb" {
		t.Fatalf("get b from disk: %q %v", got, err)
	}
	// On disk it is checked like any package.
	h, _ := hexOf(b)
	if err := os.WriteFile(filepath.Join(dir, h), []byte("xxxx"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a corrupt file: %v", err)
	}
}

func TestTieredFlushesAfterAWhile(t *testing.T) {
	dir := t.TempDir()
	fs, _ := NewFileStore(dir)
	s := NewTiered(fs, 1<<20, 50*time.Millisecond)
	defer s.Close()
	d, _ := s.Hold([]byte("idle person"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n, _, _ := s.Held(); n == 0 && files(t, dir) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a held package was never written to disk")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, err := s.Get(d); err != nil || string(got) != "idle person" {
		t.Fatalf("get after the flush: %q %v", got, err)
	}
}
