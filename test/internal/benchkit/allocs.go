package benchkit

import "runtime/metrics"

// allocsMetric counts the heap objects a Go process has allocated since it
// started. Reading it stops nothing and collects nothing, so a benchmark
// can read it before and after a load and divide by what the load did.
const allocsMetric = "/gc/heap/allocs:objects"

// HeapAllocObjects is how many heap objects this process has allocated
// since it started.
func HeapAllocObjects() uint64 {
	s := []metrics.Sample{{Name: allocsMetric}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}
