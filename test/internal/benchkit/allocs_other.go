//go:build !unix

package benchkit

import (
	"context"
	"errors"
)

// WorkerAllocsEnv: see allocs_unix.go; unix systems only.
const WorkerAllocsEnv = "STICKYD_BENCH_WORKER_ALLOCS_DIR"

// AllocsOnSignal is for unix systems only.
func AllocsOnSignal(string) {}

// ReadAllocs is for unix systems only.
func ReadAllocs(context.Context, int, string) (uint64, error) {
	return 0, errors.New("reading a process's allocations needs a unix system")
}
