package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
)

// What the demo keeps in the global store and the tables it publishes. The
// store is shared by every worker of the pool; a table change reaches every
// page subscribed to it, on any worker (docs/data.md).
//
//	customers/<id>/...  a customer record (customer.go)
//	seq/tickets         number  the last ticket number handed out
//
// Tables:
//
//	customers  {"id", "version"}: customer id was saved, now at version
//	tickets    {"last"}: ticket last was handed out
const (
	tableCustomers = "customers"
	tableTickets   = "tickets"
	ticketsPath    = "seq/tickets"
)

// How long the demo holds and waits for a grant, and waits for any other
// store call. They bound a person's mailbox: a handler waiting on the store
// waits at most this long.
const (
	grantLease = 5 * time.Second
	grantWait  = 10 * time.Second
	storeWait  = 10 * time.Second
)

// change computes the writes of a read-modify-write from the master's
// content at or under the grant's paths (path → JSON). Nil writes mean
// there is nothing to write.
type change func(master map[string]json.RawMessage) (map[string]any, error)

// underGrant acquires a grant on paths, applies fn over the content the
// grant carries (the master's, current for as long as the grant is held)
// and commits what fn returns, which releases the grant. It reports whether
// it wrote anything: when fn returns no writes, or an error, the grant is
// released and nothing is written.
//
// A commit refused with worker.ErrStaleGrant (the lease ran out, or the
// person was moved away while holding it) wrote nothing: underGrant then
// acquires again and redoes fn over the content as it is now, once. A second
// refusal is returned.
func underGrant(ctx context.Context, paths []string, fn change) (wrote bool, err error) {
	for attempt := 1; ; attempt++ {
		wrote, err := tryGrant(ctx, paths, fn)
		if errors.Is(err, worker.ErrStaleGrant) && attempt == 1 {
			continue
		}
		return wrote, err
	}
}

func tryGrant(ctx context.Context, paths []string, fn change) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, grantWait)
	g, err := worker.Acquire(actx, paths, grantLease)
	cancel()
	if err != nil {
		return false, err
	}
	set, err := fn(g.Values)
	if err != nil || len(set) == 0 {
		rctx, cancel := context.WithTimeout(ctx, storeWait)
		defer cancel()
		if rerr := g.Release(rctx); rerr != nil && err == nil {
			err = rerr
		}
		return false, err
	}
	cctx, cancel := context.WithTimeout(ctx, storeWait)
	defer cancel()
	if err := g.Commit(cctx, set); err != nil {
		return false, err
	}
	return true, nil
}

// read reads the global store at or under paths.
func read(ctx context.Context, paths ...string) (map[string]json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(ctx, storeWait)
	defer cancel()
	return worker.Get(ctx, paths...)
}

// takeTicket hands out the next number of the shared ticket sequence: it
// reads the last one, adds one and commits, under a grant on the sequence,
// so two people anywhere never get the same number and none is skipped.
func takeTicket(ctx context.Context) (float64, error) {
	var n float64
	_, err := underGrant(ctx, []string{ticketsPath}, func(master map[string]json.RawMessage) (map[string]any, error) {
		last, err := number(master, ticketsPath)
		if err != nil {
			return nil, err
		}
		n = last + 1
		return map[string]any{ticketsPath: n}, nil
	})
	if err != nil {
		return 0, fmt.Errorf("taking a ticket: %w", err)
	}
	return n, nil
}

// lastTicket reads the last ticket number handed out, 0 before any.
func lastTicket(vals map[string]json.RawMessage) (float64, error) {
	return number(vals, ticketsPath)
}

// number is the number stored at path, 0 when nothing is.
func number(vals map[string]json.RawMessage, path string) (float64, error) {
	b, ok := vals[path]
	if !ok {
		return 0, nil
	}
	var n float64
	if err := json.Unmarshal(b, &n); err != nil {
		return 0, fmt.Errorf("%s holds %s, not a number", path, b)
	}
	return n, nil
}
