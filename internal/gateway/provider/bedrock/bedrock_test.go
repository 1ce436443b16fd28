package bedrock

import (
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
	"github.com/stickyd/stickyd/internal/gateway/provider/bedrock/bedrocktest"
)

var update = flag.Bool("update", false, "rewrite the golden request bodies in testdata")

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	accessKey = "AKIDSTICKYDTEST"
	secretKey = "stickyd/test/secret"
	region    = "eu-central-1"
)

type seen struct {
	method, path string
	body         []byte
	sigErr       error
	region       string
}

// fake is a local Bedrock Runtime: it checks each request's signature,
// records it, and answers with its handler.
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
		reg, service, err := bedrocktest.VerifySignature(r, body, accessKey, secretKey)
		if err == nil && service != "bedrock" {
			err = errors.New("signed for " + service)
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{r.Method, r.URL.EscapedPath(), body, err, reg})
		h := f.handler
		f.mu.Unlock()
		if err != nil {
			bedrocktest.WriteError(w, 403, "InvalidSignatureException", err.Error())
			return
		}
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
	r := f.reqs[len(f.reqs)-1]
	if r.sigErr != nil || r.region != region {
		t.Fatalf("signature: %v (region %q)", r.sigErr, r.region)
	}
	return r
}

// credentials puts the test's credentials in the environment, where the
// SDK's chain finds them, and keeps it off the machine's own files.
func credentials(t *testing.T, key, secret string) {
	dir := t.TempDir()
	t.Setenv("AWS_ACCESS_KEY_ID", key)
	t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CA_BUNDLE", "") // the test's client is its own
}

