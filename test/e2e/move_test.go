package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/move"
)

// One person, one page, moved back and forth while the page keeps writing:
// every note arrives once, in order, and the page ends equal to its model.
func TestMoveKeepsThePage(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgentWith(t, mode, 3, withDataDir(t))
			b := newBrowser(t, a)
			b.do("POST", "/login?user=anna")
			tb := b.openTab("notes")
			tb.pull(0)
			workers := a.Pool().Ready()
			for i := 0; i < 30; i++ {
				tb.send(map[string]any{"op": "note", "text": fmt.Sprintf("n%d", i)})
				if i%3 == 0 {
					home := b.whoami().Worker
					to := workers[(indexOf(workers, home)+1)%len(workers)]
					res, err := a.Supervisor().Move(t.Context(), "anna", to, "test")
					if err != nil {
						t.Fatalf("move %d: %v", i, err)
					}
					if res.Outcome != move.Moved || res.Bytes == 0 || res.Pages != 1 {
						t.Fatalf("move result %+v", res)
					}
					if got := b.whoami().Worker; got != to {
						t.Fatalf("after the move anna is served by %s, want %s", got, to)
					}
				}
				if i%7 == 0 {
					tb.pull(0)
				}
			}
			tb.drainUntil("notes", 30)
			for i := 0; i < 30; i++ {
				if got := tb.tree[fmt.Sprintf("note/%d", i)]; got != fmt.Sprintf("n%d", i) {
					t.Fatalf("note %d = %v after moves", i, got)
				}
			}
			for i := 1; i < len(tb.seqs); i++ {
				if tb.seqs[i] != tb.seqs[i-1]+1 {
					t.Fatalf("sequence gap or duplicate across moves: %v", tb.seqs)
				}
			}
		})
	}
}

// A freeze that does not finish in time rolls the move back: the person
// stays home and keeps working.
func TestStuckFreezeRollsBack(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), withFreezeTimeout("300ms"))
	b := newBrowser(t, a)
	b.do("POST", "/login?user=bea")
	home := b.whoami().Worker
	tb := b.openTab("p")
	tb.send(map[string]any{"op": "inc"})
	// A handler that stalls the person's mailbox: the freeze queues behind
	// it and cannot finish in time.
	stalled := make(chan error, 1)
	go func() {
		_, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "stall", "ms": 1500}})
		stalled <- err
	}()
	waitFor(t, 5*time.Second, "the stall to start", func() bool { return a.Pool().Busy(home) })
	other := otherWorker(a.Pool().Ready(), home)
	_, err := a.Supervisor().Move(t.Context(), "bea", other, "test")
	if !errors.Is(err, move.ErrRolledBack) {
		t.Fatalf("move during a stall: %v, want a rollback", err)
	}
	if u, _ := a.Supervisor().User("bea"); u.Worker != home || u.State != "live" {
		t.Fatalf("after the rollback bea is %+v", u)
	}
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
	// The late freeze is undone by the thaw queued behind it: bea works on.
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 2)
	if got := b.whoami().Worker; got != home {
		t.Fatalf("bea moved to %s despite the rollback", got)
	}
}

