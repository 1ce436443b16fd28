package worker

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// usage returns the process's CPU time in seconds and its resident memory.
func usage() (float64, uint64) {
	var ru syscall.Rusage
	var cpu float64
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu = float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	}
	// statm's second field is the resident set, in pages.
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return cpu, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return cpu, 0
	}
	pages, _ := strconv.ParseUint(f[1], 10, 64)
	return cpu, pages * uint64(os.Getpagesize())
}
