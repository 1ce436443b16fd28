package azure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/gateway"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testKey = "azure-key-0123"

// Answers as Azure OpenAI writes them: its filter results beside
// OpenAI's fields, and a stream whose first chunk has no choice.
const (
	azureCompletion = `{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}},"finish_reason":"tool_calls","index":0,"logprobs":null,"message":{"content":null,"refusal":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"city\":\"Vilnius\"}","name":"get_weather"},"id":"call_az1","type":"function"}]}}],"created":1733000000,"id":"chatcmpl-AZ1","model":"gpt-4o-2024-11-20","object":"chat.completion","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}],"system_fingerprint":"fp_az","usage":{"completion_tokens":17,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":82,"prompt_tokens_details":{"cached_tokens":64},"total_tokens":99}}`
	contentFilter   = `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry.","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":true,"severity":"high"},"jailbreak":{"filtered":false,"detected":false},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}}}}`
	rateLimited     = `{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}`
	badKey          = `{"statusCode":401,"message":"Unauthorized. Access token is missing, invalid, audience is incorrect (https://cognitiveservices.azure.com), or have expired."}`
	noDeployment    = `{"error":{"code":"DeploymentNotFound","message":"The API deployment for this resource does not exist. If you created the deployment within the last 5 minutes, please wait a moment and try again."}}`
)

var azureStream = []string{
	`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`,
	`{"choices":[{"content_filter_results":{},"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1733000000,"id":"chatcmpl-AZ2","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_az","usage":null}`,
	`{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"Sticky "},"finish_reason":null,"index":0,"logprobs":null}],"created":1733000000,"id":"chatcmpl-AZ2","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_az","usage":null}`,
	`{"choices":[{"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}},"delta":{"content":"sessions."},"finish_reason":null,"index":0,"logprobs":null}],"created":1733000000,"id":"chatcmpl-AZ2","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_az","usage":null}`,
	`{"choices":[{"content_filter_results":{},"delta":{},"finish_reason":"content_filter","index":0,"logprobs":null}],"created":1733000000,"id":"chatcmpl-AZ2","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_az","usage":null}`,
	`{"choices":[],"created":1733000000,"id":"chatcmpl-AZ2","model":"gpt-4o-2024-11-20","object":"chat.completion.chunk","system_fingerprint":"fp_az","usage":{"completion_tokens":3,"prompt_tokens":9,"total_tokens":12}}`,
}

type seen struct {
	method, path, query string
	header              http.Header
	body                []byte
}

// fakeAzure answers as Azure OpenAI does; mode picks the answer.
type fakeAzure struct {
	*httptest.Server
	mu   sync.Mutex
	mode string
	reqs []seen
}

