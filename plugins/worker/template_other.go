//go:build !linux

package worker

import (
	"errors"
	"os"
	"unsafe"
)

// mmapSupported is false: templates are Linux-only, and elsewhere every
// worker builds its own engine (on the heap, not write-protected).
const mmapSupported = false

var errNoMmap = errors.New("engine templates need Linux")

func mapFile(*os.File, int) ([]byte, error) { return nil, errNoMmap }

func unmap([]byte) error { return nil }

// readOnlyCopy copies b to memory aligned to 8 bytes, as the Engine
// contract says; it cannot protect it here.
func readOnlyCopy(b []byte) (*engineImage, error) {
	if len(b) == 0 {
		return &engineImage{payload: []byte{}}, nil
	}
	words := make([]uint64, (len(b)+7)/8)
	mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(b))
	copy(mem, b)
	return &engineImage{payload: mem}, nil
}

func tryLock(*os.File) (bool, error) { return false, errNoMmap }
