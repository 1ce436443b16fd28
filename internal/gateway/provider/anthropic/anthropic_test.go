package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/gateway"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testKey = "sk-ant-test-0000"

// fake stands in for Anthropic's API: it records every request and
// answers with reply.
type fake struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []recorded // guarded by mu
}

// recorded is a request as the fake saw it; Body is the decoded JSON.
type recorded struct {
	Method string
	Path   string
	Header http.Header
	Body   map[string]any
}

func newFake(t *testing.T, reply http.HandlerFunc) *fake {
	t.Helper()
	f := &fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone()}
		if b, _ := io.ReadAll(r.Body); len(b) > 0 {
			if err := json.Unmarshal(b, &rec.Body); err != nil {
				t.Errorf("request body is not JSON: %v: %s", err, b)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		f.mu.Unlock()
		reply(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// adapter returns an Adapter on the fake, with cfg's other fields.
func (f *fake) adapter(t *testing.T, cfg Config) *Adapter {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg.BaseURL = f.srv.URL + "/" // the trailing slash is trimmed
	cfg.APIKey = testKey
	cfg.HTTPClient = &http.Client{Transport: tr}
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return a
}

// only returns the one request the fake got.
func (f *fake) only(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 1 {
		t.Fatalf("fake got %d requests, want 1", len(f.reqs))
	}
	return f.reqs[0]
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// replyJSON answers with status, the fixture as body and the header
// pairs kv.
func replyJSON(t *testing.T, status int, name string, kv ...string) http.HandlerFunc {
	body := fixture(t, name)
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Set(kv[i], kv[i+1])
		}
		w.Header().Set("content-type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	}
}

// replySSE streams the fixture one event at a time, each flushed, then
// calls end (nil: the handler returns and the response ends cleanly).
func replySSE(t *testing.T, name string, end http.HandlerFunc) http.HandlerFunc {
	body := fixture(t, name)
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "text/event-stream; charset=utf-8")
		w.Header().Set("cache-control", "no-cache")
		w.WriteHeader(http.StatusOK)
		for _, part := range bytes.SplitAfter(body, []byte("\n\n")) {
			w.Write(part)
			w.(http.Flusher).Flush()
		}
		if end != nil {
			end(w, r)
		}
	}
}

// hang sends nothing more until the client goes away.
func hang(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// cut drops the connection without ending the chunked body.
func cut(w http.ResponseWriter, r *http.Request) { panic(http.ErrAbortHandler) }

// collect reads ch until it is closed.
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
			t.Fatalf("stream not closed after 10s; got %d chunks", len(out))
		}
	}
}

// split checks that only the last chunk ends the stream and returns the
// text deltas before it, and it.
func split(t *testing.T, chunks []gateway.Chunk) ([]string, gateway.Chunk) {
	t.Helper()
	if len(chunks) == 0 {
		t.Fatal("stream closed without a chunk")
	}
	var deltas []string
	for _, c := range chunks[:len(chunks)-1] {
		if c.Done || c.Err != nil {
			t.Fatalf("chunk before the last ends the stream: %+v", c)
		}
		if c.Delta != "" {
			deltas = append(deltas, c.Delta)
		}
	}
	return deltas, chunks[len(chunks)-1]
}

func providerError(t *testing.T, err error) *gateway.ProviderError {
	t.Helper()
	var pe *gateway.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *gateway.ProviderError", err, err)
	}
	return pe
}

func ptr[T any](v T) *T { return &v }

func TestNew(t *testing.T) {
	a, err := New(Config{APIKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if a.baseURL != DefaultBaseURL || a.version != DefaultVersion || a.timeout != DefaultTimeout ||
		a.stallTimeout != DefaultStallTimeout || a.maxTokens != DefaultMaxTokens || a.client == nil {
		t.Errorf("defaults not applied: %+v", a)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want error
	}{
		{"no key", Config{}, ErrNoAPIKey},
		{"relative URL", Config{APIKey: testKey, BaseURL: "api.anthropic.com"}, ErrBadBaseURL},
		{"other scheme", Config{APIKey: testKey, BaseURL: "ftp://example.test"}, ErrBadBaseURL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); !errors.Is(err, tc.want) {
				t.Errorf("New = %v, want %v", err, tc.want)
			}
		})
	}
}

