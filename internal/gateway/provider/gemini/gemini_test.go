package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
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

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testKey = "AIza-test-0123456789"

type seen struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// fake is a local Gemini API: it records each request and answers with
// the testdata file its handler names.
type fake struct {
	*httptest.Server
	mu      sync.Mutex
	reqs    []seen
	handler http.HandlerFunc
}

func newFake(t *testing.T) *fake {
	f := &fake{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		h := f.handler
		f.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fake) serve(h http.HandlerFunc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handler, f.reqs = h, nil
}

func (f *fake) last(t *testing.T) seen {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("no request")
	}
	return f.reqs[len(f.reqs)-1]
}

// ending is what file does after its body.
type ending int

const (
	endReturn ending = iota
	endAbort         // drop the connection
	endStall         // send nothing more until the client leaves
)

// file answers status with testdata/name, an event stream flushed event
// by event when name ends in .sse.
func file(t *testing.T, status int, name string, end ending) http.HandlerFunc {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(name, ".sse") {
			w.Header().Set("Content-Type", "text/event-stream")
		} else {
			w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		}
		w.WriteHeader(status)
		for ev := range bytes.SplitAfterSeq(b, []byte("\r\n\r\n")) {
			w.Write(ev)
			w.(http.Flusher).Flush()
		}
		switch end {
		case endAbort:
			panic(http.ErrAbortHandler)
		case endStall:
			<-r.Context().Done()
		}
	}
}

