package worker

import (
	"fmt"
	goruntime "runtime"
	"testing"
	"time"
)

// gridRows is a page shaped like a back-office grid: rows of a few short
// strings and numbers and a small array, the shape of the demo app's
// orders (about 100 bytes a row encoded).
func gridRows(n int) []any {
	rows := make([]any, n)
	for i := range rows {
		rows[i] = map[string]any{
			"id":       float64(i),
			"customer": fmt.Sprintf("customer-%06d", i%5000),
			"city":     []string{"Lyon", "Paris", "Nantes", "Lille"}[i%4],
			"qty":      float64(i % 17),
			"price":    float64(i%1000) + 0.25,
			"status":   []string{"open", "shipped", "closed"}[i%3],
			"tags":     []any{"a", fmt.Sprintf("t%d", i%7)},
		}
	}
	return rows
}

// heapAfterGC is the heap in use after two collections.
func heapAfterGC() uint64 {
	goruntime.GC()
	goruntime.GC()
	var m goruntime.MemStats
	goruntime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkPage10MB measures a 10 MB page (a grid of 100,000 rows) in a
// worker: the live heap it holds beside its encoded size, the time to open
// it from a package (decodeTree: a wake after a move or a restart), what a
// first write into one row then costs (time, and heap beside the page's)
// and a second into another row (heap), the time to encode it again (a
// move or a checkpoint), and to build it with Tree.Set (an app's OpenPage),
// without a delta and with one (a page's tree). Run it alone, in
// plugins/worker (the SDK's module):
//
//	go test -run '^$' -bench Page10MB -benchtime 3x .
func BenchmarkPage10MB(b *testing.B) {
	rows := gridRows(100_000)
	src := &Tree{root: map[string]any{}}
	if err := src.Set("rows", rows); err != nil {
		b.Fatal(err)
	}
	enc, err := encodeTree(src)
	if err != nil {
		b.Fatal(err)
	}
	src, rows = nil, nil
	b.ReportAllocs()
	b.ResetTimer()
	var decode, write, encode, build, buildDelta time.Duration
	var heap, wrote, wrote2 int64
	for b.Loop() {
		before := heapAfterGC()
		began := time.Now()
		t := &Tree{}
		if err := decodeTree(t, enc); err != nil {
			b.Fatal(err)
		}
		decode += time.Since(began)
		heap = int64(heapAfterGC() - before)

		began = time.Now()
		if err := t.Set("rows/50000/qty", 3); err != nil {
			b.Fatal(err)
		}
		write += time.Since(began)
		wrote = int64(heapAfterGC()-before) - heap
		if err := t.Set("rows/70000/qty", 4); err != nil {
			b.Fatal(err)
		}
		wrote2 = int64(heapAfterGC()-before) - heap - wrote

		began = time.Now()
		again, err := encodeTree(t)
		if err != nil || len(again) != len(enc) {
			b.Fatalf("encoded again: %d bytes (%v), want %d", len(again), err, len(enc))
		}
		encode += time.Since(began)
		goruntime.KeepAlive(t)
		t, again = nil, nil

		r := gridRows(100_000)
		began = time.Now()
		t2 := &Tree{root: map[string]any{}}
		if err := t2.Set("rows", r); err != nil {
			b.Fatal(err)
		}
		build += time.Since(began)
		goruntime.KeepAlive(t2)

		// As a page's OpenPage does: with its delta written.
		began = time.Now()
		t3 := newTree(func(deltaOp, string, []byte) {})
		if err := t3.Set("rows", r); err != nil {
			b.Fatal(err)
		}
		buildDelta += time.Since(began)
		goruntime.KeepAlive(t3)
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(float64(len(enc))/(1<<20), "encoded-MiB")
	b.ReportMetric(float64(heap)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(heap)/float64(len(enc)), "heap/encoded")
	b.ReportMetric(ms(decode), "open-ms")
	b.ReportMetric(ms(write), "write1-ms")
	b.ReportMetric(float64(wrote)/(1<<20), "write1-MiB")
	b.ReportMetric(float64(wrote2)/(1<<10), "write2-KiB")
	b.ReportMetric(ms(encode), "encode-ms")
	b.ReportMetric(ms(build), "build-ms")
	b.ReportMetric(ms(buildDelta), "build+delta-ms")
}
