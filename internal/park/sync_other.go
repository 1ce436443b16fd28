//go:build !linux

package park

import (
	"os"
	"path/filepath"
)

// syncFS fsyncs every file in dir where there is no syncfs.
func syncFS(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := syncFile(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