// conversation has system messages to lift out of messages.
var conversation = []gateway.Message{
	{Role: "system", Content: "You are terse."},
	{Role: "user", Content: "Hi"},
	{Role: "assistant", Content: "Hello?"},
	{Role: "system", Content: "Answer in English."},
	{Role: "user", Content: "Say hello"},
}

var wantMessages = []any{
	map[string]any{"role": "user", "content": "Hi"},
	map[string]any{"role": "assistant", "content": "Hello?"},
	map[string]any{"role": "user", "content": "Say hello"},
}

func checkHeaders(t *testing.T, got recorded, method, path, version string) {
	t.Helper()
	if got.Method != method || got.Path != path {
		t.Errorf("request %s %s, want %s %s", got.Method, got.Path, method, path)
	}
	for k, want := range map[string]string{"x-api-key": testKey, "anthropic-version": version} {
		if v := got.Header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if method == http.MethodPost && got.Header.Get("content-type") != "application/json" {
		t.Errorf("content-type = %q", got.Header.Get("content-type"))
	}
}

func TestCompleteWithCache(t *testing.T) {
	f := newFake(t, replyJSON(t, http.StatusOK, "messages_cache.json"))
	a := f.adapter(t, Config{})
	resp, err := a.Complete(t.Context(), gateway.Request{
		Model:       "claude-sonnet-4-20250514",
		Messages:    conversation,
		Temperature: ptr(0.2),
		TopP:        ptr(0.9),
		Stop:        []string{"###"},
		User:        "user-42",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := gateway.Response{
		ID:           "msg_01XFDUDYJgAACzvnptvVoYEL",
		Model:        "claude-sonnet-4-20250514",
		Content:      "Hello, world",
		FinishReason: "stop",
		Usage:        gateway.Usage{Input: 12, CachedInput: 2048, CacheWrite: 1500, Output: 6},
	}
	if !reflect.DeepEqual(resp, want) {
		t.Errorf("Complete =\n%+v\nwant\n%+v", resp, want)
	}

	got := f.only(t)
	checkHeaders(t, got, http.MethodPost, "/v1/messages", DefaultVersion)
	wantBody := map[string]any{
		"model":          "claude-sonnet-4-20250514",
		"system":         "You are terse.\n\nAnswer in English.",
		"messages":       wantMessages,
		"max_tokens":     float64(DefaultMaxTokens),
		"temperature":    0.2,
		"top_p":          0.9,
		"stop_sequences": []any{"###"},
		"metadata":       map[string]any{"user_id": "user-42"},
	}
	if !reflect.DeepEqual(got.Body, wantBody) {
		t.Errorf("request body =\n%v\nwant\n%v", got.Body, wantBody)
	}
}

func TestCompleteOptions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		cfg         Config
		reqMax      int
		wantMax     float64
		wantVersion string
	}{
		{name: "config default max tokens", cfg: Config{DefaultMaxTokens: 256}, wantMax: 256, wantVersion: DefaultVersion},
		{name: "request max tokens", cfg: Config{DefaultMaxTokens: 256, Version: "2099-01-01"}, reqMax: 50, wantMax: 50, wantVersion: "2099-01-01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, replyJSON(t, http.StatusOK, "messages_max_tokens.json"))
			a := f.adapter(t, tc.cfg)
			resp, err := a.Complete(t.Context(), gateway.Request{Model: "m",
				Messages: []gateway.Message{{Role: "user", Content: "Count"}}, MaxTokens: tc.reqMax})
			if err != nil {
				t.Fatal(err)
			}
			// The thinking block is not text.
			if resp.Content != "One, two, thr" || resp.FinishReason != "length" {
				t.Errorf("Complete = %+v", resp)
			}
			got := f.only(t)
			checkHeaders(t, got, http.MethodPost, "/v1/messages", tc.wantVersion)
			if got.Body["max_tokens"] != tc.wantMax {
				t.Errorf("max_tokens = %v, want %v", got.Body["max_tokens"], tc.wantMax)
			}
			for _, k := range []string{"system", "temperature", "top_p", "stop_sequences", "metadata", "stream"} {
				if v, ok := got.Body[k]; ok {
					t.Errorf("unset %s sent as %v", k, v)
				}
			}
		})
	}
}

