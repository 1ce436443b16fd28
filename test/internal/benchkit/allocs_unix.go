//go:build unix

package benchkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// WorkerAllocsEnv, set to a directory in a worker subprocess's
// environment, makes it write its HeapAllocObjects to DIR/PID at every
// SIGUSR2 (see AllocsOnSignal, ReadAllocs): a worker has no listener a
// benchmark could ask, and its heap allocations per message are part of
// what a message costs.
const WorkerAllocsEnv = "STICKYD_BENCH_WORKER_ALLOCS_DIR"

// AllocsOnSignal writes this process's HeapAllocObjects to dir/PID at every
// SIGUSR2, whole or not at all (written aside, then renamed).
func AllocsOnSignal(dir string) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	name := filepath.Join(dir, strconv.Itoa(os.Getpid()))
	go func() {
		for range ch {
			n := HeapAllocObjects()
			tmp := name + ".tmp"
			if os.WriteFile(tmp, []byte(strconv.FormatUint(n, 10)), 0o644) == nil {
				_ = os.Rename(tmp, name)
			}
		}
	}()
}

// ReadAllocs asks process pid, which runs AllocsOnSignal(dir), for its
// HeapAllocObjects: it removes the last answer, sends SIGUSR2 and waits
// for the new one until ctx ends.
func ReadAllocs(ctx context.Context, pid int, dir string) (uint64, error) {
	name := filepath.Join(dir, strconv.Itoa(pid))
	if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, err
	}
	if err := syscall.Kill(pid, syscall.SIGUSR2); err != nil {
		return 0, fmt.Errorf("asking process %d for its allocations: %w", pid, err)
	}
	for {
		b, err := os.ReadFile(name)
		if err == nil {
			n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("process %d's allocations: %w", pid, err)
			}
			return n, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for process %d's allocations (does it run AllocsOnSignal?): %w", pid, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}
