package cluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// counting is a direct log that counts its entries and their bytes.
type counting struct {
	*direct
	entries, bytes atomic.Int64
}

func (c *counting) Apply(ctx context.Context, entry []byte) (any, error) {
	c.entries.Add(1)
	c.bytes.Add(int64(len(entry)))
	return c.direct.Apply(ctx, entry)
}

// At population scale: 100,000 people, each with a session budget, each
// making one call (1,000 at a time) through the leader's ledger. Their
// sessions' ceilings reach the log in group-committed entries, not one a
// person; every reservation settles; once the scopes lapse the ledger and
// the maps forget them (10,000 people under the race detector).
func TestCeilingsAtPopulationScale(t *testing.T) {
	people, together := 100_000, 1_000
	if raceEnabled {
		people = 10_000
	}
	maps := fsm.New()
	var mu sync.Mutex
	var idx uint64
	srv := &counting{direct: &direct{name: "s1", maps: maps, mu: &mu, idx: &idx}}
	l := newRaftLedger(srv, maps, hclog.NewNullLogger())
	l.slack = 200 * time.Millisecond
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.run(stop) }()
	go func() { defer wg.Done(); l.runCeilings(stop) }()
	defer func() { close(stop); wg.Wait() }()

	ctx := context.Background()
	day := time.Now().UTC().Format(time.DateOnly)
	start := time.Now()
	var next atomic.Int64
	var cwg sync.WaitGroup
	for range together {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(people) {
					return
				}
				session := fmt.Sprint("person-", i)
				budget := []gateway.Budget{
					{Scope: gatewaywire.Scope{Kind: gatewaywire.ScopeSession, Name: session}, Limit: 1_000_000, Label: "session"},
					{Scope: gatewaywire.Scope{Kind: gatewaywire.ScopeDay, Name: day}, Limit: 1 << 50, Label: "today"},
				}
				r := gateway.Reservation{ID: fmt.Sprint("r", i), Session: session, Day: day, Micros: 50_000, Expires: time.Now().Add(100 * time.Millisecond)}
				if err := l.Reserve(ctx, r, budget); err != nil {
					t.Error(err)
					return
				}
				if err := l.Add(ctx, gateway.Charge{Request: fmt.Sprint("c", i), Session: session, Day: day, Micros: 100, Reservation: r.ID}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	cwg.Wait()
	took := time.Since(start)
	l.mu.Lock()
	writes, held := l.ceilWrites, len(l.held)
	l.mu.Unlock()
	t.Logf("%d people, one call each, %d at a time, in %s: %d entries of ceilings (%d log entries, %.1f MB, charges included), %d reservations left held",
		people, together, took.Round(time.Millisecond), writes, srv.entries.Load(), float64(srv.bytes.Load())/1e6, held)
	if writes > uint64(people/20) {
		t.Errorf("%d entries of ceilings for %d people: not group-committed", writes, people)
	}
	if held != 0 {
		t.Errorf("%d reservations still held", held)
	}
	// The scopes lapse: the ledger's renewals stop and it forgets them;
	// the next entry drops them from the maps.
	waitFor(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.ceils) == 0
	})
	entry, _ := fsm.Encode(fsm.GatewayCeilingsRequestType, fsm.GatewayCeilingsRequest{Ledger: "s2/x", At: time.Now().UTC()})
	if _, err := srv.Apply(ctx, entry); err != nil {
		t.Fatal(err)
	}
	if c := maps.GatewayCeilingsOf(l.id); len(c) != 0 {
		t.Errorf("the maps still hold %d of the ledger's ceilings", len(c))
	}
}
