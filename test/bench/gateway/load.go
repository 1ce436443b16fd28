package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

// The load: calls as a client of the OpenAI API makes them, whole answers
// and streams, sent closed loop (callers each sending their next call when
// the last is answered) or open loop (on a fixed schedule, each timed from
// its scheduled time, so a slow server cannot slow the load down).

// Kinds of call.
const (
	whole    = 0 // a JSON answer, read to its end
	streamed = 1 // an SSE stream, done at its [DONE]
)

// target is one system under test as the load calls it.
type target struct {
	urls   []string // its /v1/chat/completions, called in turn
	model  string
	header http.Header
	// queue sends each call through stickyd's persisted queue (POST
	// /v1/gateway/requests, then GET …?wait until done): urls are then
	// the gateway's roots, and every call is whole.
	queue bool
}

// loadSpec is one load: closed loop with conc callers, or open loop at
// rate calls per second.
type loadSpec struct {
	name string
	conc int
	rate int
}

// outcome is what one load on one target measured.
type outcome struct {
	ok, errors int
	firstErr   string
	elapsed    time.Duration // from the first call sent to the last answer
	lat        [2][]time.Duration
}

// drive runs l against t for d, a share stream of the calls streamed
// (spread evenly), each bounded by the client's timeout.
func drive(ctx context.Context, hc *http.Client, t target, l loadSpec, d time.Duration, stream float64) outcome {
	var (
		mu   sync.Mutex
		out  outcome
		next atomic.Int64
		wg   sync.WaitGroup
	)
	record := func(kind int, lat time.Duration, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			out.errors++
			if out.firstErr == "" {
				out.firstErr = err.Error()
			}
			return
		}
		out.ok++
		out.lat[kind] = append(out.lat[kind], lat)
	}
	// call i: its kind by an even spread of the streamed share.
	kindOf := func(i int64) int {
		if t.queue || int64(float64(i+1)*stream) == int64(float64(i)*stream) {
			return whole
		}
		return streamed
	}
	start := time.Now()
	if l.conc > 0 {
		until := start.Add(d)
		for range l.conc {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil && time.Now().Before(until) {
					i := next.Add(1) - 1
					kind := kindOf(i)
					t0 := time.Now()
					done, err := t.call(ctx, hc, i, kind)
					record(kind, done.Sub(t0), err)
				}
			}()
		}
	} else {
		n := int(float64(l.rate) * d.Seconds())
		interval := time.Second / time.Duration(l.rate)
		for i := range n {
			at := start.Add(time.Duration(i) * interval)
			if w := time.Until(at); w > 0 {
				time.Sleep(w)
			}
			if ctx.Err() != nil {
				break
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				kind := kindOf(int64(i))
				done, err := t.call(ctx, hc, int64(i), kind)
				record(kind, done.Sub(at), err)
			}()
		}
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	for k := range out.lat {
		slices.Sort(out.lat[k])
	}
	return out
}

// all is every call's latency, sorted.
func (o outcome) all() []time.Duration {
	a := slices.Concat(o.lat[whole], o.lat[streamed])
	slices.Sort(a)
	return a
}

// p is the percentile q of the calls of kind (-1: of all).
func (o outcome) p(kind int, q float64) time.Duration {
	if kind < 0 {
		return benchkit.Percentile(o.all(), q)
	}
	return benchkit.Percentile(o.lat[kind], q)
}

// call makes call number i of kind and returns when it was answered
// whole: a whole answer read to its end, a stream at its [DONE].
func (t target) call(ctx context.Context, hc *http.Client, i int64, kind int) (time.Time, error) {
	url := t.urls[int(i%int64(len(t.urls)))]
	if t.queue {
		return submitAndWait(ctx, hc, url, t.model, t.header)
	}
	return callAt(ctx, hc, url, t.model, t.header, kind == streamed)
}

// callBody is a small chat call; a streamed one asks for its usage, as
// clients that count tokens do.
func callBody(model string, stream bool) string {
	s := ""
	if stream {
		s = `,"stream":true,"stream_options":{"include_usage":true}`
	}
	return `{"model":"` + model + `","messages":[{"role":"user","content":"Say hi."}],"max_tokens":16` + s + `}`
}

// callOnce makes one call and checks its answer.
func callOnce(ctx context.Context, hc *http.Client, url, model string, header http.Header, stream bool) error {
	_, err := callAt(ctx, hc, url, model, header, stream)
	return err
}

// callAt makes one call to url and returns when its answer was whole: the
// end of a JSON answer's body, a stream's [DONE] (the rest of the stream,
// its trailers, is read after, not counted).
func callAt(ctx context.Context, hc *http.Client, url, model string, header http.Header, stream bool) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(callBody(model, stream)))
	if err != nil {
		return time.Time{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return time.Time{}, fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	if !stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return time.Time{}, err
		}
		done := time.Now()
		if !bytes.Contains(b, []byte(`"choices"`)) {
			return time.Time{}, fmt.Errorf("an answer without choices: %.200s", b)
		}
		return done, nil
	}
	sc := bufio.NewScanner(resp.Body)
	chunks := 0
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		if bytes.Equal(bytes.TrimSpace(line[5:]), []byte("[DONE]")) {
			done := time.Now()
			_, _ = io.Copy(io.Discard, resp.Body)
			if chunks == 0 {
				return time.Time{}, fmt.Errorf("a stream of no chunk")
			}
			return done, nil
		}
		chunks++
	}
	if err := sc.Err(); err != nil {
		return time.Time{}, fmt.Errorf("reading the stream after %d chunks: %w", chunks, err)
	}
	return time.Time{}, fmt.Errorf("a stream that ended after %d chunks without [DONE]", chunks)
}

// submitAndWait sends a call through stickyd's persisted queue at the
// gateway's root and waits until it is done.
func submitAndWait(ctx context.Context, hc *http.Client, root, model string, header http.Header) (time.Time, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, root+"/v1/gateway/requests", strings.NewReader(callBody(model, false)))
	if err != nil {
		return time.Time{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	var sub struct {
		ID string `json:"id"`
	}
	if err := doJSON(hc, req, http.StatusAccepted, &sub); err != nil {
		return time.Time{}, err
	}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, root+"/v1/gateway/requests/"+sub.ID+"?wait=30s", nil)
		if err != nil {
			return time.Time{}, err
		}
		for k, v := range header {
			req.Header[k] = v
		}
		var j gateway.Job
		if err := doJSON(hc, req, http.StatusOK, &j); err != nil {
			return time.Time{}, err
		}
		switch j.State {
		case gateway.JobDone:
			return time.Now(), nil
		case gateway.JobFailed, gateway.JobCancelled:
			return time.Time{}, fmt.Errorf("call %s %s: %s", sub.ID, j.State, j.Error)
		}
	}
}

func doJSON(hc *http.Client, req *http.Request, want int, out any) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}
