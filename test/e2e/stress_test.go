package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/move"
)

// People type while the supervisor moves them around: no request fails, no
// delta is lost or duplicated, every page's notes arrive in the order typed,
// and every page tree equals the reference model (the notes each typist had
// acknowledged). STICKYD_STRESS_USERS / STICKYD_STRESS_MOVES change the size
// (defaults 200 and 10000; 100 and 1000 under the race detector).
func TestMovesUnderLoad(t *testing.T) {
	users, moves := envInt("STICKYD_STRESS_USERS", 200), envInt("STICKYD_STRESS_MOVES", 10000)
	if raceEnabled {
		users, moves = envInt("STICKYD_STRESS_USERS", 100), envInt("STICKYD_STRESS_MOVES", 1000)
	}
	// The barrier's bound is raised so a starved CI machine measures
	// waits, not timeouts; the bound itself is tested in the front.
	a := startAgentWith(t, "subprocess", 3, withDataDir(t), func(c *agent.Config) { c.Front.BarrierWait = "30s" })
	workers := a.Pool().Ready()
	tabs := make([]*tab, users)
	for i := range tabs {
		b := newBrowser(t, a)
		if code, body := b.do("POST", "/login?user=u"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = b.openTab("typing")
		tabs[i].pull(0)
	}

	ty := startTypists(tabs)
	failed := &ty.failed
	fail := ty.fail
	var (
		done     atomic.Int64
		outcomes sync.Map
		mwg      sync.WaitGroup
		started  = time.Now()
	)
	for m := 0; m < 8; m++ {
		mwg.Add(1)
		go func() {
			defer mwg.Done()
			for failed.Load() == 0 && done.Load() < int64(moves) {
				user := "u" + strconv.Itoa(rand.IntN(users))
				u, _ := a.Supervisor().User(user)
				to := workers[rand.IntN(len(workers))]
				if to == u.Worker {
					to = otherWorker(workers, u.Worker)
				}
				res, err := a.Supervisor().Move(t.Context(), user, to, "stress")
				if err != nil && res.Outcome == move.Failed {
					continue // busy: another mover has this person right now
				}
				if err != nil {
					fail(fmt.Errorf("move of %s: %v", user, err))
					return
				}
				v, _ := outcomes.LoadOrStore(res.Outcome, new(atomic.Int64))
				v.(*atomic.Int64).Add(1)
				done.Add(1)
			}
		}()
	}
	mwg.Wait()
	elapsed := time.Since(started)
	typed, err := ty.stop()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	outcomes.Range(func(k, v any) bool {
		t.Logf("moves %s: %d", k, v.(*atomic.Int64).Load())
		if k != move.Moved {
			t.Errorf("%d moves ended %s", v.(*atomic.Int64).Load(), k)
		}
		total += int(v.(*atomic.Int64).Load())
		return true
	})
	if total < moves {
		t.Fatalf("only %d of %d moves happened", total, moves)
	}
	notes := checkTyped(t, tabs, typed)
	t.Logf("%d users typed %d notes during %d moves in %v (%.0f moves/s)", users, notes, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds())
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// typists make every tab type notes until stopped, checking each answer.
type typists struct {
	halt    atomic.Bool
	typed   []int
	failed  atomic.Int64
	firstMu sync.Mutex
	first   error
	wg      sync.WaitGroup
}

func (ty *typists) fail(err error) {
	ty.failed.Add(1)
	ty.firstMu.Lock()
	if ty.first == nil {
		ty.first = err
	}
	ty.firstMu.Unlock()
}

// startTypists starts one typist per tab: each sends note n, checks the page
// counted n+1 notes, and pulls every 64 notes as a page does.
func startTypists(tabs []*tab) *typists {
	ty := &typists{typed: make([]int, len(tabs))}
	for i, tb := range tabs {
		ty.wg.Add(1)
		go func() {
			defer ty.wg.Done()
			for n := 0; !ty.halt.Load(); n++ {
				ans, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "note", "text": strconv.Itoa(n)}})
				if err != nil || ans.Op != "reply" || ans.Error != "" {
					ty.fail(fmt.Errorf("user %d note %d: %v %+v", i, n, err, ans))
					return
				}
				var count int
				if err := json.Unmarshal(ans.Data, &count); err != nil || count != n+1 {
					ty.fail(fmt.Errorf("user %d note %d: the page counted %s", i, n, ans.Data))
					return
				}
				ty.typed[i] = n + 1
				// Pull now and then, as a page does, so that deltas are
				// delivered (and acknowledged) while the person moves.
				if n%64 == 63 {
					if _, err := tb.tryPull(0); err != nil {
						ty.fail(fmt.Errorf("user %d pull: %v", i, err))
						return
					}
				}
			}
		}()
	}
	return ty
}

// stop stops the typists and returns how many notes each typed, or the
// first failure.
func (ty *typists) stop() ([]int, error) {
	ty.halt.Store(true)
	ty.wg.Wait()
	if ty.first != nil {
		return nil, fmt.Errorf("%d typists failed; first: %w", ty.failed.Load(), ty.first)
	}
	return ty.typed, nil
}

// checkTyped checks every page against the reference model (the notes each
// typist had acknowledged) and that deltas came without gap or duplicate;
// it returns the number of notes.
func checkTyped(t *testing.T, tabs []*tab, typed []int) int {
	t.Helper()
	notes := 0
	for i, tb := range tabs {
		tb.drainUntil("notes", typed[i])
		for n := 0; n < typed[i]; n++ {
			if got := tb.tree["note/"+strconv.Itoa(n)]; got != strconv.Itoa(n) {
				t.Fatalf("user %d: note %d = %v", i, n, got)
			}
		}
		for k := 1; k < len(tb.seqs); k++ {
			if tb.seqs[k] != tb.seqs[k-1]+1 {
				t.Fatalf("user %d: delta sequence gap or duplicate at %d", i, k)
			}
		}
		notes += typed[i]
	}
	return notes
}
