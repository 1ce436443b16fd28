package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The global store through real workers: 50 people on 3 workers increment
// one shared counter under grants on overlapping path sets; no update is
// lost. A holder's worker SIGKILLed releases its grant at once; a commit
// after the lease ran out is refused and writes nothing. Once with Go
// workers, once with Python workers.
func TestGrantsAcrossWorkers(t *testing.T) {
	eachRuntime(t, testGrantsAcrossWorkers)
}

func testGrantsAcrossWorkers(t *testing.T, app option) {
	people, each := 50, envInt("STICKYD_GRANT_INCREMENTS", 40)
	if raceEnabled {
		each = envInt("STICKYD_GRANT_INCREMENTS", 10)
	}
	a := startAgentWith(t, "subprocess", 3, withDataDir(t), app)
	workers := a.Pool().Ready()
	tabs := make([]*tab, people)
	for i := range tabs {
		b := newBrowser(t, a)
		user := "g" + strconv.Itoa(i)
		b.do("POST", "/login?user="+user)
		if w := workers[i%len(workers)]; b.whoami().Worker != w {
			if _, err := a.Supervisor().Move(t.Context(), user, w, "test"); err != nil {
				t.Fatal(err)
			}
		}
		tabs[i] = b.openTab("p")
	}
	// Three overlapping shapes of path set, all holding the counter.
	sets := [][]string{{"shared/counter"}, {"shared"}, {"shared/counter", "other/x"}}
	var wg sync.WaitGroup
	errs := make(chan error, people)
	began := time.Now()
	for i, tb := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range each {
				ans, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "sincr", "key": "shared/counter", "paths": sets[i%len(sets)]}})
				if err != nil || ans.Op != "reply" || ans.Error != "" {
					errs <- fmt.Errorf("person %d increment %d: %v %+v", i, n, err, ans)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	ans := tabs[0].send(map[string]any{"op": "sget", "paths": []string{"shared/counter"}})
	var vals map[string]float64
	if err := json.Unmarshal(ans.Data, &vals); err != nil {
		t.Fatal(err)
	}
	if got, want := vals["shared/counter"], float64(people*each); got != want {
		t.Fatalf("the counter reads %v after %v increments: updates were lost", got, want)
	}
	t.Logf("%d people made %d increments under grants in %v (%.0f/s)", people, people*each, elapsed.Round(time.Millisecond), float64(people*each)/elapsed.Seconds())

	// A commit after the lease ran out is refused; nothing is written.
	ans, err := tabs[1].tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "slate", "key": "shared/counter",
		"paths": []string{"shared/counter"}, "lease_ms": 200, "ms": 800}})
	if err != nil || ans.Error == "" || !strings.Contains(ans.Error, "no longer held") {
		t.Fatalf("a commit past its lease: %v %+v", err, ans)
	}
	ans = tabs[0].send(map[string]any{"op": "sget", "paths": []string{"shared/counter"}})
	if err := json.Unmarshal(ans.Data, &vals); err != nil || vals["shared/counter"] != float64(people*each) {
		t.Fatalf("a refused commit wrote: %v %v", vals, err)
	}

	// A holder's worker dies: its grant goes with it, long before its lease.
	holder, other := tabs[0], tabs[1]
	if a.Pool().GroupOf(workers[0]) == "" {
		t.Fatal("no worker")
	}
	holder.send(map[string]any{"op": "shold", "paths": []string{"locks/k"}, "lease_ms": 120000})
	killWorker(t, a, workers[0])
	began = time.Now()
	ans = other.send(map[string]any{"op": "sincr", "key": "locks/k", "paths": []string{"locks/k"}})
	if string(ans.Data) != "1" {
		t.Fatalf("incrementing after the holder died: %s", ans.Data)
	}
	if waited := time.Since(began); waited > time.Minute {
		t.Fatalf("the dead holder's grant lasted %v", waited)
	}
}

// Read your writes on three servers, each with its worker: people on every
// worker (two of them on followers, whose replicas trail the leader) make
// 10,000 commits in all, and a Get on the worker right after each commit
// sees it, every time. A commit published as a table change is seen by the
// subscribers' reads on the other workers, every time: the change carries
// the publisher's store index and their reads wait for it.
func TestReadYourWrites(t *testing.T) {
	// make test runs it at full size without the race detector (after the
	// race run, beside TestMovesUnderLoad).
	commits := envInt("STICKYD_RYW_COMMITS", 10_000)
	if raceEnabled {
		commits = envInt("STICKYD_RYW_COMMITS", 1_500)
	}
	ps, leader := startCluster(t, 3)
	workers := []string{"s1.web-1", "s2.web-1", "s3.web-1"}
	// Four people on each worker, each with a key of their own.
	const perWorker = 4
	tabs := make([]*tab, len(workers)*perWorker)
	for i := range tabs {
		w := workers[i%len(workers)]
		b := procBrowser(t, ps[i%len(workers)])
		user := "ryw" + strconv.Itoa(i)
		if code, body := b.do("POST", "/login?user="+user); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		if b.whoami().Worker != w {
			if code, body := adminPost(t, ps[leader].admin, "/v1/users/"+user+"/move", `{"to":"`+w+`"}`); code != 200 {
				t.Fatalf("moving %s to %s: %d %s", user, w, code, body)
			}
		}
		tabs[i] = b.openTab("p")
	}
	// The publisher is the first person (on s1.web-1); the subscribers are
	// on the two other workers.
	subscribers := []*tab{tabs[1], tabs[2]}
	for _, tb := range subscribers {
		tb.send(map[string]any{"op": "sub", "table": "rw-t"})
	}
	began := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(tabs))
	for i, tb := range tabs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "ryw/" + strconv.Itoa(i)
			for n := i; n < commits; n += len(tabs) {
				op := "sincrget"
				if i == 0 && n%10 == 0 {
					op = "sincrpub"
				}
				ans, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": op, "key": key, "paths": []string{key}, "table": "rw-t"}})
				if err != nil || ans.Op != "reply" || ans.Error != "" {
					errs <- fmt.Errorf("worker %s, commit %d: %v %+v", workers[i%len(workers)], n, err, ans)
					return
				}
				if op != "sincrget" {
					continue
				}
				var rw struct{ Wrote, Read float64 }
				if err := json.Unmarshal(ans.Data, &rw); err != nil || rw.Read != rw.Wrote {
					errs <- fmt.Errorf("worker %s, commit %d: wrote %v, then read %v (%v)", workers[i%len(workers)], n, rw.Wrote, rw.Read, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	elapsed := time.Since(began)
	published := 0
	for n := 0; n < commits; n += len(tabs) {
		if n%10 == 0 {
			published++
		}
	}
	for i, tb := range subscribers {
		tb.drainUntil("rw_heard", float64(published))
		if stale := tb.tree["rw_stale"]; stale != nil {
			t.Fatalf("the subscriber on %s read a value older than the one published %v times in %d", workers[i+1], stale, published)
		}
	}
	t.Logf("%d commits by %d people on 3 servers' workers, each read back on its worker at once: none stale; %d published changes read by 2 subscribers on other servers: none stale (%v, %.0f commits/s)",
		commits, len(tabs), published, elapsed.Round(time.Millisecond), float64(commits)/elapsed.Seconds())
}
