package server

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// waitFor polls cond until it holds or a generous bound passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Across 50 flips of leadership every task starts once a term, after the
// barrier, and none is left running once leadership is lost.
func TestLeadershipStartsAndStopsTasksAcrossFlips(t *testing.T) {
	defer goleak.VerifyNone(t)
	notify := make(chan bool, 16)
	var barriers atomic.Int64
	l := New(nil, notify, func(ctx context.Context) error { barriers.Add(1); return nil })
	var (
		mu      sync.Mutex
		live    = map[string]int{} // task → running instances
		starts  = map[string]int{}
		overlap bool
	)
	for _, name := range []string{"roll back moves", "autopilot", "mirror"} {
		l.Add(name, func(stop <-chan struct{}) {
			mu.Lock()
			live[name]++
			starts[name]++
			overlap = overlap || live[name] > 1
			mu.Unlock()
			<-stop
			mu.Lock()
			live[name]--
			mu.Unlock()
		})
	}
	once := 0
	l.Add("one-off", func(<-chan struct{}) { mu.Lock(); once++; mu.Unlock() })
	l.Start()
	running := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, v := range live {
			n += v
		}
		return n
	}
	const flips = 50
	for i := 1; i <= flips; i++ {
		notify <- true
		waitFor(t, "the tasks to start", func() bool { return running() == 3 })
		if got := l.Terms(); got != uint64(i) {
			t.Fatalf("flip %d: %d terms", i, got)
		}
		notify <- false
		waitFor(t, "the tasks to stop", func() bool { return running() == 0 && l.Running() == 0 })
	}
	l.Stop()
	mu.Lock()
	defer mu.Unlock()
	for name, n := range starts {
		if n != flips {
			t.Errorf("%s started %d times in %d terms", name, n, flips)
		}
	}
	if once != flips || overlap {
		t.Errorf("one-off ran %d times in %d terms; two instances of a task at once: %v", once, flips, overlap)
	}
	if got := barriers.Load(); got != flips {
		t.Errorf("%d barriers for %d terms", got, flips)
	}
}

// Repeated notifications of the same state start nothing twice, and a
// loss while the barrier still fails starts no task at all.
func TestLeadershipIgnoresRepeatsAndLossBeforeBarrier(t *testing.T) {
	defer goleak.VerifyNone(t)
	notify := make(chan bool, 16)
	var fail atomic.Bool
	fail.Store(true)
	var tries atomic.Int64
	l := New(nil, notify, func(ctx context.Context) error {
		tries.Add(1)
		if fail.Load() {
			return errors.New("no quorum")
		}
		return nil
	})
	var starts atomic.Int64
	l.Add("task", func(stop <-chan struct{}) { starts.Add(1); <-stop })
	l.Start()
	notify <- true
	notify <- true
	waitFor(t, "barrier retries", func() bool { return tries.Load() >= 2 })
	notify <- false
	notify <- false
	// Lost before the barrier held: the term is over and nothing started.
	time.Sleep(100 * time.Millisecond)
	if starts.Load() != 0 || l.Terms() != 0 {
		t.Fatalf("%d starts, %d terms before any barrier held", starts.Load(), l.Terms())
	}
	fail.Store(false)
	notify <- true
	notify <- true
	waitFor(t, "the task to start", func() bool { return starts.Load() == 1 })
	time.Sleep(50 * time.Millisecond)
	if starts.Load() != 1 {
		t.Fatalf("a repeated notification started the task again: %d starts", starts.Load())
	}
	// Stop while leading stops the term's tasks.
	l.Stop()
	if l.Running() != 0 {
		t.Fatalf("%d tasks running after Stop", l.Running())
	}
	l.Stop() // idempotent
}

// Stop before Start returns at once.
func TestLeadershipStopBeforeStart(t *testing.T) {
	defer goleak.VerifyNone(t)
	l := New(nil, make(chan bool), func(context.Context) error { return nil })
	l.Stop()
}

// A task added while this server leads starts in the current term, and
// Leading follows the term.
func TestLeadershipAddWhileLeading(t *testing.T) {
	defer goleak.VerifyNone(t)
	notify := make(chan bool, 16)
	l := New(nil, notify, func(context.Context) error { return nil })
	l.Start()
	defer l.Stop()
	if l.Leading() {
		t.Fatal("leading before any notification")
	}
	notify <- true
	waitFor(t, "the term", l.Leading)
	started := make(chan struct{})
	stopped := make(chan struct{})
	l.Add("late", func(stop <-chan struct{}) {
		close(started)
		<-stop
		close(stopped)
	})
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("a task added while leading did not start")
	}
	notify <- false
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the late task was not stopped with its term")
	}
	waitFor(t, "the end of the term", func() bool { return !l.Leading() })
}