func newFake(t *testing.T) *fakeAzure {
	f := &fakeAzure{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, seen{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		mode := f.mode
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("apim-request-id", "0f0e0d0c")
		switch mode {
		case "filter":
			w.WriteHeader(400)
			io.WriteString(w, contentFilter)
			return
		case "429":
			w.Header().Set("Retry-After", "6")
			w.Header().Set("Retry-After-Ms", "5800")
			w.WriteHeader(429)
			io.WriteString(w, rateLimited)
			return
		case "401":
			w.WriteHeader(401)
			io.WriteString(w, badKey)
			return
		case "404":
			w.WriteHeader(404)
			io.WriteString(w, noDeployment)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/models") {
			io.WriteString(w, `{"data":[],"object":"list"}`)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/embeddings") {
			io.WriteString(w, `{"data":[{"embedding":[0.25,-0.5],"index":0,"object":"embedding"}],"model":"text-embedding-3-small","object":"list","usage":{"prompt_tokens":2,"total_tokens":2}}`)
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			io.WriteString(w, azureCompletion)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i, c := range azureStream {
			if mode == "cut" && i == 3 {
				w.(http.Flusher).Flush()
				panic(http.ErrAbortHandler)
			}
			fmt.Fprintf(w, "data: %s\n\n", c)
			w.(http.Flusher).Flush()
		}
		io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAzure) set(mode string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.mode, f.reqs = mode, nil
}

func (f *fakeAzure) last(t *testing.T) seen {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("the fake got no request")
	}
	return f.reqs[len(f.reqs)-1]
}

func newAdapter(t *testing.T, f *fakeAzure, version string) gateway.Adapter {
	t.Helper()
	a, err := New(Config{Endpoint: f.URL + "/", APIVersion: version, APIKey: testKey, HTTPClient: f.Client(), StallTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

var question = gateway.Request{Model: "gpt4o-prod", Messages: []gateway.Message{{Role: "user", Content: "The weather in Vilnius?"}},
	Tools: []gateway.Tool{{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}}}`)}}}

// Calls go to the deployment's path with the api-version and the key in
// api-key; the answer is read as OpenAI's, cached tokens apart.
func TestAddressing(t *testing.T) {
	f := newFake(t)
	for _, tc := range []struct{ version, path, query string }{
		{"", "/openai/deployments/gpt4o-prod/chat/completions", "api-version=" + DefaultAPIVersion},
		{"2025-04-01-preview", "/openai/deployments/gpt4o-prod/chat/completions", "api-version=2025-04-01-preview"},
		{APIv1, "/openai/v1/chat/completions", ""},
	} {
		f.set("")
		a := newAdapter(t, f, tc.version)
		resp, err := a.Complete(context.Background(), question)
		if err != nil {
			t.Fatal(err)
		}
		got := f.last(t)
		if got.path != tc.path || got.query != tc.query || got.header.Get("api-key") != testKey || got.header.Get("Authorization") != "" {
			t.Errorf("%q: %s ?%s headers %v", tc.version, got.path, got.query, got.header)
		}
		if !strings.Contains(string(got.body), `"model":"gpt4o-prod"`) || !strings.Contains(string(got.body), `"name":"get_weather"`) {
			t.Errorf("%q: body %s", tc.version, got.body)
		}
		if resp.FinishReason != "tool_calls" || len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != "call_az1" ||
			resp.Usage != (gateway.Usage{Input: 18, CachedInput: 64, Output: 17}) {
			t.Errorf("%q: answer %+v", tc.version, resp)
		}
	}
	f.set("")
	a := newAdapter(t, f, "")
	if err := a.HealthCheck(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.last(t); got.path != "/openai/models" || got.query != "api-version="+DefaultAPIVersion {
		t.Errorf("health check %s ?%s", got.path, got.query)
	}
	emb, err := a.(gateway.Embedder).Embed(context.Background(), gateway.EmbedRequest{Model: "emb-prod", Input: json.RawMessage(`"sticky"`)})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.last(t); got.path != "/openai/deployments/emb-prod/embeddings" || len(emb.Vectors) != 1 || emb.Usage.Input != 2 {
		t.Errorf("embeddings %s: %+v", got.path, emb)
	}
}

// A stream: Azure's filter-only first chunk is skipped (or passed on to
// a caller of the same API), a content filter ends it as such, and a cut
// is a mid-stream failure.
func TestStream(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f, "")
	f.set("")
	ch, err := a.Stream(context.Background(), question)
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var last gateway.Chunk
	for c := range ch {
		text += c.Delta
		last = c
	}
	if text != "Sticky sessions." || !last.Done || last.FinishReason != "content_filter" || *last.Usage != (gateway.Usage{Input: 9, Output: 3}) {
		t.Fatalf("text %q, last %+v", text, last)
	}
	if !strings.Contains(string(f.last(t).body), `"stream_options":{"include_usage":true}`) {
		t.Fatalf("sent %s", f.last(t).body)
	}

	// The caller's own request: every event as Azure sent it, the
	// filter-only first one included.
	f.set("")
	ch, err = a.Stream(context.Background(), gateway.Request{Model: "gpt4o-prod", Native: &gateway.Native{Shape: gateway.ShapeOpenAIChat,
		Body: []byte(`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var natives []string
	for c := range ch {
		if c.Native != nil {
			natives = append(natives, string(c.Native.Data))
		}
	}
	if len(natives) != 5 || natives[0] != azureStream[0] {
		t.Fatalf("passed on %d events: %v", len(natives), natives)
	}

	f.set("cut")
	ch, err = a.Stream(context.Background(), question)
	if err != nil {
		t.Fatal(err)
	}
	for c := range ch {
		last = c
	}
	if last.Err == nil || gateway.KindOf(last.Err) != gateway.KindServer {
		t.Fatalf("cut stream ended with %+v", last)
	}
}

// Azure's refusals: a content filter is the caller's bad request, kept
// with its message; a 429 waits its retry-after-ms; a refused key and a
// missing deployment are classified as such.
func TestErrors(t *testing.T) {
	f := newFake(t)
	a := newAdapter(t, f, "")
	for _, tc := range []struct {
		mode   string
		kind   gateway.ErrorKind
		status int
		typ    string
		retry  time.Duration
		msg    string
	}{
		{"filter", gateway.KindBadRequest, 400, "content_filter", 0, "content management policy"},
		{"429", gateway.KindRateLimited, 429, "429", 5800 * time.Millisecond, "exceeded token rate limit"},
		{"401", gateway.KindAuth, 401, "", 0, "Access token is missing"},
		{"404", gateway.KindBadRequest, 404, "DeploymentNotFound", 0, "does not exist"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			f.set(tc.mode)
			for _, stream := range []bool{false, true} {
				var err error
				if stream {
					_, err = a.Stream(context.Background(), question)
				} else {
					_, err = a.Complete(context.Background(), question)
				}
				var pe *gateway.ProviderError
				if !errors.As(err, &pe) {
					t.Fatalf("stream %v: error %v", stream, err)
				}
				if pe.Kind != tc.kind || pe.Status != tc.status || pe.Type != tc.typ || pe.RetryAfter != tc.retry || !strings.Contains(pe.Message, tc.msg) {
					t.Errorf("stream %v: %+v", stream, pe)
				}
			}
		})
	}
}

func TestConfig(t *testing.T) {
	for _, c := range []Config{{}, {Endpoint: "myres.openai.azure.com"}, {Endpoint: "https://x", APIVersion: "1&x=2"}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
