//go:build unix

package benchkit

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	goruntime "runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strings"
	"syscall"
)

// HeapProfileOnSignal writes a heap profile to prefix.PID.N at every
// SIGUSR1 this process receives, after a collection, and beside it
// prefix.PID.N.mem: the runtime's memory classes and the process's
// /proc/self/status memory lines, after the memory is given back. With
// STICKYD_BENCH_MEMONLY=1 it writes the second alone and leaves the
// sampling rate of profiles as it is (a finer rate costs memory itself).
func HeapProfileOnSignal(prefix string) {
	memOnly := os.Getenv("STICKYD_BENCH_MEMONLY") == "1"
	if !memOnly {
		goruntime.MemProfileRate = 16 << 10
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for n := 0; ; n++ {
			<-ch
			goruntime.GC()
			name := fmt.Sprintf("%s.%d.%d", prefix, os.Getpid(), n)
			if !memOnly {
				if out, err := os.Create(name); err == nil {
					_ = pprof.Lookup("heap").WriteTo(out, 0)
					out.Close()
				}
			}
			debug.FreeOSMemory()
			_ = os.WriteFile(name+".mem", memClasses(), 0o644)
		}
	}()
}

// CollectOnSignal collects garbage and gives freed memory back to the
// system at every SIGUSR1 this process receives (what HeapProfileOnSignal
// does before its profile): a benchmark reading a worker's resident memory
// reads what it holds, as it does of a Go server through its stats.
func CollectOnSignal() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for range ch {
			for range 3 {
				goruntime.GC() // a stack grown by a burst halves at each
			}
			debug.FreeOSMemory()
		}
	}()
}

// memClasses is the runtime's memory classes in bytes, a line each, then
// the Vm and Rss lines of /proc/self/status.
func memClasses() []byte {
	var b bytes.Buffer
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		if strings.HasPrefix(d.Name, "/memory/classes/") || d.Name == "/gc/heap/live:bytes" {
			samples = append(samples, metrics.Sample{Name: d.Name})
		}
	}
	metrics.Read(samples)
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			fmt.Fprintf(&b, "%s %d\n", s.Name, s.Value.Uint64())
		}
	}
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(st), "\n") {
			if strings.HasPrefix(l, "Rss") || strings.HasPrefix(l, "VmRSS") {
				b.WriteString(l + "\n")
			}
		}
	}
	return b.Bytes()
}
