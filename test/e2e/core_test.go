package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// A person's three connections (three browsers) start on different workers
// and all land on one worker once the site says who they are.
func TestUserStickyAcrossConnections(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 3)
			var bs []*browser
			seen := map[string]bool{}
			for i := 0; i < 3; i++ {
				b := newBrowser(t, a)
				if code, body := b.do("GET", "/"); code != 200 {
					t.Fatalf("GET /: %d %s", code, body)
				}
				w := b.whoami()
				seen[w.Worker] = true
				bs = append(bs, b)
			}
			if len(seen) < 2 {
				t.Fatalf("new connections were not spread over workers: %v", seen)
			}
			for _, b := range bs {
				if code, body := b.do("POST", "/login?user=maria"); code != 200 {
					t.Fatalf("login: %d %s", code, body)
				}
			}
			home := ""
			for i, b := range bs {
				w := b.whoami()
				if w.User != "maria" {
					t.Fatalf("browser %d: user %q after login", i, w.User)
				}
				if home == "" {
					home = w.Worker
				}
				if w.Worker != home {
					t.Fatalf("browser %d is on %s, maria lives on %s", i, w.Worker, home)
				}
				tb := b.openTab(fmt.Sprintf("tab-%d", i))
				if got := tb.send(map[string]any{"op": "inc"}); got.Worker != home {
					t.Fatalf("browser %d page on %s, want %s", i, got.Worker, home)
				}
				tb.ws.Close()
			}
			// Someone else stays someone else.
			other := newBrowser(t, a)
			other.do("POST", "/login?user=paolo")
			if w := other.whoami(); w.User != "paolo" {
				t.Fatalf("paolo is %+v", w)
			}
		})
	}
}

// Two tabs of one browser hold two independent page trees.
func TestPagesAreIndependent(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 2)
			b := newBrowser(t, a)
			b.do("GET", "/")
			one, two := b.openTab("one"), b.openTab("two")
			for i := 0; i < 3; i++ {
				one.send(map[string]any{"op": "inc"})
			}
			two.send(map[string]any{"op": "inc"})
			two.send(map[string]any{"op": "note", "text": "only in two"})
			one.drainUntil("count", 3)
			two.drainUntil("count", 1)
			two.drainUntil("notes", 1)
			if _, ok := one.tree["note/0"]; ok {
				t.Fatalf("tab one sees tab two's note: %v", one.tree)
			}
			if two.tree["note/0"] != "only in two" {
				t.Fatalf("tab two lost its note: %v", two.tree)
			}
		})
	}
}

// Deltas are pulled; a page that reconnects resumes after the last sequence
// it applied, with no gap and no duplicate, including deltas produced while
// it was away.
func TestPulledDeliverySurvivesReconnect(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 2)
			b := newBrowser(t, a)
			b.do("GET", "/")
			tb := b.openTab("notes")
			tb.pull(0) // the initial count
			const n = 60
			for i := 0; i < 20; i++ {
				tb.send(map[string]any{"op": "note", "text": fmt.Sprintf("n%d", i)})
			}
			// Take only part of what is waiting, then drop the socket.
			tb.pull(0)
			tb.ws.Close()
			// Notes written while the page is away wait in its collector:
			// they come from another tab of the same connection? No: from
			// the same page over a second socket, as after a network blip.
			tb.connect()
			for i := 20; i < n; i++ {
				tb.send(map[string]any{"op": "note", "text": fmt.Sprintf("n%d", i)})
				if i == 40 {
					tb.ws.Close()
					tb.connect()
				}
			}
			tb.drainUntil("notes", n)
			for i := 0; i < n; i++ {
				if got := tb.tree[fmt.Sprintf("note/%d", i)]; got != fmt.Sprintf("n%d", i) {
					t.Fatalf("note %d = %v", i, got)
				}
			}
			for i := 1; i < len(tb.seqs); i++ {
				if tb.seqs[i] != tb.seqs[i-1]+1 {
					t.Fatalf("sequence gap or duplicate: %v", tb.seqs)
				}
			}
			// 1 count + 2 per note.
			if want := uint64(1 + 2*n); tb.last != want {
				t.Fatalf("last sequence %d, want %d", tb.last, want)
			}
		})
	}
}

