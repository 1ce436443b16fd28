package e2e

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// A stop parks everyone, large pages included, even when a freeze takes
// longer than move.freeze_timeout: on the way down a freeze gets a share
// of the stop's time, and one that still runs out is tried again while
// shutdown_timeout remains. 20 people with 2 MB pages and
// freeze_timeout = "50ms" (a 2 MB freeze takes longer, the more so under
// the race detector), stopped and started twice: nobody lost, every count
// where it was.
func TestStopParksLargePages(t *testing.T) {
	const people, pageBytes, cycles = 20, 2 << 20, 2
	p := newProcWith(t, 2, "solo", 1, nil, "", `move { freeze_timeout = "50ms" }`)
	p.start()
	type person struct {
		tb    *tab
		count int
	}
	var all []*person
	for i := range people {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=big"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tb := b.openTab("p")
		sendRetrying(t, tb, map[string]any{"op": "fill", "bytes": pageBytes})
		tb.send(map[string]any{"op": "inc"})
		all = append(all, &person{tb: tb, count: 1})
	}
	for cycle := 1; cycle <= cycles; cycle++ {
		start := time.Now()
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("stop %d: the agent exited with %v (someone was not parked):\n%s", cycle, err, p.out)
		}
		stopped := time.Since(start)
		p.start()
		if h := p.health(); h.Restart.Parked != people || h.Restart.Missing != 0 {
			t.Fatalf("after stop %d: %+v, want %d parked and none missing", cycle, h.Restart, people)
		}
		for _, pp := range all {
			pp.tb.connect()
			pp.tb.send(map[string]any{"op": "inc"})
			pp.count++
			pp.tb.drainUntil("count", pp.count)
		}
		t.Logf("stop %d: %d people with %d MB pages parked in %v, all back", cycle, people, pageBytes>>20, stopped.Round(time.Millisecond))
	}
}

// sendRetrying sends a message, again while the answer says to retry (a
// worker still starting), for at most a minute.
func sendRetrying(t *testing.T, tb *tab, data map[string]any) answer {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		a, err := tb.tryOp(map[string]any{"op": "msg", "data": data})
		if err != nil {
			t.Fatal(err)
		}
		if a.Error == "" || !a.Retry || time.Now().After(deadline) {
			if a.Error != "" {
				t.Fatalf("msg %v: %+v", data, a)
			}
			return a
		}
		time.Sleep(100 * time.Millisecond)
	}
}
