package e2e

import (
	"encoding/json"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopShape is a population stopped and started while it types.
type stopShape struct {
	big, bigBytes     int // people with large pages, and the size
	small, smallBytes int
	cycles            int
	freeze            string // move.freeze_timeout
}

// A stop parks everyone, large pages included, even when a freeze takes
// far longer than move.freeze_timeout, while everyone keeps typing: on the
// way down a freeze gets a share of the stop's time, and one that still
// runs out is tried again while shutdown_timeout remains. Each page's
// count after every restart is the one its person saw answered (or one
// more, when the last message's answer was cut by the stop: it ran), so no
// page is restored from a checkpoint (that would lose its last messages)
// and nobody is lost. The default run is small; `make soak-stop` runs the
// shape of the issue: 20 people × 10 MB and 50 × 1 MB, freeze_timeout 1 s,
// 10 stops (STICKYD_SOAK_STOP=1).
func TestStopParksLargePages(t *testing.T) {
	shape := stopShape{big: 20, bigBytes: 2 << 20, small: 10, smallBytes: 256 << 10, cycles: 2, freeze: "50ms"}
	if os.Getenv("STICKYD_SOAK_STOP") != "" {
		shape = stopShape{big: 20, bigBytes: 10 << 20, small: 50, smallBytes: 1 << 20, cycles: 10, freeze: "1s"}
	}
	stopWhileTyping(t, shape)
}

func stopWhileTyping(t *testing.T, shape stopShape) {
	p := newProcWith(t, 2, "solo", 1, nil, "", `move { freeze_timeout = "`+shape.freeze+`" }`)
	p.start()
	type person struct {
		tb        *tab
		confirmed int  // the count last answered
		unsure    bool // a message was sent whose answer the stop cut
	}
	var all []*person
	for i := range shape.big + shape.small {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=big"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tb := b.openTab("p")
		size := shape.bigBytes
		if i >= shape.big {
			size = shape.smallBytes
		}
		sendRetrying(t, tb, map[string]any{"op": "fill", "bytes": size})
		tb.send(map[string]any{"op": "inc"})
		all = append(all, &person{tb: tb, confirmed: 1})
	}
	count := func(a answer) (int, bool) {
		var v map[string]any
		if a.Op != "reply" || json.Unmarshal(a.Data, &v) != nil {
			return 0, false
		}
		n, ok := v["count"].(float64)
		return int(n), ok
	}
	for cycle := 1; cycle <= shape.cycles; cycle++ {
		// Everyone types until the stop cuts their connection.
		var wg sync.WaitGroup
		for _, pp := range all {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					a, err := pp.tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
					n, ok := count(a)
					if err != nil || !ok {
						pp.unsure = true // the stop: did it run?
						return
					}
					if n != pp.confirmed+1 {
						t.Errorf("a page counted %d after %d", n, pp.confirmed)
						return
					}
					pp.confirmed = n
					time.Sleep(20 * time.Millisecond)
				}
			}()
		}
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("stop %d: the agent exited with %v (someone was not parked):\n%s", cycle, err, p.out)
		}
		stopped := time.Since(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		p.start()
		if h := p.health(); h.Restart.Parked != len(all) || h.Restart.Missing != 0 {
			t.Fatalf("after stop %d: %+v, want %d parked and none missing", cycle, h.Restart, len(all))
		}
		for i, pp := range all {
			pp.tb.connect()
			n, ok := count(sendRetrying(t, pp.tb, map[string]any{"op": "inc"}))
			switch {
			case ok && n == pp.confirmed+1, ok && pp.unsure && n == pp.confirmed+2:
				pp.confirmed, pp.unsure = n, false
			default:
				t.Fatalf("after stop %d, person %d's page counts %d, want %d (or one more, the message the stop cut)", cycle, i, n, pp.confirmed+1)
			}
		}
		t.Logf("stop %d: %d people (%d × %d MB, %d × %d KB) parked in %v while typing, all back, every count kept",
			cycle, len(all), shape.big, shape.bigBytes>>20, shape.small, shape.smallBytes>>10, stopped.Round(time.Millisecond))
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
