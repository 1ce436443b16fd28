package lifecycle

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/front"
)

// The forgetter looks every tenth of forget_after, within 250 ms and 10
// minutes; off, it still stamps every 10 minutes.
func TestForgetEvery(t *testing.T) {
	for _, c := range []struct{ after, want time.Duration }{
		{0, 10 * time.Minute},
		{time.Second, 250 * time.Millisecond},
		{time.Minute, 6 * time.Second},
		{24 * time.Hour, 10 * time.Minute},
	} {
		f, err := NewForgetter(ForgetConfig{After: c.after})
		if err != nil {
			t.Fatal(err)
		}
		if got := f.every(); got != c.want {
			t.Errorf("every(%v) = %v, want %v", c.after, got, c.want)
		}
	}
}

// Its metrics are registered on the registry it is given, once.
func TestForgetMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewForgetter(ForgetConfig{Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewForgetter(ForgetConfig{Registry: reg}); err == nil {
		t.Fatal("registered twice")
	}
}

// Run looks every interval (a full disk keeps it from stamping) and
// returns once stop closes, leaving no goroutine behind.
func TestForgetRunStops(t *testing.T) {
	defer goleak.VerifyNone(t)
	var looks atomic.Int32
	f, err := NewForgetter(ForgetConfig{After: time.Second, Activity: front.NewActivity(),
		DiskFull: func() bool { looks.Add(1); return true }})
	if err != nil {
		t.Fatal(err)
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); f.Run(stop) }()
	deadline := time.Now().Add(5 * time.Second)
	for looks.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("looked %d times in 5s", looks.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
}
