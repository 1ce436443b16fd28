package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/gateway"
)

// TestMain fails the package if a test leaves a goroutine behind (a
// stream reader that never ended, say).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testKey = "sk-test-0123456789abcdef"

// fixture is a recorded HTTP answer. testdata/*.txt hold the status line,
// the headers and the body as the provider sent them; the body is stored
// de-chunked, so the files carry no Content-Length or Transfer-Encoding
// and the replaying server frames the body itself.
type fixture struct {
	status int
	header http.Header
	body   []byte
}

func loadFixture(t *testing.T, name string) fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw)))
	statusLine, err := tp.ReadLine()
	if err != nil {
		t.Fatalf("reading %s: %v", name, err)
	}
	fields := strings.Fields(statusLine)
	if len(fields) < 2 {
		t.Fatalf("reading %s: bad status line %q", name, statusLine)
	}
	status, err := strconv.Atoi(fields[1])
	if err != nil {
		t.Fatalf("reading %s: bad status line %q", name, statusLine)
	}
	header, err := tp.ReadMIMEHeader()
	if err != nil {
		t.Fatalf("reading %s headers: %v", name, err)
	}
	body, err := io.ReadAll(tp.R)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{status: status, header: http.Header(header), body: body}
}

// ending is what the replaying server does after a fixture's body.
type ending int

const (
	endReturn ending = iota // end the answer cleanly
	endAbort                // drop the connection
	endStall                // send nothing more until the client hangs up
)

// replay serves the fixture name: its status, its headers, and its body,
// an event stream flushed event by event.
func replay(t *testing.T, name string, end ending) http.HandlerFunc {
	f := loadFixture(t, name)
	return func(w http.ResponseWriter, r *http.Request) {
		for k, v := range f.header {
			w.Header()[k] = v
		}
		w.WriteHeader(f.status)
		if strings.HasPrefix(f.header.Get("Content-Type"), "text/event-stream") {
			for line := range bytes.Lines(f.body) {
				_, _ = w.Write(line)
				if len(bytes.TrimSpace(line)) == 0 {
					w.(http.Flusher).Flush()
				}
			}
		} else {
			_, _ = w.Write(f.body)
		}
		w.(http.Flusher).Flush()
		switch end {
		case endAbort:
			panic(http.ErrAbortHandler) // closes the connection mid-answer
		case endStall:
			<-r.Context().Done()
		}
	}
}

// received is a request as the test server saw it.
type received struct {
	method, path string
	header       http.Header
	body         []byte
}

type testServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received // guarded by mu
}

func newTestServer(t *testing.T, h http.HandlerFunc) *testServer {
	t.Helper()
	ts := &testServer{}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts.mu.Lock()
		ts.reqs = append(ts.reqs, received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
		ts.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// only returns the one request the server received.
func (ts *testServer) only(t *testing.T) received {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.reqs) != 1 {
		t.Fatalf("server received %d requests, want 1", len(ts.reqs))
	}
	return ts.reqs[0]
}

func testLogger(t *testing.T) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "openai", Output: t.Output(), Level: hclog.Debug})
}