func TestCompleteUnknownRole(t *testing.T) {
	f := newFake(t, replyJSON(t, http.StatusOK, "messages_cache.json"))
	a := f.adapter(t, Config{})
	_, err := a.Complete(t.Context(), gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "function", Content: "42"}}})
	if pe := providerError(t, err); pe.Kind != gateway.KindBadRequest {
		t.Errorf("kind = %s, want %s", pe.Kind, gateway.KindBadRequest)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) != 0 {
		t.Errorf("a request with an unknown role was sent")
	}
}

func TestFinishReason(t *testing.T) {
	for in, want := range map[string]string{
		"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
		"refusal": "refusal", "pause_turn": "pause_turn", "": "",
	} {
		if got := finishReason(in); got != want {
			t.Errorf("finishReason(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestStream(t *testing.T) {
	for _, tc := range []struct {
		fixture    string
		wantDeltas []string
		want       gateway.Chunk
	}{
		{
			// Pings between deltas; two message_deltas whose cumulative
			// output_tokens is 9 then 15: 15, not 24.
			fixture:    "stream_ok.sse",
			wantDeltas: []string{"Hello", ", world"},
			want: gateway.Chunk{Done: true, FinishReason: "stop", ID: "msg_01Stream", Model: "claude-sonnet-4-20250514",
				Usage: &gateway.Usage{Input: 25, CachedInput: 2048, CacheWrite: 300, Output: 15}},
		},
		{
			// message_delta repeats the input and cache counts: they
			// replace message_start's.
			fixture:    "stream_delta_usage.sse",
			wantDeltas: []string{"Cached."},
			want: gateway.Chunk{Done: true, FinishReason: "stop", ID: "msg_01Usage", Model: "claude-sonnet-4-20250514",
				Usage: &gateway.Usage{Input: 30, CachedInput: 4096, CacheWrite: 700, Output: 4}},
		},
		{
			// thinking, signature and input_json deltas are not text.
			fixture:    "stream_tool_use.sse",
			wantDeltas: []string{"Let me check."},
			want: gateway.Chunk{Done: true, FinishReason: "tool_calls", ID: "msg_01Tool", Model: "claude-sonnet-4-20250514",
				Usage: &gateway.Usage{Input: 472, Output: 89}},
		},
	} {
		t.Run(tc.fixture, func(t *testing.T) {
			f := newFake(t, replySSE(t, tc.fixture, nil))
			a := f.adapter(t, Config{})
			ch, err := a.Stream(t.Context(), gateway.Request{Model: "claude-sonnet-4-20250514", Messages: conversation, MaxTokens: 300})
			if err != nil {
				t.Fatal(err)
			}
			deltas, last := split(t, collect(t, ch))
			if !reflect.DeepEqual(deltas, tc.wantDeltas) {
				t.Errorf("deltas = %q, want %q", deltas, tc.wantDeltas)
			}
			if !reflect.DeepEqual(last, tc.want) {
				t.Errorf("last chunk = %+v (usage %+v), want %+v (usage %+v)", last, last.Usage, tc.want, tc.want.Usage)
			}

			got := f.only(t)
			checkHeaders(t, got, http.MethodPost, "/v1/messages", DefaultVersion)
			if got.Header.Get("accept") != "text/event-stream" {
				t.Errorf("accept = %q", got.Header.Get("accept"))
			}
			if got.Body["stream"] != true || got.Body["max_tokens"] != float64(300) ||
				got.Body["system"] != "You are terse.\n\nAnswer in English." || !reflect.DeepEqual(got.Body["messages"], wantMessages) {
				t.Errorf("request body = %v", got.Body)
			}
		})
	}
}

func TestStreamFailsMidway(t *testing.T) {
	giant := func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("event: content_block_delta\ndata: "))
		w.Write(bytes.Repeat([]byte("x"), maxEventLineBytes+10))
		w.Write([]byte("\n\n"))
	}
	for _, tc := range []struct {
		name       string
		reply      func(t *testing.T) http.HandlerFunc
		cfg        Config
		wantDeltas []string
		wantKind   gateway.ErrorKind
		wantType   string
		wantMsg    string
	}{
		{
			name:       "error event overloaded",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_error_overloaded.sse", nil) },
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindOverloaded, wantType: "overloaded_error", wantMsg: "Overloaded",
		},
		{
			name:       "connection cut mid-answer",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_cut.sse", cut) },
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindServer, wantMsg: "stream cut before message_stop",
		},
		{
			name:       "malformed event",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_malformed.sse", nil) },
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindServer, wantMsg: "malformed content_block_delta event",
		},
		{
			name:       "no message_stop",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_no_stop.sse", nil) },
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindServer, wantMsg: "stream ended before message_stop",
		},
		{
			name:       "stall",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_head.sse", hang) },
			cfg:        Config{StallTimeout: 100 * time.Millisecond},
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindTimeout, wantMsg: "stream stalled",
		},
		{
			name:       "line over 1 MiB",
			reply:      func(t *testing.T) http.HandlerFunc { return replySSE(t, "stream_head.sse", giant) },
			wantDeltas: []string{"Hello"},
			wantKind:   gateway.KindServer, wantMsg: "server-sent event too long",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.reply(t))
			a := f.adapter(t, tc.cfg)
			ch, err := a.Stream(t.Context(), gateway.Request{Model: "m", Messages: conversation})
			if err != nil {
				t.Fatal(err)
			}
			deltas, last := split(t, collect(t, ch))
			if !reflect.DeepEqual(deltas, tc.wantDeltas) {
				t.Errorf("deltas = %q, want %q", deltas, tc.wantDeltas)
			}
			// A failed stream's last chunk may carry the usage reported
			// before the failure (the gateway charges it), never an empty
			// one.
			if last.Done || last.Usage != nil && *last.Usage == (gateway.Usage{}) {
				t.Errorf("failed stream's last chunk says done: %+v", last)
			}
			if last.Usage != nil && last.Usage.Input == 0 {
				t.Errorf("a failed stream reports usage without message_start's input: %+v", *last.Usage)
			}
			pe := providerError(t, last.Err)
			if pe.Kind != tc.wantKind || pe.Type != tc.wantType || !strings.Contains(pe.Message, tc.wantMsg) {
				t.Errorf("last chunk's error = %+v, want kind %s type %q message containing %q", pe, tc.wantKind, tc.wantType, tc.wantMsg)
			}
			if !pe.Retryable() {
				t.Errorf("%v is not retryable", pe)
			}
		})
	}
}

