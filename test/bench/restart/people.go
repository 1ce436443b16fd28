package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// pageName is the id of every person's one page.
	pageName = "bench"
	// opTimeout bounds one HTTP request of a person. It is above the
	// agent's frame timeout, so a slow answer is a long time, not an error.
	opTimeout = 90 * time.Second
)

// people are everyone the benchmark creates. The last wakers of them fill
// their page; the first is served first after the restart; the others are
// woken last.
type people struct {
	all       []*person
	wakers    int
	transport *http.Transport // shared by every browser: cookies, not connections, tell people apart
}

func newPeople(front string, n, wakers int) *people {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1024, IdleConnTimeout: time.Minute}
	ps := &people{all: make([]*person, n), wakers: wakers, transport: tr}
	for i := range ps.all {
		ps.all[i] = &person{name: fmt.Sprintf("u%05d", i), base: "http://" + front, transport: tr}
	}
	return ps
}

func (ps *people) first() *person    { return ps.all[0] }
func (ps *people) rest() []*person   { return ps.all[1 : len(ps.all)-ps.wakers] }
func (ps *people) filled() []*person { return ps.all[len(ps.all)-ps.wakers:] }

// dropConnections forgets the idle connections to a process that is gone.
func (ps *people) dropConnections() { ps.transport.CloseIdleConnections() }

// create makes every person, concurrency at a time: a browser that loads
// the site, logs in, opens its page and sends one inc.
func (ps *people) create(ctx context.Context, concurrency int) error {
	return forEach(ctx, ps.all, concurrency, func(ctx context.Context, p *person) error {
		if err := p.create(ctx); err != nil {
			return fmt.Errorf("creating %s: %w", p.name, err)
		}
		return nil
	})
}

// fill fills the wakers' pages with n bytes of state each and acknowledges
// the big delta.
func (ps *people) fill(ctx context.Context, concurrency, n int) error {
	return forEach(ctx, ps.filled(), concurrency, func(ctx context.Context, p *person) error {
		if err := p.fill(ctx, n); err != nil {
			return fmt.Errorf("filling %s's page with %d bytes: %w", p.name, n, err)
		}
		return nil
	})
}