func newAdapter(t *testing.T, ts *testServer, edit func(*Config)) *Adapter {
	t.Helper()
	cfg := Config{
		BaseURL:      ts.URL + "/v1/",
		APIKey:       testKey,
		Organization: "org-stickyd-test",
		HTTPClient:   ts.Client(),
		Name:         "openai-test",
		Logger:       testLogger(t),
	}
	if edit != nil {
		edit(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testRequest(maxTokens int) gateway.Request {
	temp, topP := 0.2, 0.9
	return gateway.Request{
		Model: "gpt-4o-mini",
		Messages: []gateway.Message{
			{Role: "system", Content: "You answer in one sentence."},
			{Role: "user", Content: "What is a sticky session?"},
		},
		MaxTokens:   maxTokens,
		Temperature: &temp,
		TopP:        &topP,
		Stop:        []string{"\n\n"},
		User:        "session-42",
	}
}

// checkChatRequest checks a POST /chat/completions: headers, and a body
// equal (as JSON) to testdata/golden.
func checkChatRequest(t *testing.T, got received, accept, golden string) {
	t.Helper()
	if got.method != http.MethodPost || got.path != "/v1/chat/completions" {
		t.Errorf("request = %s %s, want POST /v1/chat/completions", got.method, got.path)
	}
	for k, want := range map[string]string{
		"Authorization":       "Bearer " + testKey,
		"OpenAI-Organization": "org-stickyd-test",
		"Content-Type":        "application/json",
		"Accept":              accept,
	} {
		if v := got.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	wantRaw, err := os.ReadFile(filepath.Join("testdata", golden))
	if err != nil {
		t.Fatal(err)
	}
	var gotBody, wantBody any
	if err := json.Unmarshal(got.body, &gotBody); err != nil {
		t.Fatalf("request body is not JSON: %v\n%s", err, got.body)
	}
	if err := json.Unmarshal(wantRaw, &wantBody); err != nil {
		t.Fatalf("testdata/%s: %v", golden, err)
	}
	if !reflect.DeepEqual(gotBody, wantBody) {
		t.Errorf("request body\n got %s\nwant %s", got.body, wantRaw)
	}
}

// collect reads ch until it closes (failing after 10s).
func collect(t *testing.T, ch <-chan gateway.Chunk) []gateway.Chunk {
	t.Helper()
	var out []gateway.Chunk
	deadline := time.After(10 * time.Second)
	for {
		select {
		case c, ok := <-ch:
			if !ok {
				return out
			}
			out = append(out, c)
		case <-deadline:
			t.Fatalf("stream still open after 10s (%d chunks read)", len(out))
		}
	}
}

// text joins the chunks' deltas, checking that none is empty and that
// only the last chunk ends the stream.
func text(t *testing.T, chunks []gateway.Chunk) string {
	t.Helper()
	var b strings.Builder
	for i, c := range chunks {
		if i == len(chunks)-1 {
			break
		}
		if c.Done || c.Err != nil || c.Delta == "" {
			t.Errorf("chunk %d = %+v, want a non-empty delta", i, c)
		}
		b.WriteString(c.Delta)
	}
	return b.String()
}

func TestComplete(t *testing.T) {
	ts := newTestServer(t, replay(t, "completion_cached.txt", endReturn))
	a := newAdapter(t, ts, nil)

	got, err := a.Complete(t.Context(), testRequest(256))
	if err != nil {
		t.Fatal(err)
	}
	want := gateway.Response{
		ID:           "chatcmpl-CQk7fXb1uQ2pV9rWm3nT8sLd4eYhA",
		Model:        "gpt-4o-mini-2024-07-18",
		Content:      "A sticky session pins each user to one worker, so the worker can keep the user's state in memory.",
		FinishReason: "stop",
		// prompt_tokens 2006 include the 1920 cached ones.
		Usage: gateway.Usage{Input: 86, CachedInput: 1920, Output: 23},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Complete =\n %+v\nwant\n %+v", got, want)
	}
	checkChatRequest(t, ts.only(t), "application/json", "request_complete.json")
}

func TestCompleteBrokenAnswer(t *testing.T) {
	cases := []struct {
		name, body, wantMsg string
	}{
		{"not JSON", "<html>oops</html>", "decoding completion"},
		{"no choices", `{"id":"chatcmpl-1","object":"chat.completion","choices":[]}`, "no choices"},
		{"error in a 200", `{"error":{"message":"model overloaded","type":"server_error","code":null}}`, "model overloaded"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, tc.body)
			})
			_, err := newAdapter(t, ts, nil).Complete(t.Context(), testRequest(0))
			var pe *gateway.ProviderError
			if !errors.As(err, &pe) || pe.Kind != gateway.KindServer || !strings.Contains(pe.Message, tc.wantMsg) {
				t.Fatalf("err = %v, want KindServer containing %q", err, tc.wantMsg)
			}
		})
	}
}

