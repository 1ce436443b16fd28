package park

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the whole file system holding dir: one call for every
// package written since, instead of an fsync each.
func syncFS(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return unix.Syncfs(int(d.Fd()))
}