func newAdapter(t *testing.T, f *fake) *Adapter {
	t.Helper()
	a, err := New(Config{BaseURL: f.URL, APIKey: testKey, HTTPClient: f.Client(), StallTimeout: 300 * time.Millisecond, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ptr[T any](v T) *T { return &v }

// conversation is a tool-calling conversation with an image, in the
// gateway's (OpenAI's) terms, as far as Gemini carries it.
func conversation() gateway.Request {
	return gateway.Request{
		Model: "gemini-3-pro-preview",
		Messages: []gateway.Message{
			{Role: "system", Content: "You are terse."},
			{Role: "user", Parts: []gateway.Part{{Type: gateway.PartText, Text: "Weather where this is?"},
				{Type: gateway.PartImage, URL: "data:image/png;base64,iVBORw0KGgo=", Detail: "low"}}},
			{Role: "assistant", ToolCalls: []gateway.ToolCall{
				{ID: "call_0" + signatureSep + "CtwBAdHtim9+Q3Xz", Name: "get_weather", Arguments: `{"city":"Vilnius"}`},
				{ID: "call_1", Name: "get_time", Arguments: ""}}},
			{Role: "tool", ToolCallID: "call_0" + signatureSep + "CtwBAdHtim9+Q3Xz", Content: `{"temp_c":21}`},
			{Role: "tool", ToolCallID: "call_1", Content: "12:00"},
			{Role: "user", Content: "Answer as JSON."},
		},
		MaxCompletionTokens: 300,
		Temperature:         ptr(0.2),
		TopP:                ptr(0.9),
		TopK:                ptr(40),
		Stop:                []string{"END"},
		Seed:                ptr(int64(7)),
		PresencePenalty:     ptr(0.5),
		Tools: []gateway.Tool{{Name: "get_weather", Description: "The weather in a city",
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)},
			{Name: "get_time"}},
		ToolChoice: &gateway.ToolChoice{Mode: "tool", Name: "get_weather"},
		ResponseFormat: &gateway.ResponseFormat{Type: "json_schema", Name: "weather", Strict: ptr(true),
			Schema: json.RawMessage(`{"type":"object","properties":{"temp_c":{"type":"number"}},"required":["temp_c"]}`)},
	}
}

// golden compares got with testdata/name (as JSON), or rewrites it with
// -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		var v any
		if err := json.Unmarshal(got, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("sent %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("sent\n%s\nwant (testdata/%s)\n%s", got, name, want)
	}
}

// The request: contents and parts, the system instruction, function
// declarations with their JSON Schema, the forced function, JSON-schema
// output, the sampling parameters; the thought signatures go back on
// their function calls, and the answers name their functions.
func TestRequest(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(file(t, 200, "generate_text.json", endReturn))
	if _, err := a.Complete(context.Background(), conversation()); err != nil {
		t.Fatal(err)
	}
	got := f.last(t)
	if got.method != "POST" || got.path != "/v1beta/models/gemini-3-pro-preview:generateContent" || got.query != "" ||
		got.header.Get("x-goog-api-key") != testKey || got.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s %s?%s %v", got.method, got.path, got.query, got.header)
	}
	golden(t, "request_conversation.json", got.body)

	f.serve(file(t, 200, "stream_ok.sse", endReturn))
	ch, err := a.Stream(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	for range ch {
	}
	got = f.last(t)
	if got.path != "/v1beta/models/gemini-3-pro-preview:streamGenerateContent" || got.query != "alt=sse" {
		t.Fatalf("stream: %s?%s", got.path, got.query)
	}
	golden(t, "request_conversation.json", got.body)
}

// What Gemini cannot carry is refused, naming the parameter, before any
// call.
func TestRefusals(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) { t.Error("the provider was called") })
	base := gateway.Request{Model: "g", Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
	for _, tc := range []struct {
		param string
		edit  func(*gateway.Request)
	}{
		{"n", func(r *gateway.Request) { r.N = 2 }},
		{"logprobs", func(r *gateway.Request) { r.Logprobs = true }},
		{"logit_bias", func(r *gateway.Request) { r.LogitBias = map[string]float64{"1": 1} }},
		{"user", func(r *gateway.Request) { r.User = "maria" }},
		{"metadata", func(r *gateway.Request) { r.Metadata = map[string]string{"k": "v"} }},
		{"reasoning_effort", func(r *gateway.Request) { r.ReasoningEffort = "low" }},
		{"parallel_tool_calls", func(r *gateway.Request) { r.ParallelToolCalls = ptr(false) }},
		{"thinking", func(r *gateway.Request) { r.Extra = []string{"thinking"} }},
		{"tools[0].function.strict", func(r *gateway.Request) { r.Tools = []gateway.Tool{{Name: "x", Strict: ptr(true)}} }},
		{"messages[0].content[0].image_url.url", func(r *gateway.Request) {
			r.Messages[0] = gateway.Message{Role: "user", Parts: []gateway.Part{{Type: gateway.PartImage, URL: "https://example.com/a.png"}}}
		}},
		{"messages[0].content[0]", func(r *gateway.Request) {
			r.Messages[0] = gateway.Message{Role: "user", Parts: []gateway.Part{{Type: "input_audio"}}}
		}},
		{"messages[0].name", func(r *gateway.Request) { r.Messages[0].Name = "maria" }},
	} {
		t.Run(tc.param, func(t *testing.T) {
			req := base
			req.Messages = append([]gateway.Message(nil), base.Messages...)
			tc.edit(&req)
			_, err := a.Complete(context.Background(), req)
			var pe *gateway.ProviderError
			if !errors.As(err, &pe) || pe.Kind != gateway.KindUnsupported || pe.Param != tc.param {
				t.Fatalf("Complete: %v (%+v)", err, pe)
			}
			if _, err := a.Stream(context.Background(), req); !errors.As(err, &pe) || pe.Param != tc.param {
				t.Fatalf("Stream: %v", err)
			}
		})
	}
	// A tool's answer to a call nobody made is the caller's mistake.
	req := gateway.Request{Model: "g", Messages: []gateway.Message{{Role: "tool", ToolCallID: "nope", Content: "x"}}}
	_, err := a.Complete(context.Background(), req)
	var pe *gateway.ProviderError
	if !errors.As(err, &pe) || pe.Kind != gateway.KindBadRequest || pe.Param != "messages[0].tool_call_id" {
		t.Fatalf("orphan tool answer: %v", err)
	}
}

// A whole answer: its text without the thinking, its usage with the
// cached tokens apart and the thinking tokens as output; function calls
// with their ids and signatures.
func TestComplete(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(file(t, 200, "generate_text.json", endReturn))
	resp, err := a.Complete(context.Background(), gateway.Request{Model: "gemini-2.5-flash", Messages: []gateway.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	want := gateway.Response{ID: "oXdJaPGmGLqWmNAPsqaBqA0", Model: "gemini-2.5-flash", Content: "A sticky session keeps a user on one server.",
		FinishReason: "stop", Usage: gateway.Usage{Input: 186, CachedInput: 1024, Output: 59}}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("got %+v\nwant %+v", resp, want)
	}

	f.serve(file(t, 200, "generate_function_call.json", endReturn))
	resp, err = a.Complete(context.Background(), gateway.Request{Model: "gemini-3-pro-preview", Messages: []gateway.Message{{Role: "user", Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	calls := []gateway.ToolCall{{ID: "call_0" + signatureSep + "CtwBAdHtim9+Q3Xz", Name: "get_weather", Arguments: `{"city":"Vilnius"}`},
		{ID: "call_1", Name: "get_time", Arguments: "{}"}}
	if resp.FinishReason != "tool_calls" || !reflect.DeepEqual(resp.ToolCalls, calls) || resp.Usage != (gateway.Usage{Input: 62, Output: 15}) {
		t.Fatalf("got %+v", resp)
	}
}

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
			t.Fatalf("stream still open after 10s")
		}
	}
}

// Streams: the text as it comes, a function call whole, Done with the
// usage at the end of the body; a cut, an end without a finishReason, an
// error event and a stall fail midway with the usage reported so far.
func TestStream(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	req := gateway.Request{Model: "gemini-2.5-flash", Messages: []gateway.Message{{Role: "user", Content: "hi"}}}

	f.serve(file(t, 200, "stream_ok.sse", endReturn))
	chunks := collect(t, must(a.Stream(context.Background(), req)))
	var text string
	for _, c := range chunks {
		text += c.Delta
	}
	last := chunks[len(chunks)-1]
	if text != "A sticky session keeps a user on one server." || !last.Done || last.FinishReason != "stop" ||
		*last.Usage != (gateway.Usage{Input: 9, Output: 23}) || last.ID != "s-1" || last.Model != "gemini-2.5-flash" {
		t.Fatalf("text %q, last %+v", text, last)
	}

	f.serve(file(t, 200, "stream_function_call.sse", endReturn))
	chunks = collect(t, must(a.Stream(context.Background(), req)))
	last = chunks[len(chunks)-1]
	if len(chunks) != 2 || !reflect.DeepEqual(chunks[0].ToolCalls, []gateway.ToolCallDelta{{Index: 0, ID: "call_0" + signatureSep + "Cs0BSIG", Name: "get_weather", Arguments: `{"city":"Vilnius"}`}}) ||
		last.FinishReason != "tool_calls" {
		t.Fatalf("chunks %+v", chunks)
	}

	for _, tc := range []struct {
		name, file string
		end        ending
		kind       gateway.ErrorKind
		msg        string
	}{
		{"cut", "stream_cut.sse", endAbort, gateway.KindServer, "cut"},
		{"no finish", "stream_no_finish.sse", endReturn, gateway.KindServer, "without a finishReason"},
		{"error event", "stream_error.sse", endReturn, gateway.KindOverloaded, "overloaded"},
		{"stall", "stream_no_finish.sse", endStall, gateway.KindTimeout, "stalled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.serve(file(t, 200, tc.file, tc.end))
			chunks := collect(t, must(a.Stream(context.Background(), req)))
			last := chunks[len(chunks)-1]
			var pe *gateway.ProviderError
			if !errors.As(last.Err, &pe) || pe.Kind != tc.kind || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("last chunk %+v", last)
			}
			if last.Usage == nil || *last.Usage != (gateway.Usage{Input: 9, Output: 2}) {
				t.Fatalf("usage reported before the failure: %v", last.Usage)
			}
			if chunks[0].Delta != "A sticky" {
				t.Fatalf("first chunk %+v", chunks[0])
			}
		})
	}
}

func must(ch <-chan gateway.Chunk, err error) <-chan gateway.Chunk {
	if err != nil {
		panic(err)
	}
	return ch
}

// Gemini's errors, whole and streamed, classified: a per-minute
// RESOURCE_EXHAUSTED waits its RetryInfo, a per-day one is the quota
// spent, an invalid key (a 400) is an auth failure.
func TestErrors(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	req := gateway.Request{Model: "g", Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
	for _, tc := range []struct {
		file   string
		status int
		kind   gateway.ErrorKind
		retry  time.Duration
	}{
		{"error_429.json", 429, gateway.KindRateLimited, 37 * time.Second},
		{"error_429_daily.json", 429, gateway.KindQuotaExceeded, 0},
		{"error_400_key.json", 400, gateway.KindAuth, 0},
		{"error_400.json", 400, gateway.KindBadRequest, 0},
		{"error_404.json", 404, gateway.KindBadRequest, 0},
		{"error_403.json", 403, gateway.KindAuth, 0},
		{"error_500.json", 500, gateway.KindServer, 0},
		{"error_503.json", 503, gateway.KindOverloaded, 0},
	} {
		t.Run(tc.file, func(t *testing.T) {
			f.serve(file(t, tc.status, tc.file, endReturn))
			_, err := a.Complete(context.Background(), req)
			_, serr := a.Stream(context.Background(), req)
			for _, err := range []error{err, serr} {
				var pe *gateway.ProviderError
				if !errors.As(err, &pe) || pe.Kind != tc.kind || pe.Status != tc.status || pe.RetryAfter != tc.retry || pe.Message == "" {
					t.Fatalf("%v (%+v)", err, pe)
				}
			}
		})
	}
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		io.WriteString(w, "<html><body>Bad Gateway</body></html>")
	})
	_, err := a.Complete(context.Background(), req)
	if gateway.KindOf(err) != gateway.KindServer || !strings.Contains(err.Error(), "Bad Gateway") {
		t.Fatalf("502 page: %v", err)
	}
}