func TestStream(t *testing.T) {
	cases := []struct {
		name, fixture string
		want          gateway.Chunk // the last chunk
		wantText      string
	}{
		{
			name:    "usage chunk with empty choices",
			fixture: "stream_ok.txt",
			want: gateway.Chunk{
				Done: true, FinishReason: "stop",
				Usage: &gateway.Usage{Input: 180, CachedInput: 1024, Output: 9},
				ID:    "chatcmpl-CQk7lR2mZ8dN4sYvB6xJ0wQeT1uPa", Model: "gpt-4o-mini-2024-07-18",
			},
			wantText: "Sticky sessions keep a user on one worker.",
		},
		{
			// An OpenAI-compatible server: choices null, CRLF lines,
			// keep-alive comments, an event: field.
			name:    "usage chunk with null choices",
			fixture: "stream_null_choices.txt",
			want: gateway.Chunk{
				Done: true, FinishReason: "length",
				Usage: &gateway.Usage{Input: 37, Output: 9},
				ID:    "chatcmpl-5f0b8c1e2d3a4b69a7c8d9e0f1a2b3c4", Model: "meta-llama/Llama-3.1-8B-Instruct",
			},
			wantText: "Sticky sessions keep a user on one worker.",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, replay(t, tc.fixture, endReturn))
			a := newAdapter(t, ts, nil)

			ch, err := a.Stream(t.Context(), testRequest(0))
			if err != nil {
				t.Fatal(err)
			}
			chunks := collect(t, ch)
			if len(chunks) == 0 {
				t.Fatal("no chunks")
			}
			if got := text(t, chunks); got != tc.wantText {
				t.Errorf("text = %q, want %q", got, tc.wantText)
			}
			if last := chunks[len(chunks)-1]; !reflect.DeepEqual(last, tc.want) {
				t.Errorf("last chunk = %+v (usage %+v), want %+v (usage %+v)", last, last.Usage, tc.want, tc.want.Usage)
			}
			checkChatRequest(t, ts.only(t), "text/event-stream", "request_stream.json")
		})
	}
}

