package park

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	s, err := NewTiered(fs, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, _ := s.Hold([]byte("aaaa"), "")
	b, _ := s.Hold([]byte("bbbb"), "")
	c, _ := s.Hold([]byte("cccc"), "") // past the bound: to disk at once
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
	// The pack is found again by a store opened on the directory (a
	// restart), read in place, and removed with its last entry.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := NewTiered(fs, 10, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got, err := s2.Get(b); err != nil || string(got) != "bbbb" || !s2.Has(b) {
		t.Fatalf("get b after reopening: %q %v", got, err)
	}
	if err := s2.Delete(b); err != nil || s2.Has(b) || files(t, dir) != 1 {
		t.Fatalf("deleting the pack's last entry: %v, has %v, %d files", err, s2.Has(b), files(t, dir))
	}
	// A pack's entries are checked when read.
	d, _ := s2.Hold([]byte("dddd"), "")
	if err := s2.Sync(); err != nil {
		t.Fatal(err)
	}
	es, _ := os.ReadDir(dir)
	for _, e := range es {
		if isPack(e.Name()) {
			path := filepath.Join(dir, e.Name())
			raw, _ := os.ReadFile(path)
			raw[len(raw)-1] ^= 0xff
			if err := os.WriteFile(path, raw, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := s2.Get(d); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a corrupt pack entry: %v", err)
	}
	// A pack cut short is refused when opened, not read past its end.
	for _, e := range es {
		if isPack(e.Name()) {
			path := filepath.Join(dir, e.Name())
			raw, _ := os.ReadFile(path)
			_ = os.WriteFile(path, raw[:len(raw)-2], 0o600)
		}
	}
	s3, err := NewTiered(fs, 10, time.Hour)
	if err != nil || len(s3.SetAside()) != 1 {
		t.Fatalf("opening a store with a cut pack: %v, set aside %v", err, s3.SetAside())
	}
	defer s3.Close()
	if _, err := s3.Get(d); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a package of a cut pack: %v", err)
	}
}

func TestTieredFlushesAfterAWhile(t *testing.T) {
	dir := t.TempDir()
	fs, _ := NewFileStore(dir)
	s, err := NewTiered(fs, 1<<20, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	d, _ := s.Hold([]byte("idle person"), "")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n, _, _ := s.Held(); n == 0 && files(t, dir) == 1 { // one pack
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

// A package appended for a stop is on disk once Append returns: a store
// opened on the directory after the process died (no Sync, no Close) has
// it.
func TestTieredAppendOutlivesTheProcess(t *testing.T) {
	dir := t.TempDir()
	fs, _ := NewFileStore(dir)
	s, err := NewTiered(fs, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var ds []string
	for i := range 100 {
		d, err := s.Append([]byte{byte(i), 1, 2, 3}, "")
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	again, err := NewTiered(fs, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for i, d := range ds {
		if b, err := again.Get(d); err != nil || b[0] != byte(i) {
			t.Fatalf("package %d after the process died: %v", i, err)
		}
	}
	// Deleting them all removes the pack once it is sealed.
	_ = s.Close()
	for _, d := range ds {
		if err := again.Delete(d); err != nil {
			t.Fatal(err)
		}
	}
	if n := files(t, dir); n != 0 {
		t.Fatalf("%d files left after every package was deleted", n)
	}
}

// The open pack is rotated past packRotate; every pack is flushed by Sync,
// and each file goes with its last entry.
func TestTieredRotatesPacks(t *testing.T) {
	defer func(n int64) { packRotate = n }(packRotate)
	packRotate = 200
	dir := t.TempDir()
	fs, _ := NewFileStore(dir)
	s, err := NewTiered(fs, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var ds []string
	for i := range 20 {
		d, err := s.Append([]byte(fmt.Sprintf("package %02d of a stop", i)), "")
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if n := files(t, dir); n < 3 {
		t.Fatalf("%d pack files for 20 packages past a 200-byte rotation", n)
	}
	if err := s.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, d := range ds {
		if b, err := s.Get(d); err != nil || !strings.Contains(string(b), fmt.Sprintf("%02d", i)) {
			t.Fatalf("package %d: %q %v", i, b, err)
		}
		if err := s.Delete(d); err != nil {
			t.Fatal(err)
		}
	}
	if n := files(t, dir); n != 0 {
		t.Fatalf("%d files left after every package was deleted", n)
	}
}

// The open pack goes with its last entry too (nothing of a forgotten
// person stays on disk), and the next append opens another.
func TestTieredRemovesAnEmptiedOpenPack(t *testing.T) {
	dir := t.TempDir()
	fs, _ := NewFileStore(dir)
	s, err := NewTiered(fs, 1<<20, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := s.Append([]byte("ann's package"), "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.Append([]byte("bob's package"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(a); err != nil {
		t.Fatal(err)
	}
	if n := files(t, dir); n != 1 {
		t.Fatalf("%d files with bob's package left in the open pack, want 1", n)
	}
	if err := s.Delete(b); err != nil {
		t.Fatal(err)
	}
	if n := files(t, dir); n != 0 {
		t.Fatalf("%d files left after the open pack's last package was deleted", n)
	}
	c, err := s.Append([]byte("cy's package"), "")
	if err != nil {
		t.Fatalf("appending after the open pack went: %v", err)
	}
	if got, err := s.Get(c); err != nil || string(got) != "cy's package" {
		t.Fatalf("cy's package: %q %v", got, err)
	}
	if n := files(t, dir); n != 1 {
		t.Fatalf("%d files with cy's package, want 1", n)
	}
}
