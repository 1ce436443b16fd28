package benchkit

import (
	"bufio"
	"fmt"
	"maps"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Machine describes the machine and Go runtime a benchmark runs on, for the
// report's "machine" line: CPU model, logical CPUs, GOMAXPROCS, Go version,
// OS and architecture.
func Machine() string {
	return fmt.Sprintf("%s, %d logical CPUs, GOMAXPROCS=%d, %s %s/%s",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

// Percentile is the nearest-rank percentile q (0 < q <= 1) of sorted, which
// must be in ascending order; zero if sorted is empty.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}

// FormatDuration writes d in whole microseconds below a millisecond and in
// milliseconds with two decimals from there on ("123 µs", "14.77 ms").
func FormatDuration(d time.Duration) string {
	if d < time.Millisecond {
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}

// Spread says how many pages sit on each worker, by worker id
// ("web-1: 3, web-2: 4"), or "none".
func Spread(perWorker map[string]int) string {
	if len(perWorker) == 0 {
		return "none"
	}
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(perWorker)) {
		parts = append(parts, fmt.Sprintf("%s: %d", w, perWorker[w]))
	}
	return strings.Join(parts, ", ")
}
