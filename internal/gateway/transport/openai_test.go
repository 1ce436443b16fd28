package transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/stickyd/stickyd/internal/gateway"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// streamed is a stream that ends well, with a provider's own finish word.
var streamed = []gateway.Chunk{
	{Delta: "Hel", Provider: "anthropic", Deployment: "anthropic-main"}, {Delta: "lo"}, {Delta: " world"},
	{Done: true, FinishReason: "end_turn", ID: "msg_1", Model: "claude-x",
		Usage:    &gateway.Usage{Input: 10, CachedInput: 4, CacheWrite: 2, Output: 3},
		Provider: "anthropic", Deployment: "anthropic-main", CostMicros: 71},
}

// broken is a stream that fails after its first chunk.
var broken = []gateway.Chunk{
	{Delta: "Hel"},
	{Err: &gateway.ProviderError{Kind: gateway.KindServer, Status: 500, Message: "upstream reset"}},
}

// streamID matches the id a stream makes up.
var streamID = regexp.MustCompile(`chatcmpl-[0-9a-f]{24}`)

// TestChatGolden checks the answers' exact bytes against testdata/ (go
// test -update rewrites them): OpenAI clients parse these.
func TestChatGolden(t *testing.T) {
	svc := newFake(map[string]script{
		"m":      {resp: answered, chunks: streamed},
		"broken": {chunks: broken},
	})
	srv := newHTTP(t, svc, HTTPOptions{})
	msgs := `"messages": [{"role": "user", "content": "hello"}]`
	tests := []struct {
		file, body string
		status     int
	}{
		{"chat_completion.json", `{"model": "m", ` + msgs + `}`, 200},
		{"chat_stream.txt", `{"model": "m", "stream": true, "stream_options": {"include_usage": true}, ` + msgs + `}`, 200},
		{"chat_stream_no_usage.txt", `{"model": "m", "stream": true, ` + msgs + `}`, 200},
		{"chat_stream_failed.txt", `{"model": "broken", "stream": true, ` + msgs + `}`, 200},
		{"chat_error.json", `{"model": "gpt-9", ` + msgs + `}`, 404},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			resp, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", tt.body, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			out = streamID.ReplaceAll(out, []byte("chatcmpl-ID"))
			path := filepath.Join("testdata", tt.file)
			if *update {
				if err := os.WriteFile(path, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("answer differs from %s:\n%s\nwant:\n%s", path, out, want)
			}
		})
	}
}

func TestChatHeaders(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered, chunks: streamed}})
	srv := newHTTP(t, svc, HTTPOptions{})
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", map[string]any{"model": "m", "messages": hello}, nil)
	if resp.StatusCode != 200 || resp.Header.Get("X-Stickyd-Provider") != "openai" || resp.Header.Get("X-Stickyd-Deployment") != "openai-east" {
		t.Fatalf("status %d, headers %v: %s", resp.StatusCode, resp.Header, out)
	}
	resp, out = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", map[string]any{"model": "m", "messages": hello, "stream": true}, nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q: %s", ct, out)
	}
	// A stream names its server in its headers, its cost in a trailer.
	if resp.Header.Get("X-Stickyd-Provider") != "anthropic" || resp.Header.Get("X-Stickyd-Deployment") != "anthropic-main" ||
		resp.Trailer.Get("X-Stickyd-Cost-Micros") != "71" {
		t.Fatalf("a stream's headers %v, trailer %v", resp.Header, resp.Trailer)
	}
}

