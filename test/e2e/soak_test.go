package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// soakSizes are the lifecycle soak's figures: the 30 s form in make test,
// the (100,000 cookieless requests, 5,000 visitors) with
// STICKYD_SOAK=full (make soak-lifecycle).
func soakSizes() (cookieless, visitors int) {
	if os.Getenv("STICKYD_SOAK") == "full" {
		return 100_000, 5_000
	}
	return 10_000, 300
}

// The life of sessions, soaked (docs/operations.md): against a real agent
// with idle_park 2s and forget_after 10s, cookieless requests (assets,
// crawlers' page views) and visitors who open a page, type and leave, while
// a few people stay connected and type throughout. At the end the maps hold
// only those still connected, the workers' live heap and RSS are back near
// their baseline, the park folder holds no package, the maps' snapshot is
// back to its baseline size, and nobody still connected lost a delta.
func TestLifecycleSoak(t *testing.T) {
	waits(t)
	cookieless, visitors := soakSizes()
	const stayers = 8
	p := newProcSpec(t, procSpec{workers: 2, name: "solo", expect: 1,
		front: "  newcomer_rate = 0\n",
		extra: []string{"lifecycle {\n  idle_park = \"2s\"\n  forget_after = \"10s\"\n}\n"}})
	p.start()

	// The people who stay, typing an inc every 200 ms throughout.
	tabs := make([]*tab, stayers)
	for i := range tabs {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=stay"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = b.openTab("typing")
		tabs[i].pull(0)
	}
	typed := make([]int, stayers)
	stopTyping := make(chan struct{})
	typingDone := make(chan error, 1)
	go func() {
		for round := 1; ; round++ {
			select {
			case <-stopTyping:
				typingDone <- nil
				return
			case <-time.After(200 * time.Millisecond):
			}
			for i, tb := range tabs {
				a, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
				if err != nil || a.Error != "" {
					typingDone <- fmt.Errorf("stayer %d: %+v %v", i, a, err)
					return
				}
				typed[i]++
				// A page pulls what changed, which acknowledges it, as
				// client.js does (unacknowledged deltas stay on the
				// worker, up to the page's bound).
				if round%5 == 0 {
					if _, err := tb.tryPull(0); err != nil {
						typingDone <- fmt.Errorf("stayer %d pulling: %v", i, err)
						return
					}
				}
			}
		}
	}()
	defer func() {
		select {
		case <-stopTyping:
		default:
			close(stopTyping)
		}
	}()

	users := p.users
	// With STICKYD_BENCH_WORKER_HEAPPROFILE set, each probe of the
	// workers' memory also signals them to write what they hold (a heap
	// profile and the runtime's memory classes, benchkit.HeapProfileOnSignal).
	dumps := os.Getenv("STICKYD_BENCH_WORKER_HEAPPROFILE") != ""
	workers := func() (heap, rss uint64) {
		code, body := adminCallAt(t, p.admin, "GET", "/v1/workers?local=true", testToken)
		if code != 200 {
			t.Fatalf("workers: %d %s", code, body)
		}
		var ws []host.WorkerInfo
		if err := json.Unmarshal([]byte(body), &ws); err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			heap += w.HeapBytes
			rss += w.RSSBytes
			if dumps && w.Pid > 0 {
				_ = syscall.Kill(w.Pid, syscall.SIGUSR1)
			}
		}
		return heap, rss
	}
	snapshot := func() []byte {
		req, _ := http.NewRequest("GET", "http://"+p.admin+"/v1/operator/snapshot", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("snapshot: %d %s", resp.StatusCode, b)
		}
		return b
	}
	// A churn: cookieless requests from 32 clients, one in four a page
	// view (a crawler: a person made, never seen again), the rest assets
	// and HEADs that leave no trace; and visitors, 16 at a time; it ends
	// when everyone who left is forgotten. It returns when it began.
	churn := func(name string, cookieless, visitors int) time.Time {
		began := time.Now()
		var (
			wg      sync.WaitGroup
			next    atomic.Int64
			failed  atomic.Int64
			visited atomic.Int64
		)
		paths := []struct{ method, path string }{{"GET", "/"}, {"GET", "/assets/app.css"}, {"HEAD", "/"}, {"GET", "/robots.txt"}}
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := &http.Client{Timeout: 30 * time.Second}
				for {
					i := next.Add(1)
					if i > int64(cookieless) {
						return
					}
					pp := paths[i%int64(len(paths))]
					req, _ := http.NewRequest(pp.method, "http://"+p.front+pp.path, nil)
					resp, err := c.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode >= 500 {
						failed.Add(1)
					}
				}
			}()
		}
		var nextVisitor atomic.Int64
		for range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for nextVisitor.Add(1) <= int64(visitors) {
					b := procBrowser(t, p)
					if code, _ := b.do("GET", "/"); code != 200 {
						failed.Add(1)
						continue
					}
					tb := b.openTab("visit")
					for range 3 {
						tb.send(map[string]any{"op": "inc"})
					}
					tb.ws.Close()
					visited.Add(1)
				}
			}()
		}
		wg.Wait()
		took := time.Since(began)
		peak := len(users())
		t.Logf("%s: %d cookieless requests and %d visitors in %v (%d failed); %d people in the maps at its end",
			name, cookieless, visited.Load(), took.Round(time.Millisecond), failed.Load(), peak)
		if failed.Load() > 0 {
			t.Fatalf("%d requests of the %s failed", failed.Load(), name)
		}

		// Everyone who left is forgotten: the maps hold the stayers alone.
		deadline := time.Now().Add(90 * time.Second)
		for {
			m := users()
			if len(m) == stayers {
				for i := range stayers {
					if _, ok := m["stay"+strconv.Itoa(i)]; !ok {
						t.Fatalf("stayer %d was forgotten", i)
					}
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d people still in the maps %v after the churn, want the %d stayers", len(m), time.Since(began), stayers)
			}
			time.Sleep(500 * time.Millisecond)
		}
		return began
	}

	// Give the workers a probe and a memory release (at most one a 10 s);
	// the full form waits out the fences of the people who left too
	// (2 minutes), after which the workers' maps are rebuilt to size.
	settle := 12 * time.Second
	if os.Getenv("STICKYD_SOAK") == "full" {
		settle = 150 * time.Second
	}

	// The fresh figures: the stayers typing, stamped as seen, probed.
	time.Sleep(5 * time.Second)
	freshHeap, freshRSS := workers()
	if n := len(users()); n != stayers {
		t.Fatalf("%d people in the maps before the churn, want the %d stayers", n, stayers)
	}
	// The baseline is taken after a warm-up: a tenth of the churn at the
	// same concurrency, everyone forgotten and the memory released. A Go
	// process keeps the runtime's own bookkeeping (span structures, GC
	// metadata) for the highest heap it has reached; what the soak looks
	// for is what the churn leaves beyond that, which a second churn adds
	// to and a steady state does not. The fresh figures are logged beside.
	churn("warm-up", cookieless/10, visitors/10)
	time.Sleep(settle)
	baseHeap, baseRSS := workers()
	baseSnapBody := snapshot()
	baseSnap := len(baseSnapBody)

	began := churn("churn", cookieless, visitors)
	forgotten := time.Since(began)
	time.Sleep(settle)
	heap, rss := workers()
	snapBody := snapshot()
	snap := len(snapBody)
	t.Logf("forgotten within %v of the churn's start; workers' live heap %d → %d KiB, RSS %d → %d KiB (fresh %d KiB, %d KiB); snapshot %d → %d bytes",
		forgotten.Round(time.Millisecond), baseHeap>>10, heap>>10, baseRSS>>10, rss>>10, freshHeap>>10, freshRSS>>10, baseSnap, snap)
	t.Logf("against the baseline: live heap %+.1f %%, RSS %+.1f %%; against the fresh process: %+.1f %%, %+.1f %%",
		100*(float64(heap)/float64(baseHeap)-1), 100*(float64(rss)/float64(baseRSS)-1),
		100*(float64(heap)/float64(freshHeap)-1), 100*(float64(rss)/float64(freshRSS)-1))
	// Within 10 % of the baseline, and half a MiB for the collector's
	// timing (a worker's baseline here is a few MiB).
	if limit := baseHeap + baseHeap/10 + 512<<10; heap > limit {
		t.Errorf("the workers' live heap is %d KiB, baseline %d KiB (limit %d KiB)", heap>>10, baseHeap>>10, limit>>10)
	}
	// Under the race detector a process keeps its shadow memory: RSS says
	// nothing there (the live heap still does).
	if limit := baseRSS + baseRSS/10; rss > limit && !raceEnabled {
		t.Errorf("the workers' RSS is %d KiB, baseline %d KiB (limit %d KiB)", rss>>10, baseRSS>>10, limit>>10)
	}
	// The snapshot holds the stayers alone, and nothing of anyone gone:
	// what is not a stayer's own entry is back to its baseline size (a
	// stayer's entry may grow on its own account, as a move records the
	// epoch it arrived at).
	baseShape, shape := snapshotShape(t, baseSnapBody), snapshotShape(t, snapBody)
	if shape.users != stayers || shape.conns != baseShape.conns || shape.connSeen != baseShape.connSeen {
		t.Errorf("the snapshot holds %d people, %d connections, %d connection stamps; baseline %d, %d, %d",
			shape.users, shape.conns, shape.connSeen, baseShape.users, baseShape.conns, baseShape.connSeen)
	}
	if limit := baseShape.rest + baseShape.rest/10; shape.rest > limit {
		t.Errorf("the maps' snapshot holds %d bytes beside the people and their connections, baseline %d (limit %d)", shape.rest, baseShape.rest, limit)
	}
	if testing.Verbose() || t.Failed() {
		t.Logf("the baseline snapshot: %+v", baseShape)
		t.Logf("the final snapshot: %+v", shape)
	}
	// The park holds nothing of anyone gone: the stayers, typing, were
	// never parked, so what is left is their pages' crash checkpoints,
	// each a package naming its person.
	entries, _ := os.ReadDir(filepath.Join(p.dir, "data", "park"))
	checkpoints := 0
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(p.dir, "data", "park", e.Name()))
		user := protocol.PackageUser(b)
		if err != nil || !strings.HasPrefix(user, "stay") {
			t.Errorf("the park folder holds %s (%d bytes, person %q, %v): not a stayer's checkpoint", e.Name(), len(b), user, err)
			continue
		}
		checkpoints++
	}
	t.Logf("the park folder holds %d checkpoints of the %d stayers and nothing else", checkpoints, stayers)

	close(stopTyping)
	if err := <-typingDone; err != nil {
		t.Fatal(err)
	}
	for i, tb := range tabs {
		tb.drainUntil("count", typed[i])
	}
}

// users are the people in the agent's maps (GET /v1/users, every page), by
// name.
func (p *proc) users() map[string]placement.UserInfo {
	p.t.Helper()
	out := map[string]placement.UserInfo{}
	for cursor := ""; ; {
		code, body := adminCallAt(p.t, p.admin, "GET", "/v1/users?limit=1000&cursor="+cursor, testToken)
		if code != 200 {
			p.t.Fatalf("users: %d %s", code, body)
		}
		var page struct {
			Users []placement.UserInfo
			Next  string
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			p.t.Fatal(err)
		}
		for _, u := range page.Users {
			out[u.User] = u
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}

// snapShape is what a snapshot of the maps holds: its people, connections
// and connection stamps, and its bytes beside the people's own entries.
type snapShape struct {
	users, conns, connSeen, rest int
}

func snapshotShape(t *testing.T, b []byte) snapShape {
	t.Helper()
	sh, err := fsm.ShapeOf(b)
	if err != nil {
		t.Fatalf("decoding the snapshot: %v", err)
	}
	return snapShape{users: sh.Users, conns: sh.Conns, connSeen: sh.StampedConns, rest: sh.RestBytes}
}