// TestStreamFailure covers the mid-stream failures: each stream delivers
// what came before the failure, then one last chunk with Err.
func TestStreamFailure(t *testing.T) {
	giantLine := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		_, _ = io.WriteString(w, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":"Sticky"},"finish_reason":null}]}`+"\n\n")
		_, _ = io.WriteString(w, `data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"`+strings.Repeat("x", maxLine+1)+`"}}]}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	cases := []struct {
		name     string
		handler  func(t *testing.T) http.HandlerFunc
		stall    time.Duration
		wantKind gateway.ErrorKind
		wantType string
		wantMsg  string
		wantText string
	}{
		{
			name:     "connection cut mid-answer",
			handler:  func(t *testing.T) http.HandlerFunc { return replay(t, "stream_cut.txt", endAbort) },
			wantKind: gateway.KindServer, wantMsg: "stream cut",
			wantText: "Sticky sessions keep a",
		},
		{
			name:     "stall",
			handler:  func(t *testing.T) http.HandlerFunc { return replay(t, "stream_stall.txt", endStall) },
			stall:    100 * time.Millisecond,
			wantKind: gateway.KindTimeout, wantMsg: "stalled: no data for 100ms",
			wantText: "Sticky sessions keep",
		},
		{
			name:     "malformed chunk",
			handler:  func(t *testing.T) http.HandlerFunc { return replay(t, "stream_malformed.txt", endReturn) },
			wantKind: gateway.KindServer, wantMsg: "malformed stream chunk",
			wantText: "Sticky sessions",
		},
		{
			name:     "missing [DONE]",
			handler:  func(t *testing.T) http.HandlerFunc { return replay(t, "stream_missing_done.txt", endReturn) },
			wantKind: gateway.KindServer, wantMsg: "ended before [DONE]",
			wantText: "Sticky sessions keep a user on one worker.",
		},
		{
			name:     "error object mid-stream",
			handler:  func(t *testing.T) http.HandlerFunc { return replay(t, "stream_error.txt", endReturn) },
			wantKind: gateway.KindServer, wantType: "server_error",
			wantMsg:  "The server had an error while processing your request. Sorry about that!",
			wantText: "Sticky sessions keep",
		},
		{
			name:     "line over the limit",
			handler:  func(*testing.T) http.HandlerFunc { return giantLine },
			wantKind: gateway.KindServer, wantMsg: "stream line longer than 1048576 bytes",
			wantText: "Sticky",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, tc.handler(t))
			a := newAdapter(t, ts, func(c *Config) { c.StallTimeout = tc.stall })

			ch, err := a.Stream(t.Context(), testRequest(0))
			if err != nil {
				t.Fatal(err)
			}
			chunks := collect(t, ch)
			if len(chunks) == 0 {
				t.Fatal("no chunks")
			}
			if got := text(t, chunks); got != tc.wantText {
				t.Errorf("text = %q, want %q", got, tc.wantText)
			}
			last := chunks[len(chunks)-1]
			var pe *gateway.ProviderError
			if last.Done || !errors.As(last.Err, &pe) {
				t.Fatalf("last chunk = %+v, want Err a *ProviderError", last)
			}
			if pe.Kind != tc.wantKind || pe.Type != tc.wantType || !strings.Contains(pe.Message, tc.wantMsg) {
				t.Errorf("Err = %#v, want kind %s, type %q, message containing %q", pe, tc.wantKind, tc.wantType, tc.wantMsg)
			}
			if !pe.Retryable() {
				t.Errorf("mid-stream %s not retryable", pe.Kind)
			}
		})
	}
}

// TestStreamCancel: cancelling ctx mid-stream closes the channel and the
// connection (the server sees the client go).
func TestStreamCancel(t *testing.T) {
	disconnected := make(chan struct{})
	stall := replay(t, "stream_stall.txt", endStall)
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		stall(w, r) // returns once the client hangs up
		close(disconnected)
	})
	a := newAdapter(t, ts, nil)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := a.Stream(ctx, testRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-ch:
		if c.Delta != "Sticky" {
			t.Fatalf("first chunk = %+v", c)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no first chunk")
	}
	cancel()
	for _, c := range collect(t, ch) {
		if c.Done || c.Err != nil {
			t.Errorf("after cancel got %+v, want the channel closed", c)
		}
	}
	select {
	case <-disconnected:
	case <-time.After(10 * time.Second):
		t.Fatal("server did not see the client disconnect")
	}
}

// TestStreamAbandoned: a reader that stops reading and cancels does not
// strand the stream's goroutine on a send.
func TestStreamAbandoned(t *testing.T) {
	before := goleak.IgnoreCurrent()
	ts := newTestServer(t, replay(t, "stream_stall.txt", endStall))
	a := newAdapter(t, ts, nil)

	ctx, cancel := context.WithCancel(t.Context())
	ch, err := a.Stream(ctx, testRequest(0))
	if err != nil {
		t.Fatal(err)
	}
	<-ch // the goroutine now blocks sending the second chunk
	cancel()
	ts.Close() // the server's and the client's connection goroutines end
	goleak.VerifyNone(t, before)
}

// TestErrors: refusals are classified the same by Complete and Stream.
func TestErrors(t *testing.T) {
	cases := []struct {
		fixture        string
		wantKind       gateway.ErrorKind
		wantStatus     int
		wantType       string
		wantMsg        string
		wantRetryAfter time.Duration
		wantRetryable  bool
	}{
		{"error_429_retry_after.txt", gateway.KindRateLimited, 429, "rate_limit_exceeded", "tokens per min", 20 * time.Second, true},
		{"error_429_retry_after_ms.txt", gateway.KindRateLimited, 429, "rate_limit_exceeded", "requests per min", 1250 * time.Millisecond, true},
		{"error_429_insufficient_quota.txt", gateway.KindQuotaExceeded, 429, "insufficient_quota", "exceeded your current quota", 0, false},
		{"error_429_project_spend_limit.txt", gateway.KindQuotaExceeded, 429, "project_spend_limit_exceeded", "exceeded your current quota", 0, false},
		{"error_503.txt", gateway.KindOverloaded, 503, "server_error", "overloaded", 0, true},
		{"error_500.txt", gateway.KindServer, 500, "server_error", "had an error", 0, true},
		{"error_502_html.txt", gateway.KindServer, 502, "", "Bad Gateway: <html>", 0, true},
		{"error_400_context_length.txt", gateway.KindBadRequest, 400, "context_length_exceeded", "maximum context length", 0, false},
		{"error_404_model.txt", gateway.KindBadRequest, 404, "model_not_found", "does not exist", 0, false},
		{"error_401.txt", gateway.KindAuth, 401, "invalid_api_key", "Incorrect API key", 0, false},
	}
	calls := map[string]func(*Adapter, context.Context) error{
		"Complete": func(a *Adapter, ctx context.Context) error {
			_, err := a.Complete(ctx, testRequest(256))
			return err
		},
		"Stream": func(a *Adapter, ctx context.Context) error {
			ch, err := a.Stream(ctx, testRequest(256))
			if ch != nil {
				t.Error("Stream returned a channel with an error")
			}
			return err
		},
	}
	for _, tc := range cases {
		for call, do := range calls {
			t.Run(strings.TrimSuffix(tc.fixture, ".txt")+"/"+call, func(t *testing.T) {
				ts := newTestServer(t, replay(t, tc.fixture, endReturn))
				err := do(newAdapter(t, ts, nil), t.Context())
				var pe *gateway.ProviderError
				if !errors.As(err, &pe) {
					t.Fatalf("err = %v, want a *ProviderError", err)
				}
				if pe.Kind != tc.wantKind || pe.Status != tc.wantStatus || pe.Type != tc.wantType || pe.RetryAfter != tc.wantRetryAfter {
					t.Errorf("err = %#v\nwant kind %s, status %d, type %q, retry after %v", pe, tc.wantKind, tc.wantStatus, tc.wantType, tc.wantRetryAfter)
				}
				if !strings.Contains(pe.Message, tc.wantMsg) {
					t.Errorf("message %q does not contain %q", pe.Message, tc.wantMsg)
				}
				if pe.Retryable() != tc.wantRetryable {
					t.Errorf("Retryable() = %v, want %v", pe.Retryable(), tc.wantRetryable)
				}
				if strings.Contains(err.Error(), testKey) {
					t.Errorf("error shows the API key: %v", err)
				}
				ts.only(t) // sent once: the adapter never retries
			})
		}
	}
}

func TestHealthCheck(t *testing.T) {
	cases := []struct {
		fixture  string
		wantKind gateway.ErrorKind // "" for healthy
	}{
		{"models.txt", ""},
		{"error_401.txt", gateway.KindAuth},
		{"error_503.txt", gateway.KindOverloaded},
	}
	for _, tc := range cases {
		t.Run(strings.TrimSuffix(tc.fixture, ".txt"), func(t *testing.T) {
			ts := newTestServer(t, replay(t, tc.fixture, endReturn))
			err := newAdapter(t, ts, nil).HealthCheck(t.Context())
			switch {
			case tc.wantKind == "" && err != nil:
				t.Fatalf("HealthCheck = %v, want nil", err)
			case tc.wantKind != "" && gateway.KindOf(err) != tc.wantKind:
				t.Fatalf("HealthCheck = %v, want kind %s", err, tc.wantKind)
			}
			got := ts.only(t)
			if got.method != http.MethodGet || got.path != "/v1/models" {
				t.Errorf("request = %s %s, want GET /v1/models", got.method, got.path)
			}
			if v := got.header.Get("Authorization"); v != "Bearer "+testKey {
				t.Errorf("Authorization = %q", v)
			}
		})
	}
}

func TestUnreachable(t *testing.T) {
	ts := newTestServer(t, func(http.ResponseWriter, *http.Request) {})
	a := newAdapter(t, ts, nil)
	ts.Close() // nothing listens on the address any more

	_, err := a.Complete(t.Context(), testRequest(0))
	if k := gateway.KindOf(err); k != gateway.KindNetwork {
		t.Errorf("Complete = %v (kind %s), want KindNetwork", err, k)
	}
	if _, err := a.Stream(t.Context(), testRequest(0)); gateway.KindOf(err) != gateway.KindNetwork {
		t.Errorf("Stream = %v, want KindNetwork", err)
	}
	if err := a.HealthCheck(t.Context()); gateway.KindOf(err) != gateway.KindNetwork {
		t.Errorf("HealthCheck = %v, want KindNetwork", err)
	}
}

func TestTimeout(t *testing.T) {
	// The server takes the request and never answers.
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	a := newAdapter(t, ts, func(c *Config) { c.Timeout = 50 * time.Millisecond })

	_, err := a.Complete(t.Context(), testRequest(0))
	if k := gateway.KindOf(err); k != gateway.KindTimeout {
		t.Errorf("Complete = %v (kind %s), want KindTimeout", err, k)
	}
	if _, err := a.Stream(t.Context(), testRequest(0)); gateway.KindOf(err) != gateway.KindTimeout {
		t.Errorf("Stream = %v, want KindTimeout", err)
	}
	if err := a.HealthCheck(t.Context()); gateway.KindOf(err) != gateway.KindTimeout {
		t.Errorf("HealthCheck = %v, want KindTimeout", err)
	}

	// The caller's cancel is not the provider's fault.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := a.Complete(ctx, testRequest(0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Complete after cancel = %v, want context.Canceled", err)
	}
	if _, err := a.Stream(ctx, testRequest(0)); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream after cancel = %v, want context.Canceled", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 10, 14, 9, 12, 44, 0, time.UTC)
	cases := []struct {
		name   string
		header map[string]string
		want   time.Duration
	}{
		{"none", nil, 0},
		{"seconds", map[string]string{"Retry-After": "20"}, 20 * time.Second},
		{"fractional seconds", map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{"milliseconds", map[string]string{"Retry-After-Ms": "250"}, 250 * time.Millisecond},
		{"milliseconds first", map[string]string{"Retry-After": "2", "Retry-After-Ms": "1250"}, 1250 * time.Millisecond},
		{"bad milliseconds", map[string]string{"Retry-After": "2", "Retry-After-Ms": "soon"}, 2 * time.Second},
		{"HTTP date", map[string]string{"Retry-After": "Tue, 14 Oct 2025 09:13:14 GMT"}, 30 * time.Second},
		{"past date", map[string]string{"Retry-After": "Tue, 14 Oct 2025 09:00:00 GMT"}, 0},
		{"negative", map[string]string{"Retry-After": "-3"}, 0},
		{"garbage", map[string]string{"Retry-After": "later"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for k, v := range tc.header {
				h.Set(k, v)
			}
			if got := retryAfter(h, now); got != tc.want {
				t.Errorf("retryAfter(%v) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestParseAPIError(t *testing.T) {
	cases := []struct {
		name, body string
		want       apiError
		wantOK     bool
	}{
		{"openai", `{"error":{"message":"m","type":"t","param":null,"code":"c"}}`, apiError{Message: "m", Type: "t", Code: "c"}, true},
		{"null code", `{"error":{"message":"m","type":"t","code":null}}`, apiError{Message: "m", Type: "t"}, true},
		{"string error", `{"error":"model \"x\" not found"}`, apiError{Message: `model "x" not found`}, true},
		{"bare vLLM object", `{"object":"error","message":"m","type":"BadRequestError","param":null,"code":400}`, apiError{Message: "m", Type: "BadRequestError", Code: "400"}, true},
		{"not an error", `{"id":"x"}`, apiError{}, false},
		{"not JSON", `<html>`, apiError{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseAPIError([]byte(tc.body))
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("parseAPIError = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestNew(t *testing.T) {
	a, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a.base != DefaultBaseURL || a.timeout != DefaultTimeout || a.stallTimeout != DefaultStallTimeout {
		t.Errorf("defaults = %q %v %v", a.base, a.timeout, a.stallTimeout)
	}
	for _, cfg := range []Config{
		{BaseURL: "localhost:8000/v1"},
		{BaseURL: "/v1"},
		{BaseURL: "ftp://example.test/v1"},
		{BaseURL: "http://%zz"},
		{Timeout: -time.Second},
		{StallTimeout: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) = nil error", cfg)
		}
	}
}
