package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
)

// sharedKey is the global store number every person increments in the
// contended case.
const sharedKey = "bench/counter"

// ownKey is person i's number in the case without contention.
func ownKey(i int) string { return fmt.Sprintf("bench/u%d", i) }

// The two cases.
const (
	caseShared = "one key"
	caseOwn    = "own keys"
)

// grantRow is one case with one number of people.
type grantRow struct {
	kind    string
	people  int
	spread  map[string]int
	incs    int
	elapsed time.Duration   // from the start to the last answer
	lat     []time.Duration // each increment's round trip, sorted
	check   string          // what the final store held
}

// measureGrants opens the largest number of people once (the agent places
// them on its workers in turn) and measures each number of people (the
// first ones) in both cases.
func measureGrants(ctx context.Context, o *options, a *agent.Agent, stderr io.Writer) (rows []grantRow, err error) {
	most := slices.Max(o.people)
	var names []string
	for i := range most {
		names = append(names, fmt.Sprintf("g%d", i))
	}
	fmt.Fprintf(stderr, "grants:\n")
	pages, err := openPages(ctx, a.Addr(), names, o.concurrency, "people", nil, stderr)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			abortPages(pages)
			return
		}
		if cerr := closePages(ctx, pages, o.concurrency); cerr != nil {
			err = fmt.Errorf("closing the people's pages: %w", cerr)
		}
	}()
	for _, c := range o.people {
		for _, kind := range []string{caseShared, caseOwn} {
			key := func(int) string { return sharedKey }
			if kind == caseOwn {
				key = ownKey
			}
			r, err := runIncrements(ctx, o, pages[:c], kind, key)
			if err != nil {
				return rows, fmt.Errorf("%d people, %s: %w", c, kind, err)
			}
			fmt.Fprintf(stderr, "  %d people, %s: %d increments, %.0f/s, p50 %s, p99 %s; %s\n", c, kind, r.incs,
				float64(r.incs)/r.elapsed.Seconds(), fmtDur(pct(r.lat, 0.5)), fmtDur(pct(r.lat, 0.99)), r.check)
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// runIncrements has each page's person increment key(i) with "sincr",
// closed loop, under a grant on that key alone, for o.duration or
// o.count increments each. Every answer must be the new value; then the
// increments' answers must be exactly the values from the store's number
// before plus one up to its number after, each once: a lost update (two
// increments answering the same value, or the store ending below the
// count) fails the run.
func runIncrements(ctx context.Context, o *options, pages []*page, kind string, key func(int) string) (grantRow, error) {
	r := grantRow{kind: kind, people: len(pages), spread: spread(pages)}
	var keys []string
	for i := range pages {
		if !slices.Contains(keys, key(i)) {
			keys = append(keys, key(i))
		}
	}
	before, err := storeNumbers(ctx, pages[0], keys)
	if err != nil {
		return r, err
	}

	var (
		stop   atomic.Bool
		mu     sync.Mutex // guards first, values, lats and last
		first  error
		values = map[string][]float64{} // each key's answers
		lats   []time.Duration
		last   time.Time
		wg     sync.WaitGroup
	)
	start := time.Now()
	deadline := start.Add(o.duration)
	for i, p := range pages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := key(i)
			var got []float64
			var mine []time.Duration
			for n := 0; !stop.Load(); n++ {
				if o.count > 0 && n == o.count || o.count == 0 && !time.Now().Before(deadline) {
					break
				}
				data, sent, err := p.msg(ctx, map[string]any{"op": "sincr", "key": k, "paths": []string{k}})
				end := time.Now()
				var v float64
				if err == nil {
					if err = json.Unmarshal(data, &v); err != nil {
						err = fmt.Errorf("sincr answered %s, not a number", data)
					}
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s on %s, increment %d of %s: %w", p.user, p.worker, n+1, k, err)
					}
					mu.Unlock()
					stop.Store(true)
					return
				}
				got = append(got, v)
				mine = append(mine, end.Sub(sent))
				mu.Lock()
				if end.After(last) {
					last = end
				}
				mu.Unlock()
			}
			mu.Lock()
			values[k] = append(values[k], got...)
			lats = append(lats, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if first != nil {
		return r, first
	}
	r.elapsed = last.Sub(start)
	r.lat = lats
	slices.Sort(r.lat)
	r.incs = len(lats)
	if r.incs == 0 {
		return r, fmt.Errorf("no increment in %v", o.duration)
	}

	after, err := storeNumbers(ctx, pages[0], keys)
	if err != nil {
		return r, err
	}
	for _, k := range keys {
		vs := values[k]
		slices.Sort(vs)
		for j, v := range vs {
			if want := before[k] + float64(j+1); v != want {
				return r, fmt.Errorf("%s: the increments answered %v as their %d-th value from %v, want %v (an update lost or doubled)", k, v, j+1, before[k], want)
			}
		}
		if want := before[k] + float64(len(vs)); after[k] != want {
			return r, fmt.Errorf("%s holds %v after %d increments from %v, want %v (an update lost)", k, after[k], len(vs), before[k], want)
		}
	}
	if kind == caseShared {
		r.check = fmt.Sprintf("%s %v → %v", sharedKey, before[sharedKey], after[sharedKey])
	} else {
		r.check = fmt.Sprintf("%s each + its own increments", ownKey(0))
		if len(keys) > 1 {
			r.check = fmt.Sprintf("%s … %s, each + its own increments", ownKey(0), ownKey(len(keys)-1))
		}
	}
	return r, nil
}

// storeNumbers reads keys from the global store with "sget" on p; a key
// that is not there is 0.
func storeNumbers(ctx context.Context, p *page, keys []string) (map[string]float64, error) {
	data, _, err := p.msg(ctx, map[string]any{"op": "sget", "paths": keys})
	if err != nil {
		return nil, fmt.Errorf("reading the store: %w", err)
	}
	var vals map[string]json.RawMessage
	if err := json.Unmarshal(data, &vals); err != nil {
		return nil, fmt.Errorf("reading the store: answered %s: %w", data, err)
	}
	out := map[string]float64{}
	for _, k := range keys {
		b, ok := vals[k]
		if !ok {
			continue
		}
		var v float64
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("reading the store: %s holds %s, not a number", k, b)
		}
		out[k] = v
	}
	return out, nil
}