// Embeddings: the texts in one batch, the vectors as floats or as the
// base64 the official clients ask for, the usage estimated when Gemini
// gives none; token arrays refused.
func TestEmbed(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"embeddings":[{"values":[0.5,-1.5]},{"values":[0.25,1]}]}`)
	})
	out, err := a.Embed(context.Background(), gateway.EmbedRequest{Model: "gemini-embedding-001", Input: json.RawMessage(`["sticky","sessions!"]`), Dimensions: ptr(2)})
	if err != nil {
		t.Fatal(err)
	}
	got := f.last(t)
	if got.path != "/v1beta/models/gemini-embedding-001:batchEmbedContents" {
		t.Fatalf("path %s", got.path)
	}
	golden(t, "request_embed.json", got.body)
	if len(out.Vectors) != 2 || string(out.Vectors[0]) != "[0.5,-1.5]" || out.Usage != (gateway.Usage{Input: 5}) {
		t.Fatalf("got %+v", out)
	}
	out, err = a.Embed(context.Background(), gateway.EmbedRequest{Model: "gemini-embedding-001", Input: json.RawMessage(`["a","b"]`), EncodingFormat: "base64"})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Vectors[0]) != `"AAAAPwAAwL8="` {
		t.Fatalf("base64 %s", out.Vectors[0])
	}
	_, err = a.Embed(context.Background(), gateway.EmbedRequest{Model: "m", Input: json.RawMessage(`[[1,2]]`)})
	var pe *gateway.ProviderError
	if !errors.As(err, &pe) || pe.Param != "input" {
		t.Fatalf("token arrays: %v", err)
	}
}

func TestHealthCheck(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"models":[]}`) })
	if err := a.HealthCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.last(t); got.method != "GET" || got.path != "/v1beta/models" || got.header.Get("x-goog-api-key") != testKey {
		t.Fatalf("%+v", got)
	}
	f.serve(file(t, 400, "error_400_key.json", endReturn))
	if err := a.HealthCheck(context.Background()); gateway.KindOf(err) != gateway.KindAuth {
		t.Fatalf("bad key: %v", err)
	}
}
