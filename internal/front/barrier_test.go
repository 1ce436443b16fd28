package front

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/stickyd/stickyd/internal/placement"
)

// fakeDir is a Directory over one mutable route.
type fakeDir struct {
	mu    sync.Mutex
	rt    placement.Route
	watch chan struct{}
}

func (d *fakeDir) Lookup(conn string) (placement.Route, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.rt, conn == d.rt.Conn
}
func (d *fakeDir) Place(context.Context) (string, error) { return "", nil }
func (d *fakeDir) Connect(context.Context, string, string, string) (placement.Route, error) {
	return placement.Route{}, nil
}
func (d *fakeDir) Login(context.Context, string, string, map[string]string) (placement.Route, string, error) {
	return placement.Route{}, "", nil
}
func (d *fakeDir) Watch(string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.watch == nil {
		d.watch = make(chan struct{})
	}
	return d.watch
}

func (d *fakeDir) set(rt placement.Route) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.rt = rt
	if d.watch != nil {
		close(d.watch)
		d.watch = nil
	}
}

func TestBarrier(t *testing.T) {
	dir := &fakeDir{rt: placement.Route{Conn: "c", User: "u", Worker: "w1", Epoch: 1, Moving: true}}
	reg := prometheus.NewRegistry()
	b := newBarrier(dir, Config{BarrierWait: 200 * time.Millisecond, MaxHeldPerUser: 2, MaxHeld: 3}, reg)

	// A held frame proceeds to the new home when the barrier drops.
	got := make(chan placement.Route, 1)
	go func() {
		rt, err := b.route(t.Context(), "c", 0)
		if err != nil {
			t.Error(err)
		}
		got <- rt
	}()
	waitHeld(t, b, 1)
	dir.set(placement.Route{Conn: "c", User: "u", Worker: "w2", Epoch: 2})
	if rt := <-got; rt.Worker != "w2" || rt.Epoch != 2 {
		t.Fatalf("released to %+v", rt)
	}

	// Past the deadline: a retryable refusal, counted.
	dir.set(placement.Route{Conn: "c", User: "u", Worker: "w2", Epoch: 3, Moving: true})
	if _, err := b.route(t.Context(), "c", 0); !errors.Is(err, errBarrierTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if n := testutil.ToFloat64(b.rejections.WithLabelValues("timeout")); n != 1 {
		t.Fatalf("timeout rejections counted %v", n)
	}

	// Per-user cap: the third concurrent frame of one person is refused at once.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = b.route(ctx, "c", 0)
		}()
	}
	waitHeld(t, b, 2)
	if _, err := b.route(t.Context(), "c", 0); !errors.Is(err, errBarrierFull) {
		t.Fatalf("per-user cap: %v", err)
	}
	if n := testutil.ToFloat64(b.rejections.WithLabelValues("per_user_cap")); n != 1 {
		t.Fatalf("per-user rejections counted %v", n)
	}
	cancel()
	wg.Wait()
	waitHeld(t, b, 0)

	// A MOVED answer waits for a newer epoch even when nobody is moving
	// (the resend to a rolled-back move's worker held off for the test).
	b.rolledBack = time.Minute
	b.wait = time.Minute
	dir.set(placement.Route{Conn: "c", User: "u", Worker: "w2", Epoch: 3})
	go func() {
		waitHeld(t, b, 1)
		dir.set(placement.Route{Conn: "c", User: "u", Worker: "w3", Epoch: 4})
	}()
	if rt, err := b.route(t.Context(), "c", 4); err != nil || rt.Worker != "w3" {
		t.Fatalf("wait for epoch 4: %+v %v", rt, err)
	}
	// A rolled-back move: no newer epoch comes; the frame goes again to
	// the worker the maps name, after rolledBack.
	b.rolledBack = 10 * time.Millisecond
	if rt, err := b.route(t.Context(), "c", 5); err != nil || rt.Worker != "w3" || rt.Epoch != 4 {
		t.Fatalf("resend after a roll-back: %+v %v", rt, err)
	}
	if _, err := b.route(t.Context(), "unknown", 0); err != errNoConnection {
		t.Fatalf("unknown connection: %v", err)
	}
}

func waitHeld(t *testing.T, b *barrier, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.mu.Lock()
		held := b.heldTotal
		b.mu.Unlock()
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("held %d, want %d", held, n)
		}
		time.Sleep(time.Millisecond)
	}
}
