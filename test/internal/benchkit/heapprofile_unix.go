//go:build unix

package benchkit

import (
	"fmt"
	"os"
	"os/signal"
	goruntime "runtime"
	"runtime/pprof"
	"syscall"
)

// HeapProfileOnSignal writes a heap profile to prefix.PID.N at every
// SIGUSR1 this process receives, after a collection.
func HeapProfileOnSignal(prefix string) {
	goruntime.MemProfileRate = 16 << 10
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		for n := 0; ; n++ {
			<-ch
			goruntime.GC()
			out, err := os.Create(fmt.Sprintf("%s.%d.%d", prefix, os.Getpid(), n))
			if err != nil {
				continue
			}
			_ = pprof.Lookup("heap").WriteTo(out, 0)
			out.Close()
		}
	}()
}