// TestChatRequest checks how OpenAI's request becomes the gateway's.
func TestChatRequest(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	srv := newHTTP(t, svc, HTTPOptions{})
	body := `{"model": "m", "max_tokens": 10, "max_completion_tokens": 20, "temperature": 0, "top_p": 0.5,
		"stop": ["a", "b"], "user": "u1", "presence_penalty": 0.1,
		"messages": [
			{"role": "developer", "content": "be brief"},
			{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
			{"role": "assistant", "content": null}
		]}`
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", body, map[string]string{"Idempotency-Key": "k1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	call := svc.lastCall(t)
	req := call.Request
	want := []gateway.Message{{Role: "system", Content: "be brief"}, {Role: "user", Parts: []gateway.Part{{Type: "text", Text: "one"}, {Type: "text", Text: "two"}}},
		{Role: "assistant", Content: ""}}
	if len(req.Messages) != len(want) {
		t.Fatalf("messages %+v", req.Messages)
	}
	for i := range want {
		if !reflect.DeepEqual(req.Messages[i], want[i]) {
			t.Fatalf("message %d: %+v, want %+v", i, req.Messages[i], want[i])
		}
	}
	if req.MaxTokens != 10 || req.MaxCompletionTokens != 20 || *req.PresencePenalty != 0.1 || req.Native == nil || string(req.Native.Body) != body || req.Temperature == nil || *req.Temperature != 0 || req.TopP == nil || *req.TopP != 0.5 ||
		strings.Join(req.Stop, ",") != "a,b" || req.User != "u1" || call.Session != "u1" || call.IdempotencyKey != "k1" {
		t.Fatalf("call %+v", call)
	}
}

// TestChatErrors checks every Service error's status and shape, answered
// whole and before a stream's first byte.
func TestChatErrors(t *testing.T) {
	for _, tt := range errorCases {
		t.Run(tt.name, func(t *testing.T) {
			scripts := map[string]script{
				"m": {err: tt.err},
				// A stream whose first chunk fails: still a plain answer.
				"first": {chunks: []gateway.Chunk{{Err: tt.err}}},
			}
			srv := newHTTP(t, newFake(scripts), HTTPOptions{})
			for _, c := range []struct{ model, stream string }{{"m", "false"}, {"m", "true"}, {"first", "true"}} {
				body := `{"model": "` + c.model + `", "stream": ` + c.stream + `, "messages": [{"role": "user", "content": "x"}]}`
				resp, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", body, nil)
				if resp.StatusCode != tt.status {
					t.Fatalf("%s stream=%s: status %d, want %d: %s", c.model, c.stream, resp.StatusCode, tt.status, out)
				}
				if got := resp.Header.Get("Retry-After"); got != tt.retryAfter {
					t.Fatalf("Retry-After %q, want %q", got, tt.retryAfter)
				}
				e := errorOf(t, out)
				if e.Type != tt.typ || e.Code != tt.code {
					t.Fatalf("type %q code %q, want %q %q", e.Type, e.Code, tt.typ, tt.code)
				}
				if !strings.Contains(e.Message, tt.shown) || (tt.hidden != "" && strings.Contains(e.Message, tt.hidden)) {
					t.Fatalf("message %q: want %q in it and not %q", e.Message, tt.shown, tt.hidden)
				}
			}
		})
	}
}

// TestStreamFlushes checks that each event reaches the caller as it is
// written: the stream holds after its first chunk until the caller has
// read it.
func TestStreamFlushes(t *testing.T) {
	hold := make(chan struct{})
	svc := newFake(map[string]script{"m": {chunks: streamed, hold: hold}})
	srv := newHTTP(t, svc, HTTPOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	readUntil := func(want string) {
		t.Helper()
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reading the stream before %q: %v", want, err)
			}
			if strings.Contains(line, want) {
				return
			}
		}
	}
	readUntil(`"content":"Hel"`)
	close(hold)
	readUntil("data: [DONE]")
}