// A forged or tampered cookie names nobody: the request gets a fresh
// identity, never someone else's worker or state.
func TestForgedCookieGetsFreshIdentity(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 2)
			victim := newBrowser(t, a)
			victim.do("POST", "/login?user=victim")
			vw := victim.whoami()
			vt := victim.openTab("secret")
			vt.send(map[string]any{"op": "note", "text": "victim's secret"})
			good := victim.cookie()
			if good == "" {
				t.Fatal("no cookie")
			}
			name := good[:strings.LastIndexByte(good, '.')]
			forgeries := map[string]string{
				"tampered MAC": name + "." + strings.Repeat("A", 43),
				"no MAC":       name,
				"other name":   "someone-else" + good[strings.LastIndexByte(good, '.'):],
				"garbage":      "%%%",
			}
			for what, value := range forgeries {
				t.Run(what, func(t *testing.T) {
					req := newRawRequest(t, victim.base+"/whoami", value)
					resp, body := rawDo(t, req)
					if resp.StatusCode != 200 {
						t.Fatalf("whoami: %d %s", resp.StatusCode, body)
					}
					if strings.Contains(body, vw.Conn) || strings.Contains(body, `"victim"`) {
						t.Fatalf("forged cookie reached the victim: %s", body)
					}
					var fresh string
					for _, c := range resp.Cookies() {
						if c.Name == "stickyd_conn" {
							fresh = c.Value
						}
					}
					if fresh == "" || strings.HasPrefix(fresh, name+".") {
						t.Fatalf("forged cookie did not get a fresh identity: %q", fresh)
					}
					// The WebSocket refuses it outright.
					h := map[string][]string{"Cookie": {"stickyd_conn=" + value}}
					_, wresp, err := websocket.DefaultDialer.Dial("ws://"+a.Addr()+"/_stickyd/ws", h)
					if err == nil || wresp == nil || wresp.StatusCode != 401 {
						t.Fatalf("websocket with forged cookie: err %v resp %v", err, wresp)
					}
				})
			}
			// The victim's own page is untouched.
			vt.drainUntil("notes", 1)
			if vt.tree["note/0"] != "victim's secret" {
				t.Fatalf("victim's page changed: %v", vt.tree)
			}
		})
	}
}

// A message over the front's limit closes the socket with 1009; bad ops get
// clear errors and the socket stays usable.
func TestWebSocketLimitsAndBadInput(t *testing.T) {
	a := startAgent(t, "inprocess", 1)
	b := newBrowser(t, a)
	b.do("GET", "/")
	tb := b.openTab("limits")
	for _, bad := range []map[string]any{
		{"op": "fly"},
		{"op": "msg"},
		{"op": "msg", "page": ""},
		{"op": "msg", "data": map[string]any{"op": "nope"}},
		{"op": "pull", "page": "never-opened"},
		{"op": "msg", "data": map[string]any{"op": "panic"}},
	} {
		a := tb.op(bad)
		if a.Error == "" {
			t.Fatalf("%v: no error: %+v", bad, a)
		}
	}
	if err := tb.ws.WriteMessage(websocket.TextMessage, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	var a1 answer
	if err := tb.ws.ReadJSON(&a1); err != nil || a1.Code != "bad_request" {
		t.Fatalf("bad JSON: %+v %v", a1, err)
	}
	tb.send(map[string]any{"op": "inc"}) // still usable
	big := strings.Repeat("x", 70<<10)
	_ = tb.ws.WriteJSON(map[string]any{"op": "msg", "page": tb.page, "data": map[string]any{"op": "note", "text": big}})
	_ = tb.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := tb.ws.ReadMessage()
		if err == nil {
			continue
		}
		if !websocket.IsCloseError(err, websocket.CloseMessageTooBig) {
			t.Fatalf("oversize message: %v, want close 1009", err)
		}
		break
	}
	// HTTP: no cookie on the fallback and on the websocket is a 401.
	if code, _ := newBrowser(t, a).do("POST", "/_stickyd/op"); code != 401 {
		t.Fatalf("op without a connection: %d", code)
	}
	if code, _ := b.do("GET", "/_stickyd/nope"); code != 404 {
		t.Fatalf("unknown front route: %d", code)
	}
}

