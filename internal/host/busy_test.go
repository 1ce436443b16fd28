package host

import (
	"os"
	"testing"
	"time"
)

// A process that computes shows progress; one that does not, none; a
// process that cannot be read shows none.
func TestProgressReadsCPU(t *testing.T) {
	if _, err := cpuTicks(os.Getpid()); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	p := progress{pid: os.Getpid()}
	if p.moved(0) {
		t.Fatal("the first reading reported progress")
	}
	// Burn 200 ms of CPU: 20 ticks.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end); {
	}
	if !p.moved(5) {
		t.Fatal("200 ms of computing is not 5 ticks of progress")
	}
	time.Sleep(100 * time.Millisecond)
	if p.moved(5) {
		t.Fatal("a sleeping process made 5 ticks of progress")
	}
	if (&progress{pid: 0}).moved(0) || (&progress{pid: 1 << 30}).moved(0) {
		t.Fatal("progress of no process")
	}
	if got := busyTicks(2 * time.Second); got != 50 {
		t.Fatalf("busyTicks(2s) = %d, want 50", got)
	}
}
