package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// The probe is the proof of life: a worker that stops answering (SIGSTOP)
// is killed and relaunched, with the cause recorded; its numbers are
// recorded while it answers.
func TestSilentWorkerIsReplaced(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, func(c *agent.Config) {
		c.Probe = &agent.ProbeConfig{Interval: "200ms", Misses: 3}
	})
	b := newBrowser(t, a)
	b.do("GET", "/")
	tb := b.openTab("p")
	tb.send(map[string]any{"op": "inc"})
	home := b.whoami().Worker
	waitFor(t, 10*time.Second, "a probe reading", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == home && !w.LastProbe.IsZero() && w.Pages == 1 && w.Conns == 1 && w.RSSBytes > 0 && w.CPUSeconds > 0 {
				return true
			}
		}
		return false
	})
	var victim host.WorkerInfo
	for _, w := range a.Pool().Workers() {
		if w.ID != home {
			victim = w
		}
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "the silent worker to be relaunched", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == victim.ID {
				return w.State == host.StateReady && w.Incarnation == 2 && strings.Contains(w.HowDied, "silence")
			}
		}
		return false
	})
	if err := syscall.Kill(victim.Pid, 0); err == nil {
		// Stopped processes still exist until reaped; it must be gone.
		waitFor(t, 5*time.Second, "the silent process to be gone", func() bool {
			return syscall.Kill(victim.Pid, 0) == syscall.ESRCH
		})
	}
	// The other worker's person never noticed.
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 2)
}
