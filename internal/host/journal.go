package host

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// FileJournal is the CheckpointJournal of an agent with a data directory:
// one file per worker (data_dir/restart/checkpoints/<worker>.json). A file
// is written to a temporary name and renamed, so it is whole or absent; it
// is not fsynced (nor are the pieces it names): it survives the agent's
// crash, not the machine's.
type FileJournal struct{ dir string }

var _ CheckpointJournal = (*FileJournal)(nil)

// NewFileJournal keeps the journal in dir, created at the first Save.
func NewFileJournal(dir string) *FileJournal { return &FileJournal{dir: dir} }

func (j *FileJournal) path(worker string) string {
	return filepath.Join(j.dir, url.PathEscape(worker)+".json")
}

// Save implements CheckpointJournal.
func (j *FileJournal) Save(worker string, record []byte) error {
	if record == nil {
		if err := os.Remove(j.path(worker)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the checkpoint record of %s: %w", worker, err)
		}
		return nil
	}
	if err := os.MkdirAll(j.dir, 0o700); err != nil {
		return fmt.Errorf("creating the checkpoint journal: %w", err)
	}
	f, err := os.CreateTemp(j.dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op after the rename
	if _, err := f.Write(record); err != nil {
		f.Close()
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing the checkpoint record of %s: %w", worker, err)
	}
	if err := os.Rename(tmp, j.path(worker)); err != nil {
		return fmt.Errorf("naming the checkpoint record of %s: %w", worker, err)
	}
	return nil
}

// Load implements CheckpointJournal. It removes the writes a crash cut
// short.
func (j *FileJournal) Load() (map[string][]byte, error) {
	entries, err := os.ReadDir(j.dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the checkpoint journal: %w", err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			_ = os.Remove(filepath.Join(j.dir, e.Name())) // a write the crash cut short
			continue
		}
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if e.IsDir() || !ok {
			continue
		}
		worker, err := url.PathUnescape(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(j.dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("reading the checkpoint record of %s: %w", worker, err)
		}
		out[worker] = b
	}
	return out, nil
}
