package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/host"
)

// withCheckpoints sets the group's checkpoint_interval ("off" for none).
func withCheckpoints(interval string) option {
	return func(c *agent.Config) { c.Groups[0].CheckpointInterval = interval }
}

// waitReplaced waits until worker id runs a new incarnation after the one
// that was killed (incarnation before).
func waitReplaced(t *testing.T, a *agent.Agent, id string, before int) host.WorkerInfo {
	t.Helper()
	var info host.WorkerInfo
	waitFor(t, 30*time.Second, "a replacement worker", func() bool {
		for _, w := range a.Pool().Workers() {
			if w.ID == id && w.State == host.StateReady && w.Incarnation > before {
				info = w
				return true
			}
		}
		return false
	})
	return info
}

func workerInfo(t *testing.T, a *agent.Agent, id string) host.WorkerInfo {
	t.Helper()
	for _, w := range a.Pool().Workers() {
		if w.ID == id {
			return w
		}
	}
	t.Fatalf("no worker %s", id)
	return host.WorkerInfo{}
}

// countOf reads the counter app's answer to inc.
func countOf(t *testing.T, a answer) int {
	t.Helper()
	var v struct{ Count int }
	if err := json.Unmarshal(a.Data, &v); err != nil {
		t.Fatalf("inc answered %s: %v", a.Data, err)
	}
	return v.Count
}

const restoredNotice = "restored from its last checkpoint"

// SIGKILL of a worker whose people were checkpointed: they keep their login,
// and their next message finds the page exactly as of the last checkpoint
// (what was typed after it is lost), told by a notice; a page opened after
// the checkpoint restarts clean with a notice, as without checkpoints.
func TestKilledWorkerWakesFromCheckpoint(t *testing.T) {
	t.Run("go", func(t *testing.T) { testKilledWorkerWakesFromCheckpoint(t) })
	t.Run("python", func(t *testing.T) { testKilledWorkerWakesFromCheckpoint(t, withPycounter(pythonRepo(t))) })
}

