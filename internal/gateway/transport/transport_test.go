package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// script is what fakeService answers for one model.
type script struct {
	resp gateway.Response
	// err is Complete's and Stream's error.
	err error
	// chunks are Stream's chunks, in order.
	chunks []gateway.Chunk
	// hold, if set, holds the stream after its first chunk until it is
	// closed.
	hold chan struct{}
}

// fakeService is a scripted gateway.Service: each model answers its
// script, a model without one is unknown; submitted calls stay queued
// until finish ends them. It records every call.
type fakeService struct {
	scripts map[string]script

	mu sync.Mutex // guards the fields below
	// counts counts calls by method name.
	counts map[string]int
	calls  []gateway.Call
	jobs   map[string]*gateway.Job
	ended  map[string]chan struct{} // closed when the job ends
	// submitErr, if set, is Submit's error.
	submitErr error
	// open counts the streams whose sender has not ended.
	open int
}

var _ gateway.Service = (*fakeService)(nil)

func newFake(scripts map[string]script) *fakeService {
	return &fakeService{scripts: scripts, counts: map[string]int{}, jobs: map[string]*gateway.Job{}, ended: map[string]chan struct{}{}}
}

func (f *fakeService) record(method string, call *gateway.Call) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[method]++
	if call != nil {
		f.calls = append(f.calls, *call)
	}
}

func (f *fakeService) count(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[method]
}

func (f *fakeService) openStreams() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.open
}

func (f *fakeService) lastCall(t *testing.T) gateway.Call {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		t.Fatal("the service saw no call")
	}
	return f.calls[len(f.calls)-1]
}

func (f *fakeService) script(model string) (script, error) {
	s, ok := f.scripts[model]
	if !ok {
		return script{}, fmt.Errorf("%w %q", gateway.ErrUnknownModel, model)
	}
	return s, nil
}

func (f *fakeService) Complete(ctx context.Context, call gateway.Call) (gateway.Response, error) {
	f.record("Complete", &call)
	s, err := f.script(call.Request.Model)
	if err != nil {
		return gateway.Response{}, err
	}
	return s.resp, s.err
}

func (f *fakeService) Stream(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	f.record("Stream", &call)
	s, err := f.script(call.Request.Model)
	if err != nil {
		return nil, err
	}
	if s.err != nil {
		return nil, s.err
	}
	ch := make(chan gateway.Chunk)
	f.mu.Lock()
	f.open++
	f.mu.Unlock()
	go func() {
		defer func() {
			close(ch)
			f.mu.Lock()
			f.open--
			f.mu.Unlock()
		}()
		for i, c := range s.chunks {
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			}
			if i == 0 && s.hold != nil {
				select {
				case <-s.hold:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return ch, nil
}

func (f *fakeService) Submit(ctx context.Context, call gateway.Call) (string, error) {
	f.record("Submit", &call)
	if _, err := f.script(call.Request.Model); err != nil {
		return "", err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.submitErr != nil {
		return "", f.submitErr
	}
	id := fmt.Sprintf("job-%d", len(f.jobs)+1)
	f.jobs[id] = &gateway.Job{ID: id, State: gateway.JobQueued, Model: call.Request.Model, Session: call.Session,
		Submitted: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	f.ended[id] = make(chan struct{})
	return id, nil
}

func (f *fakeService) Job(ctx context.Context, id string) (gateway.Job, error) {
	f.record("Job", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return gateway.Job{}, gateway.ErrNoJob
	}
	return *j, nil
}

func (f *fakeService) Cancel(ctx context.Context, id string) error {
	f.record("Cancel", nil)
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[id]
	if !ok {
		return gateway.ErrNoJob
	}
	if !finished(j.State) {
		j.State, j.Error = gateway.JobCancelled, "cancelled by the caller"
		close(f.ended[id])
	}
	return nil
}

// finish ends job id in state, with resp when done.
func (f *fakeService) finish(id string, state gateway.JobState, resp *gateway.Response) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j := f.jobs[id]
	j.State, j.Response, j.Finished = state, resp, time.Date(2025, 1, 2, 3, 4, 6, 0, time.UTC)
	close(f.ended[id])
}

// waitingService is fakeService with the JobWaiter ability.
type waitingService struct{ *fakeService }

var _ JobWaiter = waitingService{}

func (w waitingService) Wait(ctx context.Context, id string) (gateway.Job, error) {
	w.record("Wait", nil)
	w.mu.Lock()
	ended, ok := w.ended[id]
	w.mu.Unlock()
	if !ok {
		return gateway.Job{}, gateway.ErrNoJob
	}
	select {
	case <-ended:
	case <-ctx.Done():
	}
	return w.Job(ctx, id)
}

// waitFor polls cond until it holds or 5 seconds pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "transport", Output: tWriter{t}, Level: hclog.Debug})
}

// fixedNow is the clock of the HTTP tests.
var fixedNow = time.Unix(1700000000, 0)

// newHTTP serves svc over HTTP for one test.
func newHTTP(t *testing.T, svc gateway.Service, opts HTTPOptions) *httptest.Server {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return fixedNow }
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = 5 * time.Millisecond
	}
	srv := httptest.NewServer(HTTPHandler(svc, opts))
	t.Cleanup(srv.Close)
	return srv
}

// do sends a request with a body (a string as it is, anything else as
// JSON) and returns the answer with its body read.
func do(t *testing.T, method, url string, body any, header map[string]string) (*http.Response, []byte) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(buf)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, out
}

// errorOf decodes an error answer, failing unless it has OpenAI's shape.
func errorOf(t *testing.T, body []byte) errorDetail {
	t.Helper()
	var raw map[string]map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatalf("error answer %s: %v", body, err)
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		if _, ok := raw["error"][k]; !ok {
			t.Fatalf("error answer %s has no error.%s", body, k)
		}
	}
	var e errorBody
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == "" {
		t.Fatalf("error answer %s lacks a message, type or code", body)
	}
	return e.Error
}

// hello is a one-message conversation.
var hello = []gateway.Message{{Role: "user", Content: "hello"}}