// SIGKILL of a worker process: the host starts a replacement, other users
// see no error, and the dead worker's users get a clear outcome (their page
// restarts clean with a notice) rather than a hang.
func TestKilledWorkerIsReplaced(t *testing.T) {
	// Without crash checkpoints (TestKilledWorkerWakesFromCheckpoint has
	// them): the page's state lived only in the dead process.
	a := startAgentWith(t, "subprocess", 3, withCheckpoints("off"))
	byWorker := map[string]*tab{}
	for i := 0; len(byWorker) < 3 && i < 30; i++ {
		b := newBrowser(t, a)
		b.do("GET", "/")
		w := b.whoami().Worker
		if byWorker[w] == nil {
			tb := b.openTab("p")
			tb.send(map[string]any{"op": "inc"})
			tb.drainUntil("count", 1)
			byWorker[w] = tb
		}
	}
	if len(byWorker) != 3 {
		t.Fatalf("could not place a user on every worker: %v", byWorker)
	}
	victim := a.Pool().Workers()[1]
	if victim.Pid == 0 {
		t.Fatalf("worker %s has no pid", victim.ID)
	}
	// Other users keep typing through the kill.
	stop := make(chan struct{})
	errs := make(chan error, 2)
	for id, tb := range byWorker {
		if id == victim.ID {
			continue
		}
		go func(tb *tab) {
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if a, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}}); err != nil || a.Error != "" {
					errs <- fmt.Errorf("user of another worker saw an error: %v %+v", err, a)
					return
				}
			}
		}(tb)
	}
	if err := syscall.Kill(victim.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "a replacement worker", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == victim.ID && w.State == host.StateReady && w.Incarnation == 2 && w.Pid != victim.Pid {
				// The lifecycle says how the process ended.
				if w.HowDied != "exited: signal: killed" {
					t.Errorf("how the killed worker died: %q", w.HowDied)
				}
				return true
			}
		}
		return false
	})
	time.Sleep(100 * time.Millisecond) // let the typists cross the replacement
	close(stop)
	for i := 0; i < 2; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// The dead worker's user: the page is gone with its process; the next
	// message says so clearly, and reopening restarts it clean with a notice.
	tb := byWorker[victim.ID]
	a1, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Op != "error" || !strings.Contains(a1.Error, "not open") {
		t.Fatalf("message to a lost page: %+v", a1)
	}
	ans := tb.op(map[string]any{"op": "open", "kind": "counter", "after": tb.last})
	if ans.Opened == nil || ans.Opened.Notice == "" || !ans.Opened.Resync {
		t.Fatalf("reopen after the worker died: %+v", ans)
	}
	tb.tree, tb.last = map[string]any{}, ans.Opened.Base
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 1)
}

// Stopping the agent stops every worker process: no orphans.
func TestShutdownLeavesNoOrphans(t *testing.T) {
	a := startAgent(t, "subprocess", 2)
	var pids []int
	for _, w := range a.Pool().Workers() {
		pids = append(pids, w.Pid)
	}
	if err := a.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		waitFor(t, 10*time.Second, fmt.Sprintf("worker pid %d to exit", pid), func() bool {
			return syscall.Kill(pid, 0) == syscall.ESRCH
		})
	}
}