func testKilledWorkerWakesFromCheckpoint(t *testing.T, opts ...option) {
	// Rounds are run by hand here (the hour never passes), so the test
	// knows which state each one caught; TestCheckpointsEveryInterval
	// leaves them to the timer.
	a := startAgentWith(t, "subprocess", 1, append([]option{withCheckpoints("1h")}, opts...)...)
	ann := newBrowser(t, a)
	ann.do("POST", "/login?user=ann")
	id := ann.whoami().Worker
	page := ann.openTab("p")
	for i := 1; i <= 3; i++ {
		page.send(map[string]any{"op": "inc"})
	}
	page.drainUntil("count", 3)
	// Someone who never logged in is checkpointed too.
	anon := newBrowser(t, a)
	anon.do("GET", "/")
	anonPage := anon.openTab("a")
	anonPage.send(map[string]any{"op": "inc"})
	anonPage.send(map[string]any{"op": "inc"})
	anonPage.drainUntil("count", 2)
	if err := a.Pool().Checkpoint(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if got := a.Checkpoints().Pages(id, "ann"); len(got) != 2 || got[1].Page != "p" {
		t.Fatalf("ann's checkpoint: %+v", got)
	}
	// After the last checkpoint: a fourth inc (lost) and a new page.
	page.send(map[string]any{"op": "inc"})
	page.drainUntil("count", 4)
	late := ann.openTab("late")
	late.send(map[string]any{"op": "inc"})
	late.drainUntil("count", 1)

	before := workerInfo(t, a, id)
	killWorker(t, a, id)
	waitReplaced(t, a, id, before.Incarnation)

	// The logins survive: same person, same home.
	if w := ann.whoami(); w.User != "ann" || w.Worker != id {
		t.Fatalf("ann after the kill: %+v", w)
	}
	// The next message sees the page as of the checkpoint: 3, so 4 now.
	if n := countOf(t, page.send(map[string]any{"op": "inc"})); n != 4 {
		t.Fatalf("first inc after the kill counted %d, want 4 (3 checkpointed + 1)", n)
	}
	// Its next deltas: a RESET of the restored tree, with the notice,
	// numbered above what the dead worker sent; then the new count.
	before4 := page.last
	if n := page.pull(2 * time.Second); n != 2 || page.last <= before4 || fmt.Sprint(page.tree["count"]) != "4" {
		t.Fatalf("pull after the kill: %d deltas, last %d (was %d), tree %v", n, page.last, before4, page.tree)
	}
	if len(page.notices) != 1 || !strings.Contains(page.notices[0], restoredNotice) {
		t.Fatalf("notices on the restored page: %q", page.notices)
	}
	// A tab reconnecting with what the dead worker sent resumes on the
	// restored page: resync, and the notice.
	anonPage.ws.Close()
	if ans := anonPage.connect(); !ans.Opened.Resync || !strings.Contains(ans.Opened.Notice, restoredNotice) {
		t.Fatalf("reconnecting to the restored page: %+v", ans.Opened)
	}
	if n := countOf(t, anonPage.send(map[string]any{"op": "inc"})); n != 3 {
		t.Fatalf("the anonymous page counted %d after the kill, want 3", n)
	}
	anonPage.drainUntil("count", 3)
	// Reconnecting with the restored tree resumes without a resync.
	page.ws.Close()
	if ans := page.connect(); ans.Opened.Resync || ans.Opened.Notice != "" {
		t.Fatalf("reconnecting after taking the restored tree: %+v", ans.Opened)
	}

	// The page opened after the checkpoint is gone, as without checkpoints.
	a1, err := late.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
	if err != nil {
		t.Fatal(err)
	}
	if a1.Op != "error" || !strings.Contains(a1.Error, "not open") {
		t.Fatalf("message to a page opened after the checkpoint: %+v", a1)
	}
	ans := late.op(map[string]any{"op": "open", "kind": "counter", "after": late.last})
	if ans.Opened == nil || ans.Opened.Notice == "" || !ans.Opened.Resync || strings.Contains(ans.Opened.Notice, restoredNotice) {
		t.Fatalf("reopening the late page: %+v", ans)
	}
	late.tree, late.last = map[string]any{}, ans.Opened.Base
	late.send(map[string]any{"op": "inc"})
	late.drainUntil("count", 1)

	code, body := adminCall(t, a, "GET", "/v1/metrics", testToken, "")
	if code != 200 || !strings.Contains(body, `stickyd_checkpoint_restores_total{outcome="restored"} 2`) {
		t.Fatalf("restores in the metrics (%d):\n%s", code, checkpointMetrics(body, "stickyd_checkpoint_"))
	}
}

func checkpointMetrics(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The timer's rounds: a person quiet since a round began wakes exactly as
// they were; a person typing through the kill never gets an error that is
// not retryable, and resumes from a count at least as high as the last
// checkpoint caught.
func TestCheckpointsEveryInterval(t *testing.T) {
	a := startAgentWith(t, "subprocess", 1, withCheckpoints("300ms"))
	quiet := newBrowser(t, a)
	quiet.do("POST", "/login?user=quiet")
	id := quiet.whoami().Worker
	qp := quiet.openTab("p")
	for range 5 {
		qp.send(map[string]any{"op": "inc"})
	}
	qp.drainUntil("count", 5)

	typist := newBrowser(t, a)
	typist.do("POST", "/login?user=typist")
	tp := typist.openTab("p")
	type answered struct {
		count int
		at    time.Time
	}
	var (
		mu     sync.Mutex
		counts []answered
	)
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			ans, err := tp.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
			switch {
			case err != nil:
				done <- err
				return
			case ans.Op == "error" && ans.Retry:
				time.Sleep(10 * time.Millisecond) // the worker died under it: again
				continue
			case ans.Op != "reply" || ans.Error != "":
				done <- fmt.Errorf("inc answered %+v", ans)
				return
			}
			var v struct{ Count int }
			if err := json.Unmarshal(ans.Data, &v); err != nil {
				done <- err
				return
			}
			mu.Lock()
			counts = append(counts, answered{v.Count, time.Now()})
			mu.Unlock()
		}
	}()
	// A round that began after the quiet person's last answer, and after
	// the typist had typed a while.
	since := time.Now()
	waitFor(t, 20*time.Second, "two checkpoint rounds", func() bool {
		return workerInfo(t, a, id).LastCheckpoint.After(since.Add(300 * time.Millisecond))
	})
	before := workerInfo(t, a, id)
	killWorker(t, a, id)
	after := waitReplaced(t, a, id, before.Incarnation)
	// The dead incarnation's rounds are over: its last one is final.
	last := after.LastCheckpoint
	if n := countOf(t, qp.send(map[string]any{"op": "inc"})); n != 6 {
		t.Fatalf("the quiet person's first inc after the kill counted %d, want 6", n)
	}
	waitFor(t, 20*time.Second, "the typist to type on the new worker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(counts) > 0 && counts[len(counts)-1].at.After(after.Born.Add(100*time.Millisecond))
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("the typist: %v", err)
	}
	// What the typist was answered before the last round began is in it:
	// after the kill they count on from there or higher, never lower.
	caught := 0
	drop := -1
	for i, c := range counts {
		if c.at.Before(last) {
			caught = c.count
		}
		if i > 0 && c.count != counts[i-1].count+1 {
			if drop >= 0 || c.count > counts[i-1].count {
				t.Fatalf("the typist's counts jumped more than once, or forward: %v", counts)
			}
			drop = i
		}
	}
	if caught == 0 {
		t.Fatal("no answer before the last round: the test did not type through a checkpoint")
	}
	if drop >= 0 && counts[drop].count < caught+1 {
		t.Fatalf("after the kill the typist counted %d, below the checkpointed %d + 1", counts[drop].count, caught)
	}
	n := counts[len(counts)-1].count
	if got := countOf(t, tp.send(map[string]any{"op": "inc"})); got != n+1 {
		t.Fatalf("after typing, inc counted %d, want %d", got, n+1)
	}
	tp.drainUntil("count", n+1)
	t.Logf("typist: %d answers, restored at index %d to %d (the last checkpoint caught %d)", len(counts), drop, counts[max(drop, 0)].count, caught)
}