func TestStreamCancel(t *testing.T) {
	gone := make(chan struct{})
	f := newFake(t, replySSE(t, "stream_head.sse", func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		close(gone)
	}))
	a := f.adapter(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := a.Stream(ctx, gateway.Request{Model: "m", Messages: conversation})
	if err != nil {
		t.Fatal(err)
	}
	for first := true; first; {
		select {
		case c := <-ch:
			if c.Delta == "" && c.Usage != nil && !c.Done {
				continue // message_start's usage
			}
			if c.Delta != "Hello" {
				t.Fatalf("first chunk = %+v", c)
			}
			first = false
		case <-time.After(10 * time.Second):
			t.Fatal("no first chunk after 10s")
		}
	}
	cancel()
	for _, c := range collect(t, ch) {
		if c.Done || (c.Err != nil && !errors.Is(c.Err, context.Canceled)) {
			t.Errorf("chunk after cancel = %+v", c)
		}
	}
	select {
	case <-gone:
	case <-time.After(10 * time.Second):
		t.Fatal("the server still holds the connection after cancel")
	}
}

func TestStreamRefusedBeforeStart(t *testing.T) {
	t.Run("529", func(t *testing.T) {
		f := newFake(t, replyJSON(t, statusOverloaded, "error_overloaded.json"))
		a := f.adapter(t, Config{})
		ch, err := a.Stream(t.Context(), gateway.Request{Model: "m", Messages: conversation})
		if ch != nil {
			t.Error("refused stream returned a channel")
		}
		if pe := providerError(t, err); pe.Kind != gateway.KindOverloaded || pe.Status != statusOverloaded {
			t.Errorf("Stream error = %+v", pe)
		}
	})
	t.Run("no headers within Timeout", func(t *testing.T) {
		f := newFake(t, hang)
		a := f.adapter(t, Config{Timeout: 100 * time.Millisecond})
		_, err := a.Stream(t.Context(), gateway.Request{Model: "m", Messages: conversation})
		if pe := providerError(t, err); pe.Kind != gateway.KindTimeout {
			t.Errorf("Stream error = %+v", pe)
		}
	})
}

