package e2e

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// A stop with 30,000 connections (anonymous page views, as crawlers and
// passers-by leave them) and 40 logged-in people typing, within a 30 s
// shutdown_timeout: the people who matter are parked first, and every
// logged-in person comes back after the restart with their login and
// their page, resumed without a resync.
func TestStopWithThirtyThousandConnections(t *testing.T) {
	const anonymous, people = 30_000, 40
	p := newProcSpec(t, procSpec{workers: 2, name: "solo", expect: 1, front: "  newcomer_rate = 0\n",
		extra: []string{"shutdown_timeout = \"30s\"\n"}})
	p.start()
	var (
		wg     sync.WaitGroup
		next   atomic.Int64
		failed atomic.Int64
	)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 30 * time.Second}
			for next.Add(1) <= anonymous {
				resp, err := c.Get("http://" + p.front + "/")
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	tabs := make([]*tab, people)
	for i := range tabs {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=p"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = b.openTab("typing")
		for range 3 {
			tabs[i].send(map[string]any{"op": "inc"})
		}
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.Fatalf("%d of the %d page views failed", failed.Load(), anonymous)
	}
	began := time.Now()
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, p.out)
	}
	stopped := time.Since(began)
	for _, tb := range tabs {
		tb.ws.Close()
	}
	p.start()
	rep := p.health().Restart
	t.Logf("stopped in %v; the restart found %d parked, %d missing", stopped.Round(time.Millisecond), rep.Parked, rep.Missing)
	if rep.Parked < people || rep.Missing != 0 || len(rep.Incomplete) != 0 {
		t.Fatalf("restart report %+v", rep)
	}
	for i, tb := range tabs {
		if w := tb.b.whoami(); w.User != "p"+strconv.Itoa(i) {
			t.Fatalf("person %d is %+v after the restart", i, w)
		}
		ans := tb.connect()
		if ans.Opened.Resync || ans.Opened.Notice != "" {
			t.Fatalf("person %d's page did not resume: %+v", i, ans.Opened)
		}
		tb.drainUntil("count", 3)
	}
}