// SIGKILL of the whole agent (its workers die with it): nobody was parked,
// yet after the restart the people wake from the checkpoints the journal
// kept, with their logins.
func TestKilledAgentWakesFromCheckpoint(t *testing.T) {
	p := newProc(t, 1) // checkpoint_interval at its default
	p.start()
	b := procBrowser(t, p)
	if code, body := b.do("POST", "/login?user=kim"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("p")
	for range 3 {
		tb.send(map[string]any{"op": "inc"})
	}
	tb.drainUntil("count", 3)
	since := time.Now()
	waitFor(t, 30*time.Second, "a checkpoint round after the typing", func() bool {
		code, body := adminCallAt(t, p.admin, "GET", "/v1/workers", testToken)
		var ws []host.WorkerInfo
		if code != 200 || json.Unmarshal([]byte(body), &ws) != nil {
			return false
		}
		for _, w := range ws {
			if w.LastCheckpoint.After(since) {
				return true
			}
		}
		return false
	})
	_ = p.cmd.Process.Kill()
	<-p.exited
	tb.ws.Close()
	p.start()
	if h := p.health(); h.Restart.Folder != "" || h.Restart.Parked != 0 {
		t.Fatalf("restart report after a kill: %+v", h.Restart)
	}
	if w := b.whoami(); w.User != "kim" {
		t.Fatalf("kim lost their login: %+v", w)
	}
	if ans := tb.connect(); !ans.Opened.Resync || !strings.Contains(ans.Opened.Notice, restoredNotice) {
		t.Fatalf("reopening after the agent's kill: %+v", ans.Opened)
	}
	if n := countOf(t, tb.send(map[string]any{"op": "inc"})); n != 4 {
		t.Fatalf("first inc after the agent's kill counted %d, want 4", n)
	}
	tb.drainUntil("count", 4)
}