func TestErrors(t *testing.T) {
	now := time.Date(2026, 10, 17, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		status    int
		fixture   string
		header    []string
		wantKind  gateway.ErrorKind
		wantType  string
		wantRetry time.Duration
	}{
		{name: "429 retry-after", status: 429, fixture: "error_rate_limit.json", header: []string{"retry-after", "7"},
			wantKind: gateway.KindRateLimited, wantType: "rate_limit_error", wantRetry: 7 * time.Second},
		{name: "429 ratelimit reset headers", status: 429, fixture: "error_rate_limit.json", header: []string{
			"anthropic-ratelimit-requests-remaining", "12", "anthropic-ratelimit-requests-reset", now.Add(50 * time.Second).Format(time.RFC3339),
			"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", now.Add(20 * time.Second).Format(time.RFC3339),
		}, wantKind: gateway.KindRateLimited, wantType: "rate_limit_error", wantRetry: 20 * time.Second},
		{name: "529 overloaded", status: 529, fixture: "error_overloaded.json",
			wantKind: gateway.KindOverloaded, wantType: "overloaded_error"},
		{name: "400 credit balance too low", status: 400, fixture: "error_credit_balance.json",
			wantKind: gateway.KindQuotaExceeded, wantType: "invalid_request_error"},
		{name: "400 usage limits reached", status: 400, fixture: "error_usage_limits.json",
			wantKind: gateway.KindQuotaExceeded, wantType: "invalid_request_error"},
		{name: "429 spend limit", status: 429, fixture: "error_spend_limit.json",
			wantKind: gateway.KindQuotaExceeded, wantType: "rate_limit_error"},
		{name: "402 billing", status: 402, fixture: "error_billing.json",
			wantKind: gateway.KindQuotaExceeded, wantType: "billing_error"},
		{name: "401", status: 401, fixture: "error_auth.json", wantKind: gateway.KindAuth, wantType: "authentication_error"},
		{name: "403", status: 403, fixture: "error_permission.json", wantKind: gateway.KindAuth, wantType: "permission_error"},
		{name: "400", status: 400, fixture: "error_invalid_request.json", wantKind: gateway.KindBadRequest, wantType: "invalid_request_error"},
		{name: "404", status: 404, fixture: "error_not_found.json", wantKind: gateway.KindBadRequest, wantType: "not_found_error"},
		{name: "413", status: 413, fixture: "error_too_large.json", wantKind: gateway.KindBadRequest, wantType: "request_too_large"},
		{name: "500", status: 500, fixture: "error_api.json", wantKind: gateway.KindServer, wantType: "api_error"},
		{name: "502 not JSON", status: 502, fixture: "error_bad_gateway.html", wantKind: gateway.KindServer},
		{name: "503", status: 503, fixture: "error_overloaded.json", header: []string{"retry-after", "3"},
			wantKind: gateway.KindOverloaded, wantType: "overloaded_error", wantRetry: 3 * time.Second},
		{name: "504", status: 504, fixture: "error_api.json", wantKind: gateway.KindServer, wantType: "api_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, replyJSON(t, tc.status, tc.fixture, tc.header...))
			a := f.adapter(t, Config{})
			a.now = func() time.Time { return now }
			_, err := a.Complete(t.Context(), gateway.Request{Model: "m", Messages: conversation})
			pe := providerError(t, err)
			if pe.Kind != tc.wantKind || pe.Status != tc.status || pe.RetryAfter != tc.wantRetry {
				t.Errorf("error = %+v, want kind %s status %d retry after %s", pe, tc.wantKind, tc.status, tc.wantRetry)
			}
			if pe.Type != tc.wantType || pe.Message == "" {
				t.Errorf("error type %q message %q, want type %q", pe.Type, pe.Message, tc.wantType)
			}
			if tc.wantKind == gateway.KindQuotaExceeded && pe.Retryable() {
				t.Errorf("quota refusal %v is retryable", pe)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 10, 17, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		header []string
		want   time.Duration
	}{
		{[]string{"retry-after", "7"}, 7 * time.Second},
		{[]string{"retry-after", "1.5"}, 1500 * time.Millisecond},
		{[]string{"retry-after-ms", "250", "retry-after", "1"}, 250 * time.Millisecond},
		{[]string{"retry-after", now.Add(30 * time.Second).Format(http.TimeFormat)}, 30 * time.Second},
		{[]string{"retry-after", now.Add(-30 * time.Second).Format(http.TimeFormat)}, 0},
		{[]string{"retry-after", "-3"}, 0},
		{[]string{"retry-after", "soon"}, 0},
		{nil, 0},
	} {
		h := http.Header{}
		for i := 0; i+1 < len(tc.header); i += 2 {
			h.Set(tc.header[i], tc.header[i+1])
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("retryAfter(%v) = %s, want %s", tc.header, got, tc.want)
		}
	}
}

func TestTransportErrors(t *testing.T) {
	t.Run("network", func(t *testing.T) {
		f := newFake(t, hang)
		a := f.adapter(t, Config{})
		f.srv.Close()
		_, err := a.Complete(t.Context(), gateway.Request{Model: "m", Messages: conversation})
		if pe := providerError(t, err); pe.Kind != gateway.KindNetwork || pe.Status != 0 {
			t.Errorf("error = %+v", pe)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		f := newFake(t, hang)
		a := f.adapter(t, Config{Timeout: 100 * time.Millisecond})
		_, err := a.Complete(t.Context(), gateway.Request{Model: "m", Messages: conversation})
		if pe := providerError(t, err); pe.Kind != gateway.KindTimeout {
			t.Errorf("error = %+v", pe)
		}
	})
	t.Run("caller cancelled", func(t *testing.T) {
		f := newFake(t, hang)
		a := f.adapter(t, Config{})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := a.Complete(ctx, gateway.Request{Model: "m", Messages: conversation})
		var pe *gateway.ProviderError
		if !errors.Is(err, context.Canceled) || errors.As(err, &pe) {
			t.Errorf("error = %v, want one wrapping context.Canceled, not a provider's", err)
		}
	})
}

func TestHealthCheck(t *testing.T) {
	t.Run("ok", func(t *testing.T) {
		f := newFake(t, replyJSON(t, http.StatusOK, "models.json"))
		a := f.adapter(t, Config{})
		if err := a.HealthCheck(t.Context()); err != nil {
			t.Fatal(err)
		}
		checkHeaders(t, f.only(t), http.MethodGet, "/v1/models", DefaultVersion)
	})
	t.Run("401", func(t *testing.T) {
		f := newFake(t, replyJSON(t, http.StatusUnauthorized, "error_auth.json"))
		a := f.adapter(t, Config{})
		pe := providerError(t, a.HealthCheck(t.Context()))
		if pe.Kind != gateway.KindAuth || pe.Status != http.StatusUnauthorized || pe.Message != "invalid x-api-key" {
			t.Errorf("HealthCheck = %+v", pe)
		}
	})
}

func TestSSEReader(t *testing.T) {
	in := ": a comment\r\n" +
		"event: ping\r\ndata: {}\r\n\r\n" +
		"id: 7\nretry: 100\nevent: no-data\n\n" + // no data: not dispatched
		"data:first\ndata: second\n\n" +
		"event: last\ndata: never ended"
	r := newSSEReader(strings.NewReader(in), 64)
	var got []sseEvent
	for {
		ev, err := r.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev)
	}
	want := []sseEvent{{name: "ping", data: []byte("{}")}, {name: "message", data: []byte("first\nsecond")}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}

	for _, long := range []string{
		"data: " + strings.Repeat("x", 100) + "\n\n",                    // a line over the limit
		strings.Repeat("data: "+strings.Repeat("x", 40)+"\n", 3) + "\n", // data over the limit
	} {
		if _, err := newSSEReader(strings.NewReader(long), 64).next(); !errors.Is(err, errEventTooLong) {
			t.Errorf("next on a long event = %v, want errEventTooLong", err)
		}
	}
}
