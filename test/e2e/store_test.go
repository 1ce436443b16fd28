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
