package consul

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/stickyd/stickyd/internal/testagents"
)

// recorder collects what a watch saw.
type recorder struct {
	mu   sync.Mutex // guards seen
	seen []string
}

func (r *recorder) fn(value []byte, exists bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if exists {
		r.seen = append(r.seen, "="+string(value))
	} else {
		r.seen = append(r.seen, "absent")
	}
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// startWatch runs c.Watch in a goroutine that the test waits for.
func startWatch(t *testing.T, c *Client, key string) *recorder {
	t.Helper()
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Watch(ctx, key, r.fn) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Watch returned %v; want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Watch did not return after its context was canceled")
		}
	})
	return r
}

func TestWatch(t *testing.T) {
	agent := testagents.StartConsul(t)
	c := newClient(t, agent, "")
	kv := agent.Client().KV()
	key := "stickyd/maintenance/drain"

	r := startWatch(t, c, "maintenance/drain")
	var want []string
	expect := func(step string, w string) {
		t.Helper()
		want = append(want, w)
		waitFor(t, 10*time.Second, step, func() bool { return len(r.get()) >= len(want) })
		if got := r.get(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after %s the watch saw %q; want %q", step, got, want)
		}
	}
	put := func(v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: key, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}

	expect("start", "absent")
	put("host-1")
	expect("put", "=host-1")
	if _, err := kv.Delete(key, nil); err != nil {
		t.Fatal(err)
	}
	expect("delete", "absent")
	put("host-2")
	expect("put again", "=host-2")

	// Writes that do not change the value, and writes to other keys, wake
	// the query but are not reported.
	put("host-2")
	if _, err := kv.Put(&api.KVPair{Key: "stickyd/maintenance/other", Value: []byte("x")}, nil); err != nil {
		t.Fatal(err)
	}
	put("")
	expect("put empty", "=")

	// A quick burst is seen in order, ending with the last value.
	for i := 0; i < 20; i++ {
		put(fmt.Sprintf("v%02d", i))
	}
	waitFor(t, 10*time.Second, "the last value of the burst", func() bool {
		s := r.get()
		return s[len(s)-1] == "=v19"
	})
	last := -1
	for _, s := range r.get()[len(want):] {
		var i int
		if _, err := fmt.Sscanf(s, "=v%02d", &i); err != nil || i <= last {
			t.Fatalf("burst seen out of order: %q", r.get()[len(want):])
		}
		last = i
	}
}

func TestWatchUnreachable(t *testing.T) {
	down, err := New(Config{Address: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	called := false
	err = down.Watch(ctx, "maintenance/drain", func([]byte, bool) { called = true })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Watch = %v; want context.DeadlineExceeded", err)
	}
	if called {
		t.Error("fn called though Consul was never reached")
	}
}

func TestWatchConsulComesBack(t *testing.T) {
	agent := testagents.StartConsul(t)
	c := newClient(t, agent, "")
	put := func(v string) {
		t.Helper()
		if _, err := agent.Client().KV().Put(&api.KVPair{Key: "stickyd/k", Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Raise the index well above where a fresh agent starts.
	for i := 0; i < 50; i++ {
		put(fmt.Sprint(i))
	}
	r := startWatch(t, c, "k")
	waitFor(t, 10*time.Second, "the first value", func() bool { return len(r.get()) == 1 })

	// The restarted dev agent has lost the key and its indexes start over;
	// the watch must not wait for the old index to come round again.
	agent.Restart(t)
	waitFor(t, 20*time.Second, "the key to be seen gone", func() bool { return len(r.get()) == 2 })
	put("back")
	waitFor(t, 20*time.Second, "the new value", func() bool { return len(r.get()) == 3 })
	if got, want := fmt.Sprint(r.get()), "[=49 absent =back]"; got != want {
		t.Errorf("watch saw %s; want %s", got, want)
	}
}

func TestNextIndex(t *testing.T) {
	cases := []struct {
		prev, got, want uint64
	}{
		{0, 0, 1}, // never wait on index 0
		{0, 7, 7}, // first answer
		{7, 7, 7}, // timeout, no change
		{7, 9, 9}, // change
		{9, 3, 0}, // went backwards: read again at once
		{9, 0, 0}, // went backwards to zero
		{0, 1, 1}, // after a reset
		{5, 1, 0}, // backwards to one
		{1, 1, 1}, // unchanged at one
		{2, 10, 10},
	}
	for _, tc := range cases {
		if got := nextIndex(tc.prev, tc.got); got != tc.want {
			t.Errorf("nextIndex(%d, %d) = %d; want %d", tc.prev, tc.got, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	var d time.Duration
	for i := 0; i < 20; i++ {
		d = nextBackoff(d)
		if d < backoffMin || d > backoffMax {
			t.Fatalf("backoff %s outside [%s, %s]", d, backoffMin, backoffMax)
		}
		if j := jitter(d); j < d*3/4 || j > d*5/4 {
			t.Fatalf("jitter(%s) = %s; want within 25%%", d, j)
		}
	}
	if d != backoffMax {
		t.Errorf("backoff settled at %s; want %s", d, backoffMax)
	}
}

// WatchTree sees the folder's keys appear, change and go, and nothing of
// the keys beside it.
func TestWatchTree(t *testing.T) {
	agent := testagents.StartConsul(t)
	c := newClient(t, agent, "")
	kv := agent.Client().KV()
	var (
		mu   sync.Mutex
		seen []string
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.WatchTree(ctx, "maintenance/", func(m map[string][]byte) {
			keys := slices.Sorted(maps.Keys(m))
			var parts []string
			for _, k := range keys {
				parts = append(parts, k+"="+string(m[k]))
			}
			mu.Lock()
			seen = append(seen, strings.Join(parts, ","))
			mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchTree returned %v", err)
		}
	})
	var want []string
	expect := func(step, w string) {
		t.Helper()
		want = append(want, w)
		waitFor(t, 10*time.Second, step, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= len(want) })
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("after %s the watch saw %q; want %q", step, seen, want)
		}
	}
	put := func(k, v string) {
		t.Helper()
		if _, err := kv.Put(&api.KVPair{Key: k, Value: []byte(v)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	expect("start", "")
	put("stickyd/maintenance/db-a", "upgrading")
	expect("put", "db-a=upgrading")
	put("stickyd/placement/index", "7") // beside the folder: not seen
	put("stickyd/maintenance/payments", `{"reason":"x"}`)
	expect("second key", `db-a=upgrading,payments={"reason":"x"}`)
	if _, err := kv.Delete("stickyd/maintenance/db-a", nil); err != nil {
		t.Fatal(err)
	}
	expect("delete", `payments={"reason":"x"}`)
	if err := c.WatchTree(context.Background(), "maintenance", nil); err == nil {
		t.Fatal("a folder name without a trailing slash was accepted")
	}
}
