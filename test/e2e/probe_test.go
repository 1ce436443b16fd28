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

// What a worker's app writes to its stdout and stderr reaches the agent's
// log at info (the default level), attributed to the worker: a Go worker's
// output forwarded by go-plugin.
func TestAppOutputIsLoggedAtInfo(t *testing.T) {
	p := newProc(t, 1)
	p.start()
	b := procBrowser(t, p)
	if code, body := b.do("POST", "/login?user=printer"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("p")
	if ans := tb.send(map[string]any{"op": "print", "text": "hello from the app"}); string(ans.Data) != "true" {
		t.Fatalf("print: %s", ans.Data)
	}
	time.Sleep(500 * time.Millisecond) // the forwarded stdio arrives on its own stream
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	out := p.out.String()
	for _, want := range []string{"stdout: hello from the app", "stderr: hello from the app"} {
		found := false
		for line := range strings.Lines(out) {
			if strings.Contains(line, want) && strings.Contains(line, "[INFO]") && strings.Contains(line, "web-1") {
				found = true
			}
		}
		if !found {
			t.Errorf("no info line with %q from the worker in the agent's log:\n%s", want, out)
		}
	}
}