// wakeFilled sends each waker's first request after the restart, an inc,
// parallel at a time, and returns their round trips, sorted. Each page
// must then resume: reopened without a resync or a notice, it pulls exactly
// the inc's delta. The checks are not part of the time.
func (ps *people) wakeFilled(ctx context.Context, parallel int) ([]time.Duration, error) {
	ws := ps.filled()
	trips := make([]time.Duration, len(ws))
	index := make(map[*person]int, len(ws))
	for i, p := range ws {
		index[p] = i
	}
	err := forEach(ctx, ws, parallel, func(ctx context.Context, p *person) error {
		t0 := time.Now()
		if err := p.inc(ctx); err != nil {
			return fmt.Errorf("waking %s: %w", p.name, err)
		}
		trips[index[p]] = time.Since(t0)
		if err := p.resumes(ctx); err != nil {
			return fmt.Errorf("%s after the wake: %w", p.name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(trips)
	return trips, nil
}

// wakeAll sends each person's first request after the restart, an inc that
// must continue their count, concurrency at a time.
func wakeAll(ctx context.Context, ps []*person, concurrency int) error {
	return forEach(ctx, ps, concurrency, func(ctx context.Context, p *person) error {
		if err := p.inc(ctx); err != nil {
			return fmt.Errorf("waking %s: %w", p.name, err)
		}
		return nil
	})
}

// forEach runs fn for every item, concurrency at a time. The first error
// stops the others (their ctx ends) and is returned.
func forEach[T any](ctx context.Context, items []T, concurrency int, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		once sync.Once
		err  error
	)
	for range min(concurrency, len(items)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(items) {
					return
				}
				if e := fn(ctx, items[i]); e != nil {
					once.Do(func() { err = e })
					cancel(e)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("interrupted: %w", context.Cause(ctx))
	}
	return nil
}

// person is one browser (its own cookie jar) with one open counter page,
// used by one goroutine at a time. Its ops go to the front's HTTP fallback,
// POST /_stickyd/op, with the same JSON a WebSocket would carry.
type person struct {
	name      string
	base      string
	transport *http.Transport
	http      *http.Client

	next     uint64        // the last op id sent
	count    int           // the page's counter, as the last inc answered it
	last     uint64        // the last delta acknowledged by a pull
	lastTrip time.Duration // the round trip of incUntilServed's inc
}

// answer is the front's JSON answer to an op (see internal/front/ops.go).
type answer struct {
	Op     string          `json:"op"`
	ID     uint64          `json:"id"`
	Worker string          `json:"worker"`
	Data   json.RawMessage `json:"data"`
	Error  string          `json:"error"`
	Code   string          `json:"code"`
	Last   uint64          `json:"last"`
	Opened *struct {
		Seq    uint64 `json:"seq"`
		Notice string `json:"notice"`
		Resync bool   `json:"resync"`
	} `json:"opened"`
	Deltas []struct {
		Seq   uint64          `json:"seq"`
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		Value json.RawMessage `json:"value"`
	} `json:"deltas"`
}

// create loads the site in a new browser (the front sets its cookie), logs
// in, opens the page and sends one inc.
func (p *person) create(ctx context.Context) error {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return err
	}
	p.http = &http.Client{Jar: jar, Timeout: opTimeout, Transport: p.transport}
	if err := p.request(ctx, http.MethodGet, "/"); err != nil {
		return fmt.Errorf("loading the site: %w", err)
	}
	if err := p.request(ctx, http.MethodPost, "/login?user="+url.QueryEscape(p.name)); err != nil {
		return fmt.Errorf("logging in: %w", err)
	}
	a, err := p.op(ctx, map[string]any{"op": "open", "kind": "counter"})
	if err != nil {
		return fmt.Errorf("opening the page: %w", err)
	}
	if a.Opened == nil || a.Worker == "" {
		return fmt.Errorf("opening the page: answer without opened or worker: %+v", a)
	}
	return p.inc(ctx)
}

// request makes one plain HTTP request in the browser; anything but 200 is
// an error.
func (p *person) request(ctx context.Context, method, path string) error {
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	return nil
}

// op posts one op of the page and returns its answer; an error answer (or
// any status but 200) is an error.
func (p *person) op(ctx context.Context, m map[string]any) (*answer, error) {
	p.next++
	m["id"], m["page"] = p.next, pageName
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.base+"/_stickyd/op", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the answer to %v: %w", m["op"], err)
	}
	var a answer
	if jerr := json.Unmarshal(body, &a); jerr != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%v: HTTP %d: %s", m["op"], resp.StatusCode, bytes.TrimSpace(body))
	}
	switch {
	case a.ID != p.next:
		return nil, fmt.Errorf("%v: answer for op %d, want %d", m["op"], a.ID, p.next)
	case a.Op != "reply" || a.Error != "":
		return nil, fmt.Errorf("%v refused: op %q, code %q: %s", m["op"], a.Op, a.Code, a.Error)
	}
	return &a, nil
}

// inc sends one inc; the counter must answer one more than last time, and
// the front and the app must agree on the worker.
func (p *person) inc(ctx context.Context) error {
	a, err := p.op(ctx, map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
	if err != nil {
		return err
	}
	var d struct {
		Count  *int   `json:"count"`
		Worker string `json:"worker"`
	}
	if err := json.Unmarshal(a.Data, &d); err != nil {
		return fmt.Errorf("inc: decoding %s: %w", a.Data, err)
	}
	switch {
	case d.Count == nil || *d.Count != p.count+1:
		return fmt.Errorf("inc answered %s, want count %d (state lost or doubled?)", a.Data, p.count+1)
	case a.Worker == "" || a.Worker != d.Worker:
		return fmt.Errorf("inc answered by %q but the app says %q", a.Worker, d.Worker)
	}
	p.count++
	return nil
}

// incUntilServed sends an inc until the front takes it: while the front
// does not listen yet (connection refused) it tries again every pollEvery.
// A refused connection never reached the agent, so nothing ran twice; any
// other failure is an error. lastTrip gets the round trip that was served.
func (p *person) incUntilServed(ctx context.Context) error {
	for {
		t0 := time.Now()
		err := p.inc(ctx)
		if err == nil {
			p.lastTrip = time.Since(t0)
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return err
		}
		p.next-- // the op was never sent
		select {
		case <-time.After(pollEvery):
		case <-ctx.Done():
			return fmt.Errorf("the front never listened: %w", context.Cause(ctx))
		}
	}
}

// fill sets the page's state to n bytes, then pulls the deltas and
// acknowledges them: the worker keeps the state, and nothing of it waits to
// be sent (or rides in the parked package as a pending delta).
func (p *person) fill(ctx context.Context, n int) error {
	a, err := p.op(ctx, map[string]any{"op": "msg", "data": map[string]any{"op": "fill", "bytes": n}})
	if err != nil {
		return err
	}
	if string(a.Data) != strconv.Itoa(n) {
		return fmt.Errorf("fill answered %s", a.Data)
	}
	// The page's first pull: the counter's deltas and the blob.
	a, err = p.op(ctx, map[string]any{"op": "pull", "after": 0, "wait": 0})
	if err != nil {
		return err
	}
	blob := -1
	for _, d := range a.Deltas {
		if d.Op == "set" && d.Path == "blob" {
			blob = len(d.Value) - 2 // a JSON string of n "x"
		}
	}
	if blob != n {
		return fmt.Errorf("pull after the fill: blob delta of %d bytes in %d deltas", blob, len(a.Deltas))
	}
	p.last = a.Last
	a, err = p.op(ctx, map[string]any{"op": "pull", "after": p.last, "wait": 0})
	if err != nil {
		return err
	}
	if len(a.Deltas) != 0 {
		return fmt.Errorf("acknowledging pull after %d returned %d deltas", p.last, len(a.Deltas))
	}
	return nil
}

// resumes checks a filled page after its first inc since the restart: it
// reopens as a reconnecting tab would (after the last acknowledged delta)
// without a resync or a notice, and its next pull holds exactly that inc's
// delta, numbered right after the last acknowledged one.
func (p *person) resumes(ctx context.Context) error {
	a, err := p.op(ctx, map[string]any{"op": "open", "kind": "counter", "after": p.last})
	if err != nil {
		return err
	}
	if a.Opened == nil || a.Opened.Resync || a.Opened.Notice != "" {
		return fmt.Errorf("the page did not resume: opened %+v", a.Opened)
	}
	a, err = p.op(ctx, map[string]any{"op": "pull", "after": p.last, "wait": 0})
	if err != nil {
		return err
	}
	if len(a.Deltas) != 1 {
		return fmt.Errorf("pull after %d: %d deltas, want the inc's one", p.last, len(a.Deltas))
	}
	d := a.Deltas[0]
	if d.Seq != p.last+1 || d.Op != "set" || d.Path != "count" || string(d.Value) != strconv.Itoa(p.count) {
		return fmt.Errorf("pull after %d: delta %s %q = %s seq %d, want set \"count\" = %d seq %d",
			p.last, d.Op, d.Path, d.Value, d.Seq, p.count, p.last+1)
	}
	p.last = d.Seq
	return nil
}
