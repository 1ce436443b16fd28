package worker

import (
	"errors"
	"os"
	"syscall"
)

// mmapSupported says templates work here: the image is mapped and locked
// with Linux's mmap and flock.
const mmapSupported = true

// mapFile maps the first size bytes of f read-only and shared: every worker
// that maps the same file reads the same page-cache pages, and a write
// faults.
func mapFile(f *os.File, size int) ([]byte, error) {
	return syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ, syscall.MAP_SHARED)
}

func unmap(b []byte) error { return syscall.Munmap(b) }

// readOnlyCopy copies b into fresh anonymous memory and makes it read-only.
// The mapping is page-aligned, which meets the Engine contract's 8 bytes.
func readOnlyCopy(b []byte) (*engineImage, error) {
	if len(b) == 0 {
		return &engineImage{payload: []byte{}}, nil
	}
	mem, err := syscall.Mmap(-1, 0, len(b), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	copy(mem, b)
	if err := syscall.Mprotect(mem, syscall.PROT_READ); err != nil {
		_ = syscall.Munmap(mem)
		return nil, err
	}
	return &engineImage{mem: mem, payload: mem, release: unmap}, nil
}

// tryLock takes f's exclusive flock without waiting; false means another
// open file holds it.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