// SIGKILL of the old worker in the middle of a move: the person is not stuck
// moving; they are reassigned and their page restarts clean with a notice.
func TestOldWorkerKilledMidMove(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), withFreezeTimeout("10s"))
	b, tb, home := countingPerson(t, a, "cy")
	// A second tab of the same person stalls the mailbox.
	staller := b.openTab("stall")
	go func() {
		_, _ = staller.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "stall", "ms": 5000}})
	}()
	waitFor(t, 5*time.Second, "the stall to start", func() bool { return a.Pool().Busy(home) })
	other := otherWorker(a.Pool().Ready(), home)
	done := make(chan error, 1)
	go func() {
		_, err := a.Supervisor().Move(context.Background(), "cy", other, "test")
		done <- err
	}()
	waitFor(t, 5*time.Second, "the move to begin", func() bool {
		u, _ := a.Supervisor().User("cy")
		return u.State == "moving"
	})
	killWorker(t, a, home)
	select {
	case err := <-done:
		if !errors.Is(err, move.ErrStateLost) {
			t.Fatalf("move with a dead old worker: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("move stuck after the old worker died")
	}
	u, _ := a.Supervisor().User("cy")
	if u.State == "moving" || u.Worker != other {
		t.Fatalf("cy after the kill: %+v", u)
	}
	// Same login, new page state, and the page is told.
	tb.ws.Close()
	ans := tb.connect()
	if ans.Opened.Notice == "" || !ans.Opened.Resync {
		t.Fatalf("reopen after the lost move: %+v", ans.Opened)
	}
	if w := b.whoami(); w.User != "cy" || w.Worker != other {
		t.Fatalf("cy is %+v", w)
	}
}

func indexOf(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

func otherWorker(list []string, not string) string {
	for _, x := range list {
		if x != not {
			return x
		}
	}
	return ""
}

// A person moved A → B and, later, back: B dies during the move back. The
// move answers "state lost" and the person is served again at once on A,
// with a fresh page and its notice, not refused as "moving" (A froze and
// evicted them on the first move; the wake after a lost state must not
// meet that).
func TestMovedBackAfterTheNewWorkerDied(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), withFreezeTimeout("10s"))
	b, tb, home := countingPerson(t, a, "dee")
	other := otherWorker(a.Pool().Ready(), home)
	if _, err := a.Supervisor().Move(context.Background(), "dee", other, "test"); err != nil {
		t.Fatal(err)
	}
	tb.send(map[string]any{"op": "inc"}) // wakes on other
	tb.drainUntil("count", 2)
	staller := b.openTab("stall")
	go func() {
		_, _ = staller.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "stall", "ms": 5000}})
	}()
	waitFor(t, 5*time.Second, "the stall to start", func() bool { return a.Pool().Busy(other) })
	done := make(chan error, 1)
	go func() {
		_, err := a.Supervisor().Move(context.Background(), "dee", home, "test")
		done <- err
	}()
	waitFor(t, 5*time.Second, "the move back to begin", func() bool {
		u, _ := a.Supervisor().User("dee")
		return u.State == "moving"
	})
	killWorker(t, a, other)
	select {
	case err := <-done:
		if !errors.Is(err, move.ErrStateLost) {
			t.Fatalf("move back with a dead worker: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("move stuck after the worker died")
	}
	tb.ws.Close()
	start := time.Now()
	ans := tb.connect()
	if ans.Opened.Notice == "" || !ans.Opened.Resync {
		t.Fatalf("reopen after the lost move back: %+v", ans.Opened)
	}
	a2, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
	if err != nil || a2.Error != "" {
		t.Fatalf("dee refused after the lost move back (%v): %+v", err, a2)
	}
	if w := b.whoami(); w.User != "dee" || w.Worker != home {
		t.Fatalf("dee is %+v", w)
	}
	t.Logf("dee served again on %s %v after the move back lost her state", home, time.Since(start).Round(time.Millisecond))
}

// A person's other tab that sends during a move which then rolls back is
// answered once the late freeze is undone, not after barrier_wait and a
// refusal: its frame, released by the rollback, may reach the worker
// before the thaw and be refused MOVED at the epoch the maps still show;
// the front sends it again shortly instead of waiting for an epoch that
// never comes.
func TestOtherTabDuringARollback(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), withFreezeTimeout("300ms"))
	b, tb, home := countingPerson(t, a, "eve")
	second := b.openTab("q")
	stalled := make(chan error, 1)
	go func() {
		_, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "stall", "ms": 1200}})
		stalled <- err
	}()
	waitFor(t, 5*time.Second, "the stall to start", func() bool { return a.Pool().Busy(home) })
	other := otherWorker(a.Pool().Ready(), home)
	moved := make(chan error, 1)
	go func() {
		_, err := a.Supervisor().Move(context.Background(), "eve", other, "test")
		moved <- err
	}()
	waitFor(t, 5*time.Second, "the move to begin", func() bool {
		u, _ := a.Supervisor().User("eve")
		return u.State == "moving"
	})
	// Held on the barrier now; released by the rollback.
	start := time.Now()
	ans, err := second.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
	took := time.Since(start)
	if err := <-moved; !errors.Is(err, move.ErrRolledBack) {
		t.Fatalf("move during a stall: %v, want a rollback", err)
	}
	if err != nil || ans.Error != "" {
		t.Fatalf("the other tab during the rollback (after %v): %v %+v", took, err, ans)
	}
	if err := <-stalled; err != nil {
		t.Fatal(err)
	}
	t.Logf("the other tab was answered %v after it sent (the stall held the mailbox for 1.2 s)", took.Round(time.Millisecond))
}

// A person moved to a worker that dies before their next frame: their
// package waits in the host's memory, not in the worker, so the worker's
// replacement wakes them from it with their page whole (count continued,
// no notice), served again as soon as the replacement is up.
func TestDestinationDiedBeforeTheWake(t *testing.T) {
	a := startAgentWith(t, "subprocess", 2, withDataDir(t))
	_, tb, home := countingPerson(t, a, "eve")
	other := otherWorker(a.Pool().Ready(), home)
	res, err := a.Supervisor().Move(context.Background(), "eve", other, "test")
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := a.Supervisor().User("eve"); u.State != "parked" || u.Worker != other {
		t.Fatalf("eve after the move: %+v", u)
	}
	killWorker(t, a, other)
	start := time.Now()
	ans := sendRetrying(t, tb, map[string]any{"op": "inc"})
	if !strings.Contains(string(ans.Data), `"count":2`) || ans.Worker != other {
		t.Fatalf("eve's first message after her new worker died: %s on %s, want count 2 on %s", ans.Data, ans.Worker, other)
	}
	tb.drainUntil("count", 2)
	t.Logf("eve served on %s's replacement %v after it died, from the package (%d bytes) the host held", other, time.Since(start).Round(time.Millisecond), res.Bytes)
}

