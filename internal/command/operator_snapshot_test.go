package command

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"
)

func TestOperatorSnapshotSave(t *testing.T) {
	f := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/operator/snapshot": func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("the maps, as raft keeps them"))
	}})
	file := filepath.Join(t.TempDir(), "backup.snap")
	r := run(t, f.args("operator", "snapshot", "save", file)...)
	r.expect(t, 0, []string{"Saved the maps to", "(28 bytes)"}, nil)
	if b, err := os.ReadFile(file); err != nil || string(b) != "the maps, as raft keeps them" {
		t.Fatalf("the file holds %q (%v)", b, err)
	}
	// No file named: a usage error.
	run(t, f.args("operator", "snapshot", "save")...).expect(t, 1, nil, []string{"Usage: stickyd operator snapshot save"})
	// A server that cannot take one: the message, exit 1, no file.
	bad := newFakeAPI(t, map[string]http.HandlerFunc{"GET /v1/operator/snapshot": answer(503, map[string]string{"error": "no snapshot to open"})})
	other := filepath.Join(t.TempDir(), "none.snap")
	run(t, bad.args("operator", "snapshot", "save", other)...).expect(t, 1, nil, []string{"no snapshot to open"})
	if _, err := os.Stat(other); !os.IsNotExist(err) {
		t.Fatalf("a failed save left %s (%v)", other, err)
	}
}