// Bodies up to the front's limit reach a subprocess worker (the channel's
// gRPC limit is above it); bigger ones get 413; a header that cannot travel
// on the channel gets 400, not a dead worker.
func TestLargeBodiesAndBadHeaders(t *testing.T) {
	a := startAgent(t, "subprocess", 1)
	b := newBrowser(t, a)
	b.do("GET", "/")
	before := a.Pool().Workers()[0]
	post := func(n int) int {
		req, _ := http.NewRequest("POST", b.base+"/", strings.NewReader(strings.Repeat("x", n)))
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(8 << 20); code != 200 {
		t.Fatalf("8 MiB body: %d", code)
	}
	if code := post(11 << 20); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 MiB body: %d", code)
	}
	req, _ := http.NewRequest("GET", b.base+"/", nil)
	req.Header.Set("X-Bad", "\xff\xfe")
	resp, body := rawDo(t, req)
	if resp.StatusCode != 400 || !strings.Contains(body, "UTF-8") {
		t.Fatalf("non-UTF-8 header: %d %s", resp.StatusCode, body)
	}
	if after := a.Pool().Workers()[0]; after.Incarnation != before.Incarnation || after.State != host.StateReady {
		t.Fatalf("worker restarted: before %+v after %+v", before, after)
	}
}

// The long-poll fallback: the same ops as the WebSocket, one per POST.
func TestLongPollFallback(t *testing.T) {
	a := startAgent(t, "subprocess", 2)
	b := newBrowser(t, a)
	b.do("GET", "/")
	op := func(m map[string]any) (int, answer) {
		t.Helper()
		body, _ := json.Marshal(m)
		req, _ := http.NewRequest("POST", b.base+"/_stickyd/op", bytes.NewReader(body))
		resp, err := b.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var ans answer
		if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, ans
	}
	if code, ans := op(map[string]any{"op": "open", "id": 1, "page": "lp", "kind": "counter"}); code != 200 || ans.Opened == nil {
		t.Fatalf("open: %d %+v", code, ans)
	}
	// A pull that waits is answered by the delta a later message produces.
	got := make(chan answer, 1)
	go func() {
		_, ans := op(map[string]any{"op": "pull", "id": 2, "page": "lp", "after": 1, "wait": 10000})
		got <- ans
	}()
	time.Sleep(50 * time.Millisecond) // let the pull park (a slow machine only makes the test weaker, not wrong)
	if code, ans := op(map[string]any{"op": "msg", "id": 3, "page": "lp", "data": map[string]any{"op": "inc"}}); code != 200 || ans.Error != "" {
		t.Fatalf("msg: %d %+v", code, ans)
	}
	select {
	case ans := <-got:
		if len(ans.Deltas) != 1 || ans.Deltas[0].Seq != 2 || string(ans.Deltas[0].Value) != "1" {
			t.Fatalf("long-poll pull: %+v", ans)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("long-poll pull never answered")
	}
	if code, ans := op(map[string]any{"op": "msg", "id": 4, "page": "nope", "data": map[string]any{"op": "inc"}}); code != 400 || ans.Code != "bad_request" {
		t.Fatalf("msg to an unknown page: %d %+v", code, ans)
	}
	if code, ans := op(map[string]any{"op": "pull", "id": 5, "page": "lp", "wait": -1}); code != 400 || ans.Error == "" {
		t.Fatalf("negative wait: %d %+v", code, ans)
	}
}

// 200 newcomers at once, none known to the maps yet, spread over the two
// workers within ±10 %: placement counts the placements whose connections
// are still being written.
func TestNewcomerBurstSpreads(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, func(c *agent.Config) {
		off := 0.0
		c.Front.NewcomerRate = &off // 200 newcomers from one address at once
	})
	const n = 200
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		on  = map[string]int{}
		bad []string
	)
	for i := range n {
		wg.Go(func() {
			b := newBrowser(t, a)
			code, body := b.do("GET", "/whoami")
			var w whoami
			if code != 200 || json.Unmarshal([]byte(body), &w) != nil || w.Worker == "" {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("newcomer %d: %d %s", i, code, body))
				mu.Unlock()
				return
			}
			mu.Lock()
			on[w.Worker]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d newcomers failed: %v", len(bad), bad[:min(len(bad), 5)])
	}
	if len(on) != 2 {
		t.Fatalf("newcomers on %v, want both workers", on)
	}
	for w, k := range on {
		if k < n/2*9/10 || k > n/2*11/10 {
			t.Fatalf("worker %s took %d of %d newcomers (%v), want %d ± 10 %%", w, k, n, on, n/2)
		}
	}
	t.Logf("200 newcomers at once: %v", on)
}