// TestStreamCallerLeaves checks that a caller leaving mid-stream stops the
// Service's stream.
func TestStreamCallerLeaves(t *testing.T) {
	hold := make(chan struct{}) // never released
	svc := newFake(map[string]script{"m": {chunks: streamed, hold: hold}})
	srv := newHTTP(t, svc, HTTPOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/chat/completions",
		strings.NewReader(`{"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first line %q", line)
	}
	cancel()
	resp.Body.Close()
	waitFor(t, "the service's stream to stop", func() bool { return svc.openStreams() == 0 })
}

// TestOpenAIClient drives the handler with an unmodified OpenAI client.
func TestOpenAIClient(t *testing.T) {
	svc := newFake(map[string]script{
		"m":      {resp: answered, chunks: streamed},
		"broken": {chunks: broken},
		"poor":   {err: gateway.ErrBudget},
	})
	srv := newHTTP(t, svc, HTTPOptions{Auth: func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer sk-test" {
			return "", errors.New("unknown API key")
		}
		return "test-key", nil
	}})
	cfg := openai.DefaultConfig("sk-test")
	cfg.BaseURL = srv.URL + "/v1"
	cfg.HTTPClient = srv.Client()
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	req := openai.ChatCompletionRequest{
		Model:    "m",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hello"}},
	}

	t.Run("complete", func(t *testing.T) {
		resp, err := client.CreateChatCompletion(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "hi there" || resp.Choices[0].FinishReason != openai.FinishReasonStop ||
			resp.Choices[0].Message.Role != openai.ChatMessageRoleAssistant || resp.Object != "chat.completion" || resp.Model != "gpt-test-2025" {
			t.Fatalf("answer %+v", resp)
		}
		u := resp.Usage
		if u.PromptTokens != 10 || u.CompletionTokens != 2 || u.TotalTokens != 12 || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != 3 {
			t.Fatalf("usage %+v", u)
		}
		if p := resp.Header().Get("X-Stickyd-Provider"); p != "openai" {
			t.Fatalf("provider header %q", p)
		}
		if s := svc.lastCall(t).Session; s != "test-key" {
			t.Fatalf("session %q", s)
		}
	})

	t.Run("stream", func(t *testing.T) {
		sreq := req
		sreq.Stream = true
		sreq.StreamOptions = &openai.StreamOptions{IncludeUsage: true}
		stream, err := client.CreateChatCompletionStream(ctx, sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var text strings.Builder
		var finish openai.FinishReason
		var usage *openai.Usage
		for {
			r, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range r.Choices {
				text.WriteString(c.Delta.Content)
				if c.FinishReason != "" {
					finish = c.FinishReason
				}
			}
			if r.Usage != nil {
				usage = r.Usage
			}
		}
		if text.String() != "Hello world" || finish != openai.FinishReasonStop {
			t.Fatalf("text %q, finish %q", text.String(), finish)
		}
		if usage == nil || usage.PromptTokens != 16 || usage.CompletionTokens != 3 || usage.TotalTokens != 19 || usage.PromptTokensDetails.CachedTokens != 4 {
			t.Fatalf("usage %+v", usage)
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, c := range []struct {
			model  string
			stream bool
			status int
			code   string
		}{
			{"poor", false, 429, "budget_exceeded"},
			{"poor", true, 429, "budget_exceeded"},
			{"gpt-9", false, 404, "model_not_found"},
			{"gpt-9", true, 404, "model_not_found"},
		} {
			r := req
			r.Model = c.model
			var err error
			if c.stream {
				r.Stream = true
				var s *openai.ChatCompletionStream
				if s, err = client.CreateChatCompletionStream(ctx, r); err == nil {
					s.Close()
				}
			} else {
				_, err = client.CreateChatCompletion(ctx, r)
			}
			var apiErr *openai.APIError
			if !errors.As(err, &apiErr) {
				t.Fatalf("%s stream=%v: error %v, want an APIError", c.model, c.stream, err)
			}
			if apiErr.HTTPStatusCode != c.status || apiErr.Code != c.code {
				t.Fatalf("%s stream=%v: status %d code %v, want %d %s", c.model, c.stream, apiErr.HTTPStatusCode, apiErr.Code, c.status, c.code)
			}
		}

		bad := openai.NewClientWithConfig(func() openai.ClientConfig {
			c := openai.DefaultConfig("sk-wrong")
			c.BaseURL, c.HTTPClient = cfg.BaseURL, cfg.HTTPClient
			return c
		}())
		_, err := bad.CreateChatCompletion(ctx, req)
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 {
			t.Fatalf("wrong key: %v", err)
		}
	})

	t.Run("mid-stream failure", func(t *testing.T) {
		sreq := req
		sreq.Model, sreq.Stream = "broken", true
		stream, err := client.CreateChatCompletionStream(ctx, sreq)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		var text strings.Builder
		for {
			r, err := stream.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					t.Fatal("the stream ended as if it had finished")
				}
				var apiErr *openai.APIError
				if !errors.As(err, &apiErr) || apiErr.Code != "provider_error" {
					t.Fatalf("error %v, want the provider's failure", err)
				}
				break
			}
			for _, c := range r.Choices {
				text.WriteString(c.Delta.Content)
			}
		}
		if text.String() != "Hel" {
			t.Fatalf("text before the failure %q", text.String())
		}
	})
}