// countingPerson logs user in on a browser of a's, opens a page and counts
// to one on it; home is the worker that answered.
func countingPerson(t *testing.T, a *agent.Agent, user string) (*browser, *tab, string) {
	t.Helper()
	b := newBrowser(t, a)
	b.do("POST", "/login?user="+user)
	home := b.whoami().Worker
	tb := b.openTab("p")
	tb.send(map[string]any{"op": "inc"})
	tb.drainUntil("count", 1)
	return b, tb, home
}

// A large person moves by a precopy: the destination reads a copy of their
// state while they keep writing, the freeze hands over only what they wrote
// meanwhile, and the page ends whole, every note once and in order. When
// the destination's worker dies before the person's first frame there, its
// replacement has no staged copy: the host sends it with the wake, and the
// person is served with everything.
func TestMoveWithPrecopy(t *testing.T) {
	cases := []struct {
		name, mode string
		python     bool
	}{{"inprocess", "inprocess", false}, {"subprocess", "subprocess", false}, {"python", "subprocess", true}}
	for _, c := range cases {
		mode := c.mode
		t.Run(c.name, func(t *testing.T) {
			opts := []option{withDataDir(t)}
			if c.python {
				opts = append(opts, withPycounter(pythonRepo(t)))
			}
			a := startAgentWith(t, mode, 3, opts...)
			b := newBrowser(t, a)
			b.do("POST", "/login?user=pia")
			tb := b.openTab("notes")
			sendRetrying(t, tb, map[string]any{"op": "fill", "bytes": 1 << 20})
			tb.pull(0)
			workers := a.Pool().Ready()
			notes := 0
			// The typist pulls every pullEvery notes, as a live page pulls:
			// a page silent past 4096 pending deltas has the superseded
			// ones dropped, by design (docs/architecture.md), and a slow
			// move would show their skipped sequence numbers as gaps. A
			// note is two deltas and a pull acknowledges what the one
			// before it got, so at most 4*pullEvery are pending: enough to
			// travel as base_pending, never near the bound.
			const pullEvery = 512
			note := func() error {
				ans, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "note", "text": fmt.Sprintf("n%d", notes)}})
				if err != nil {
					return err
				}
				if ans.Error != "" {
					return fmt.Errorf("note %d: %s", notes, ans.Error)
				}
				notes++
				return nil
			}
			for i := range 6 {
				home := b.whoami().Worker
				to := workers[(indexOf(workers, home)+1)%len(workers)]
				// The last move's destination dies before the person's first
				// frame there: nobody types during that one.
				kill := i == 5 && mode == "subprocess"
				stop, typed := make(chan struct{}), make(chan error, 1)
				go func() {
					for !kill {
						select {
						case <-stop:
							typed <- nil
							return
						default:
						}
						if err := note(); err != nil {
							typed <- err
							return
						}
						if notes%pullEvery == 0 {
							if _, err := tb.tryPull(0); err != nil {
								typed <- err
								return
							}
						}
					}
					<-stop
					typed <- nil
				}()
				time.Sleep(20 * time.Millisecond)
				res, err := a.Supervisor().Move(t.Context(), "pia", to, "test")
				close(stop)
				if terr := <-typed; terr != nil {
					t.Fatalf("typing during move %d: %v", i, terr)
				}
				if err != nil {
					t.Fatalf("move %d: %v", i, err)
				}
				if res.Outcome != move.Moved || res.Precopied < 1<<20 || res.FromBase != 1 || res.Bytes > 256<<10 {
					t.Fatalf("move %d: %+v, want moved by a precopy of the 1 MiB page and a small freeze", i, res)
				}
				if kill {
					killWorker(t, a, to)
				}
				// The first frame at the new home wakes the person there.
				ans := sendRetrying(t, tb, map[string]any{"op": "note", "text": fmt.Sprintf("n%d", notes)})
				if ans.Worker != to {
					t.Fatalf("after move %d pia is served by %s, want %s", i, ans.Worker, to)
				}
				notes++
				tb.pull(0)
			}
			tb.drainUntil("notes", float64(notes))
			for i := range notes {
				if got := tb.tree[fmt.Sprintf("note/%d", i)]; got != fmt.Sprintf("n%d", i) {
					t.Fatalf("note %d = %v after the moves", i, got)
				}
			}
			if blob, _ := tb.tree["blob"].(string); len(blob) != 1<<20 {
				t.Fatalf("the 1 MiB page holds %d bytes after the moves", len(blob))
			}
			for i := 1; i < len(tb.seqs); i++ {
				if tb.seqs[i] != tb.seqs[i-1]+1 {
					t.Fatalf("sequence gap or duplicate across moves: %v", tb.seqs)
				}
			}
			t.Logf("%d notes written through 6 precopied moves, all there in order", notes)
		})
	}
}