func newAdapter(t *testing.T, f *fake) *Adapter {
	t.Helper()
	credentials(t, accessKey, secretKey)
	a, err := New(Config{Region: region, Endpoint: f.URL, HTTPClient: f.Client(), Timeout: 5 * time.Second, StallTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func ptr[T any](v T) *T { return &v }

const claude = "anthropic.claude-sonnet-4-5-20250929-v1:0"

func conversation() gateway.Request {
	return gateway.Request{
		Model: claude,
		Messages: []gateway.Message{
			{Role: "system", Content: "You are terse."},
			{Role: "user", Parts: []gateway.Part{{Type: gateway.PartText, Text: "Weather where this is?"},
				{Type: gateway.PartImage, URL: "data:image/png;base64,iVBORw0KGgo="}}},
			{Role: "assistant", Content: "Let me look.", ToolCalls: []gateway.ToolCall{{ID: "tooluse_1", Name: "get_weather", Arguments: `{"city":"Vilnius"}`}}},
			{Role: "tool", ToolCallID: "tooluse_1", Content: `{"temp_c":21}`},
			{Role: "user", Content: "Answer as JSON."},
		},
		MaxTokens:   300,
		Temperature: ptr(0.5),
		TopP:        ptr(0.9),
		Stop:        []string{"END"},
		User:        "maria",
		Metadata:    map[string]string{"run": "e2e"},
		ServiceTier: "priority",
		Tools: []gateway.Tool{{Name: "get_weather", Description: "The weather in a city", Strict: ptr(true),
			Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)}},
		ToolChoice: &gateway.ToolChoice{Mode: "required"},
		ResponseFormat: &gateway.ResponseFormat{Type: "json_schema", Name: "weather",
			Schema: json.RawMessage(`{"type":"object","properties":{"temp_c":{"type":"number"}}}`)},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		var v any
		if err := json.Unmarshal(got, &v); err != nil {
			t.Fatal(err)
		}
		b, _ := json.MarshalIndent(v, "", "  ")
		os.MkdirAll("testdata", 0o755)
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
	json.Unmarshal(want, &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("sent\n%s\nwant (testdata/%s)\n%s", got, name, want)
	}
}

const converseAnswer = `{"metrics":{"latencyMs":812},"output":{"message":{"content":[{"text":"Checking."},{"toolUse":{"input":{"city":"Vilnius","days":2},"name":"get_weather","toolUseId":"tooluse_kZJMlvQmRJ6eAyJE5GIl7Q"}}],"role":"assistant"}},"stopReason":"tool_use","usage":{"inputTokens":118,"outputTokens":54,"totalTokens":2220,"cacheReadInputTokens":1024,"cacheWriteInputTokens":1024}}`

// A signed Converse call: messages and content blocks, tools, JSON
// schema output, metadata; the answer's text, tool use and usage with
// the cache's reads and writes.
func TestConverse(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Amzn-RequestId", "3c8e9f0a-req")
		io.WriteString(w, converseAnswer)
	})
	resp, err := a.Complete(context.Background(), conversation())
	if err != nil {
		t.Fatal(err)
	}
	got := f.last(t)
	if got.method != "POST" || got.path != "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse" {
		t.Fatalf("%s %s", got.method, got.path)
	}
	golden(t, "request_converse.json", got.body)
	want := gateway.Response{ID: "3c8e9f0a-req", Model: claude, Content: "Checking.", FinishReason: "tool_calls",
		Usage:     gateway.Usage{Input: 118, CachedInput: 1024, CacheWrite: 1024, Output: 54},
		ToolCalls: []gateway.ToolCall{{ID: "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", Name: "get_weather", Arguments: `{"city":"Vilnius","days":2}`}}}
	if !reflect.DeepEqual(resp, want) {
		t.Fatalf("got  %+v\nwant %+v", resp, want)
	}
}

// What Converse cannot carry is refused, naming the parameter, before
// any call.
func TestRefusals(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) { t.Error("the provider was called") })
	for _, tc := range []struct {
		param string
		edit  func(*gateway.Request)
	}{
		{"n", func(r *gateway.Request) { r.N = 2 }},
		{"logprobs", func(r *gateway.Request) { r.Logprobs = true }},
		{"top_k", func(r *gateway.Request) { r.TopK = ptr(5) }},
		{"seed", func(r *gateway.Request) { r.Seed = ptr(int64(1)) }},
		{"frequency_penalty", func(r *gateway.Request) { r.FrequencyPenalty = ptr(0.5) }},
		{"parallel_tool_calls", func(r *gateway.Request) { r.ParallelToolCalls = ptr(false) }},
		{"tool_choice", func(r *gateway.Request) {
			r.Tools = []gateway.Tool{{Name: "x"}}
			r.ToolChoice = &gateway.ToolChoice{Mode: "none"}
		}},
		{"service_tier", func(r *gateway.Request) { r.ServiceTier = "scale" }},
		{"messages[0].content[0].image_url.url", func(r *gateway.Request) {
			r.Messages[0] = gateway.Message{Role: "user", Parts: []gateway.Part{{Type: gateway.PartImage, URL: "https://example.com/a.png"}}}
		}},
		{"messages[0].content[0].image_url.detail", func(r *gateway.Request) {
			r.Messages[0] = gateway.Message{Role: "user", Parts: []gateway.Part{{Type: gateway.PartImage, URL: "data:image/png;base64,AAAA", Detail: "low"}}}
		}},
		{"cache_control", func(r *gateway.Request) { r.Extra = []string{"cache_control"} }},
	} {
		t.Run(tc.param, func(t *testing.T) {
			req := gateway.Request{Model: claude, Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
			tc.edit(&req)
			_, err := a.Complete(context.Background(), req)
			var pe *gateway.ProviderError
			if !errors.As(err, &pe) || pe.Kind != gateway.KindUnsupported || pe.Param != tc.param {
				t.Fatalf("Complete: %v", err)
			}
			if _, err := a.Stream(context.Background(), req); !errors.As(err, &pe) || pe.Param != tc.param {
				t.Fatalf("Stream: %v", err)
			}
		})
	}
}

