package host

import (
	"os"
	"path/filepath"
	"testing"
)

// The journal keeps one whole record per worker; a removed one is gone, and
// a write a crash cut short is neither read nor left behind.
func TestCheckpointFileJournal(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	j := NewFileJournal(dir)
	if got, err := j.Load(); err != nil || len(got) != 0 {
		t.Fatalf("an empty journal: %v %v", got, err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", []byte(`{"b":2}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-1", []byte(`{"a":3}`)); err != nil {
		t.Fatal(err)
	}
	if err := j.Save("s1.web-2", nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".tmp-cut"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := j.Load()
	if err != nil || len(got) != 1 || string(got["s1.web-1"]) != `{"a":3}` {
		t.Fatalf("loaded %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".tmp-cut")); !os.IsNotExist(err) {
		t.Fatalf("a cut write was left behind: %v", err)
	}
}