// streamOf answers ConverseStream with events, then ends as end says.
func streamOf(events [][2]any, end string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", bedrocktest.EventStreamType)
		w.Header().Set("X-Amzn-RequestId", "stream-req-1")
		for _, e := range events {
			bedrocktest.WriteEvent(w, e[0].(string), e[1])
			w.(http.Flusher).Flush()
		}
		switch end {
		case "throttled":
			bedrocktest.WriteException(w, "throttlingException", "Too many tokens, please wait before trying again.")
		case "model error":
			bedrocktest.WriteException(w, "modelStreamErrorException", "The model stream failed.")
		case "cut":
			io.WriteString(w, "\x00\x00\x01\x00\x00\x00\x00\x40") // a frame's prelude, and no more
			w.(http.Flusher).Flush()
			panic(http.ErrAbortHandler)
		case "stall":
			<-r.Context().Done()
		}
	}
}

type ev = [2]any

var (
	textEvents = []ev{
		{"messageStart", map[string]any{"role": "assistant", "p": "abcdefgh"}},
		{"contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": "A sticky "}, "p": "abcd"}},
		{"contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"text": "session."}}},
		{"contentBlockStop", map[string]any{"contentBlockIndex": 0}},
	}
	stopEvents = []ev{
		{"messageStop", map[string]any{"stopReason": "end_turn"}},
		{"metadata", map[string]any{"usage": map[string]any{"inputTokens": 9, "outputTokens": 4, "totalTokens": 13, "cacheReadInputTokens": 100}, "metrics": map[string]any{"latencyMs": 300}}},
	}
	toolEvents = []ev{
		{"messageStart", map[string]any{"role": "assistant"}},
		{"contentBlockStart", map[string]any{"contentBlockIndex": 0, "start": map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_s1", "name": "get_weather"}}}},
		{"contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"toolUse": map[string]any{"input": `{"city":`}}}},
		{"contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"toolUse": map[string]any{"input": `"Vilnius"}`}}}},
		{"contentBlockStop", map[string]any{"contentBlockIndex": 0}},
		{"contentBlockStart", map[string]any{"contentBlockIndex": 1, "start": map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_s2", "name": "get_time"}}}},
		{"contentBlockStop", map[string]any{"contentBlockIndex": 1}},
		{"messageStop", map[string]any{"stopReason": "tool_use"}},
		{"metadata", map[string]any{"usage": map[string]any{"inputTokens": 40, "outputTokens": 12, "totalTokens": 52}, "metrics": map[string]any{"latencyMs": 300}}},
	}
)

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
			t.Fatal("stream still open after 10s")
		}
	}
}

// ConverseStream through the SDK's event stream decoding: text, tool use
// pieces, the usage at the end; an exception event, a cut frame, an end
// before messageStop and a stall fail midway.
func TestStream(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	req := gateway.Request{Model: claude, Messages: []gateway.Message{{Role: "user", Content: "hi"}}}

	f.serve(streamOf(append(append([]ev{}, textEvents...), stopEvents...), ""))
	ch, err := a.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	chunks := collect(t, ch)
	if got := f.last(t); got.path != "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream" {
		t.Fatalf("path %s", got.path)
	}
	var text string
	for _, c := range chunks {
		text += c.Delta
	}
	last := chunks[len(chunks)-1]
	if text != "A sticky session." || !last.Done || last.FinishReason != "stop" || *last.Usage != (gateway.Usage{Input: 9, CachedInput: 100, Output: 4}) || last.ID != "stream-req-1" {
		t.Fatalf("text %q, last %+v", text, last)
	}

	f.serve(streamOf(toolEvents, ""))
	ch, err = a.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	var calls []gateway.ToolCallDelta
	for _, c := range collect(t, ch) {
		calls = append(calls, c.ToolCalls...)
		last = c
	}
	wantCalls := []gateway.ToolCallDelta{{Index: 0, ID: "tooluse_s1", Name: "get_weather"}, {Index: 0, Arguments: `{"city":`}, {Index: 0, Arguments: `"Vilnius"}`},
		{Index: 1, ID: "tooluse_s2", Name: "get_time"}, {Index: 1, Arguments: "{}"}}
	if !reflect.DeepEqual(calls, wantCalls) || last.FinishReason != "tool_calls" {
		t.Fatalf("calls %+v, last %+v", calls, last)
	}

	withUsage := append(append([]ev{}, textEvents[:2]...), ev{"metadata", map[string]any{"usage": map[string]any{"inputTokens": 9, "outputTokens": 1}}})
	for _, tc := range []struct {
		end  string
		kind gateway.ErrorKind
		msg  string
	}{
		{"throttled", gateway.KindRateLimited, "Too many tokens"},
		{"model error", gateway.KindServer, "model stream failed"},
		// The SDK reads a frame cut short as the stream's end.
		{"cut", gateway.KindServer, "before messageStop"},
		{"", gateway.KindServer, "before messageStop"},
		{"stall", gateway.KindTimeout, "stalled"},
	} {
		t.Run("end "+tc.end, func(t *testing.T) {
			f.serve(streamOf(withUsage, tc.end))
			// Each case on a connection of its own: no ending bears on
			// the next case's.
			f.Client().CloseIdleConnections()
			ch, err := a.Stream(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			chunks := collect(t, ch)
			last := chunks[len(chunks)-1]
			var pe *gateway.ProviderError
			if !errors.As(last.Err, &pe) || pe.Kind != tc.kind || !strings.Contains(pe.Message, tc.msg) {
				t.Fatalf("last chunk %+v", last)
			}
			if last.Usage == nil || *last.Usage != (gateway.Usage{Input: 9, Output: 1}) || chunks[0].Delta != "A sticky " {
				t.Fatalf("usage %v, first %+v", last.Usage, chunks[0])
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The transport gets request bodies it can only read: the SDK closes a
// body as soon as the answer's headers are back, and a body it could
// take WriteTo from then failed the transport's last look for extra
// bytes, which closed the connection under the answer (readOnlyBodies).
func TestRequestBodiesReadOnly(t *testing.T) {
	f := newFake(t)
	credentials(t, accessKey, secretKey)
	var bodies int
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			bodies++
			if _, ok := r.Body.(io.WriterTo); ok {
				t.Errorf("%s: the transport got a body with WriteTo (%T)", r.URL.Path, r.Body)
			}
		}
		return f.Client().Transport.RoundTrip(r)
	})}
	a, err := New(Config{Region: region, Endpoint: f.URL, HTTPClient: hc, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	req := gateway.Request{Model: claude, Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, converseAnswer)
	})
	if _, err := a.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	f.serve(streamOf(append(append([]ev{}, textEvents...), stopEvents...), ""))
	ch, err := a.Stream(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if chunks := collect(t, ch); !chunks[len(chunks)-1].Done {
		t.Fatalf("stream: %+v", chunks[len(chunks)-1])
	}
	if bodies != 2 {
		t.Fatalf("%d bodies sent, want 2", bodies)
	}
}

// Bedrock's exceptions, answered before any event, by their codes.
func TestErrors(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	req := gateway.Request{Model: claude, Messages: []gateway.Message{{Role: "user", Content: "hi"}}}
	for _, tc := range []struct {
		status int
		code   string
		kind   gateway.ErrorKind
	}{
		{429, "ThrottlingException", gateway.KindRateLimited},
		{400, "ValidationException", gateway.KindBadRequest},
		{403, "AccessDeniedException", gateway.KindAuth},
		{403, "UnrecognizedClientException", gateway.KindAuth},
		{404, "ResourceNotFoundException", gateway.KindBadRequest},
		{400, "ServiceQuotaExceededException", gateway.KindQuotaExceeded},
		{408, "ModelTimeoutException", gateway.KindTimeout},
		{424, "ModelErrorException", gateway.KindServer},
		{429, "ModelNotReadyException", gateway.KindOverloaded},
		{500, "InternalServerException", gateway.KindServer},
		{503, "ServiceUnavailableException", gateway.KindOverloaded},
		{502, "SomethingNewException", gateway.KindServer},
	} {
		t.Run(tc.code, func(t *testing.T) {
			f.serve(func(w http.ResponseWriter, r *http.Request) {
				bedrocktest.WriteError(w, tc.status, tc.code, "said "+tc.code)
			})
			_, err := a.Complete(context.Background(), req)
			_, serr := a.Stream(context.Background(), req)
			for _, err := range []error{err, serr} {
				var pe *gateway.ProviderError
				if !errors.As(err, &pe) || pe.Kind != tc.kind || pe.Status != tc.status || pe.Type != tc.code || pe.Message != "said "+tc.code {
					t.Fatalf("%v (%+v)", err, pe)
				}
			}
		})
	}
}

// No credentials anywhere: an auth failure, not a network one.
func TestNoCredentials(t *testing.T) {
	f := newFake(t)
	f.serve(func(w http.ResponseWriter, r *http.Request) { t.Error("called without credentials") })
	credentials(t, "", "")
	a, err := New(Config{Region: region, Endpoint: f.URL, HTTPClient: f.Client(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Complete(context.Background(), gateway.Request{Model: claude, Messages: []gateway.Message{{Role: "user", Content: "hi"}}})
	if gateway.KindOf(err) != gateway.KindAuth {
		t.Fatalf("got %v", err)
	}
}

// Embeddings through InvokeModel: Titan one text a call, Cohere all at
// once; a model without embeddings refused naming the model.
func TestEmbed(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.URL.Path, "cohere") {
			w.Header().Set("X-Amzn-Bedrock-Input-Token-Count", "6")
			io.WriteString(w, `{"embeddings":[[0.5,-1.5],[0.25,1]],"id":"e1","response_type":"embeddings_floats","texts":["a","b"]}`)
			return
		}
		io.WriteString(w, `{"embedding":[0.5,-1.5],"inputTextTokenCount":3}`)
	})
	out, err := a.Embed(context.Background(), gateway.EmbedRequest{Model: "amazon.titan-embed-text-v2:0", Input: json.RawMessage(`["sticky","sessions"]`), Dimensions: ptr(256), EncodingFormat: "base64"})
	if err != nil {
		t.Fatal(err)
	}
	got := f.last(t)
	if got.path != "/model/amazon.titan-embed-text-v2%3A0/invoke" || string(got.body) != `{"dimensions":256,"inputText":"sessions"}` {
		t.Fatalf("%s %s", got.path, got.body)
	}
	if len(out.Vectors) != 2 || string(out.Vectors[1]) != `"AAAAPwAAwL8="` || out.Usage.Input != 6 {
		t.Fatalf("%+v", out)
	}
	out, err = a.Embed(context.Background(), gateway.EmbedRequest{Model: "cohere.embed-english-v3", Input: json.RawMessage(`["a","b"]`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.last(t); string(got.body) != `{"input_type":"search_document","texts":["a","b"]}` || string(out.Vectors[0]) != "[0.5,-1.5]" || out.Usage.Input != 6 {
		t.Fatalf("%s %+v", got.body, out)
	}
	_, err = a.Embed(context.Background(), gateway.EmbedRequest{Model: claude, Input: json.RawMessage(`"a"`)})
	var pe *gateway.ProviderError
	if !errors.As(err, &pe) || pe.Kind != gateway.KindUnsupported || pe.Param != "model" {
		t.Fatalf("claude embeddings: %v", err)
	}
}

func TestHealthCheck(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f)
	f.serve(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"asyncInvokeSummaries":[]}`) })
	if err := a.HealthCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.last(t); got.method != "GET" || got.path != "/async-invoke" {
		t.Fatalf("%s %s", got.method, got.path)
	}
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		bedrocktest.WriteError(w, 403, "AccessDeniedException", "not authorized to perform bedrock:ListAsyncInvokes")
	})
	if err := a.HealthCheck(context.Background()); err != nil {
		t.Fatalf("a refused permission is still an answer: %v", err)
	}
	f.serve(func(w http.ResponseWriter, r *http.Request) {
		bedrocktest.WriteError(w, 403, "UnrecognizedClientException", "The security token included in the request is invalid.")
	})
	if err := a.HealthCheck(context.Background()); gateway.KindOf(err) != gateway.KindAuth {
		t.Fatalf("bad key: %v", err)
	}
}
