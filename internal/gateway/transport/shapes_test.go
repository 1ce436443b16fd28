package transport

import (
	"context"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// A chat completion from a provider of the same shape is the provider's
// own answer, the gateway's word added; its stream's events pass as they
// came, the one that ends it held until the cost is known.
func TestChatNative(t *testing.T) {
	const answer = `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"a"},"logprobs":{"content":[]},"finish_reason":"stop"},{"index":1,"message":{"role":"assistant","content":"b"},"finish_reason":"stop"}]}`
	events := []string{
		`{"id":"c1","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}`,
		`{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
	}
	var chunks []gateway.Chunk
	for i, e := range events {
		c := gateway.Chunk{Native: &gateway.NativeEvent{Data: []byte(e)}}
		if i == 0 {
			c.Delta, c.Provider, c.Deployment = "Hi", "openai", "east"
		}
		chunks = append(chunks, c)
	}
	chunks = append(chunks, gateway.Chunk{Done: true, Usage: &gateway.Usage{Input: 1}, Provider: "openai", Deployment: "east", CostMicros: 9})
	svc := newFake(map[string]script{"m": {resp: gateway.Response{Native: &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: []byte(answer)},
		Provider: "openai", Deployment: "east", CostMicros: 9}, chunks: chunks}})
	srv := newHTTP(t, svc, HTTPOptions{})
	_, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", `{"model":"m","n":2,"messages":[{"role":"user","content":"x"}]}`, nil)
	if want := strings.TrimSuffix(answer, "}") + `,"stickyd":{"provider":"openai","deployment":"east","cost_micros":9}}`; string(out) != want {
		t.Fatalf("answer\n%s\nwant\n%s", out, want)
	}
	_, out = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	want := "data: " + events[0] + "\n\ndata: " + strings.TrimSuffix(events[1], "}") + `,"stickyd":{"provider":"openai","deployment":"east","cost_micros":9}}` + "\n\ndata: [DONE]\n\n"
	if string(out) != want {
		t.Fatalf("stream\n%s\nwant\n%s", out, want)
	}
}

// Tool calls from a provider of another shape are written in OpenAI's,
// whole and streamed.
func TestChatToolCalls(t *testing.T) {
	svc := newFake(map[string]script{"m": {
		resp: gateway.Response{FinishReason: "tool_calls", ToolCalls: []gateway.ToolCall{{ID: "t1", Name: "f", Arguments: `{"a":1}`}}},
		chunks: []gateway.Chunk{{ToolCalls: []gateway.ToolCallDelta{{Index: 0, ID: "t1", Name: "f"}}}, {ToolCalls: []gateway.ToolCallDelta{{Index: 0, Arguments: `{"a":1}`}}},
			{Done: true, FinishReason: "tool_calls", Usage: &gateway.Usage{}}}}})
	srv := newHTTP(t, svc, HTTPOptions{})
	_, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	if !strings.Contains(string(out), `"message":{"role":"assistant","content":null,"refusal":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}`) {
		t.Fatalf("answer %s", out)
	}
	_, out = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	for _, want := range []string{`"tool_calls":[{"index":0,"id":"t1","type":"function","function":{"name":"f","arguments":""}}]`,
		`"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":1}"}}]`, `"finish_reason":"tool_calls"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("stream lacks %s:\n%s", want, out)
		}
	}
}

// The members of a chat request the gateway's fields do not hold are
// named, so that an adapter of another shape refuses them.
func TestChatExtra(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	srv := newHTTP(t, svc, HTTPOptions{})
	do(t, http.MethodPost, srv.URL+"/v1/chat/completions", `{"model":"m","audio":{"voice":"x"},"store":true,"messages":[{"role":"user","content":"x","foo":1}],
		"tools":[{"type":"custom","custom":{"name":"c"}}]}`, nil)
	if got := svc.lastCall(t).Request.Extra; !reflect.DeepEqual(got, []string{"audio", "messages[0].foo", "store", "tools[0]"}) {
		t.Fatalf("extra %q", got)
	}
}

// /v1/messages: Anthropic's request read into the gateway's fields (tool
// results as tool messages, images, tool_choice), its answer and events
// written in Anthropic's shape, its errors too.
func TestMessages(t *testing.T) {
	svc := newFake(map[string]script{"m": {
		resp: gateway.Response{ID: "x", Content: "Checking.", FinishReason: "tool_calls", ToolCalls: []gateway.ToolCall{{ID: "t1", Name: "f", Arguments: `{"a":1}`}},
			Usage: gateway.Usage{Input: 5, Output: 2}},
		chunks: []gateway.Chunk{{Delta: "Hi"}, {ToolCalls: []gateway.ToolCallDelta{{Index: 0, ID: "t1", Name: "f"}}}, {ToolCalls: []gateway.ToolCallDelta{{Index: 0, Arguments: `{"a":1}`}}},
			{Done: true, FinishReason: "tool_calls", Usage: &gateway.Usage{Input: 5, Output: 2}, CostMicros: 3}}}})
	srv := newHTTP(t, svc, HTTPOptions{})
	body := `{"model":"m","max_tokens":100,"system":[{"type":"text","text":"be brief","cache_control":{"type":"ephemeral"}}],"metadata":{"user_id":"maria"},
		"tool_choice":{"type":"any","disable_parallel_tool_use":true},"tools":[{"name":"f","input_schema":{"type":"object"}}],"thinking":{"type":"enabled","budget_tokens":1024},
		"messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]},
		{"role":"assistant","content":[{"type":"tool_use","id":"t0","name":"f","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t0","content":"ok"},{"type":"text","text":"and?"}]}]}`
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/messages", body, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"content":[{"text":"Checking.","type":"text"},{"id":"t1","input":{"a":1},"name":"f","type":"tool_use"}]`) ||
		!strings.Contains(string(out), `"stop_reason":"tool_use"`) {
		t.Fatalf("answer %d %s", resp.StatusCode, out)
	}
	call := svc.lastCall(t)
	req := call.Request
	want := []gateway.Message{{Role: "system", Content: "be brief"},
		{Role: "user", Parts: []gateway.Part{{Type: "text", Text: "look"}, {Type: "image", URL: "data:image/png;base64,AAAA"}}},
		{Role: "assistant", ToolCalls: []gateway.ToolCall{{ID: "t0", Name: "f", Arguments: "{}"}}},
		{Role: "tool", ToolCallID: "t0", Content: "ok"}, {Role: "user", Content: "and?"}}
	if !reflect.DeepEqual(req.Messages, want) || req.User != "maria" || call.Session != "maria" || req.ToolChoice.Mode != "required" || *req.ParallelToolCalls ||
		!reflect.DeepEqual(req.Extra, []string{"system[0].cache_control", "thinking"}) || req.Native.Shape != gateway.ShapeAnthropicMessages || req.MaxTokens != 100 {
		t.Fatalf("request %+v", req)
	}
	_, out = do(t, http.MethodPost, srv.URL+"/v1/messages", strings.Replace(body, `"max_tokens":100`, `"max_tokens":100,"stream":true`, 1), nil)
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if n, ok := strings.CutPrefix(line, "event: "); ok {
			names = append(names, n)
		}
	}
	wantNames := []string{"message_start", "content_block_start", "content_block_delta", "content_block_stop", "content_block_start", "content_block_delta",
		"content_block_stop", "message_delta", "message_stop"}
	if !reflect.DeepEqual(names, wantNames) || !strings.Contains(string(out), `"partial_json":"{\"a\":1}"`) || !strings.Contains(string(out), `"stop_reason":"tool_use"`) {
		t.Fatalf("events %q:\n%s", names, out)
	}
	resp, out = do(t, http.MethodPost, srv.URL+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, nil)
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if resp.StatusCode != 400 || json.Unmarshal(out, &e) != nil || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, "max_tokens") {
		t.Fatalf("an error in Anthropic's shape: %d %s", resp.StatusCode, out)
	}
}

// A stream from an Anthropic deployment reaches a /v1/messages caller as
// its events came, message_delta carrying the gateway's word.
func TestMessagesNativeStream(t *testing.T) {
	ev := func(name, data string) *gateway.NativeEvent {
		return &gateway.NativeEvent{Event: name, Data: []byte(data)}
	}
	chunks := []gateway.Chunk{
		{Native: ev("message_start", `{"type":"message_start"}`), Usage: &gateway.Usage{Input: 3}},
		{Native: ev("ping", `{"type":"ping"}`)},
		{Native: ev("message_delta", `{"type":"message_delta","usage":{"output_tokens":2}}`)},
		{Done: true, Native: ev("message_stop", `{"type":"message_stop"}`), Provider: "anthropic", Deployment: "a", CostMicros: 7, Usage: &gateway.Usage{}},
	}
	svc := newFake(map[string]script{"m": {chunks: chunks}})
	srv := newHTTP(t, svc, HTTPOptions{})
	_, out := do(t, http.MethodPost, srv.URL+"/v1/messages", `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"x"}]}`, nil)
	want := "event: message_start\ndata: {\"type\":\"message_start\"}\n\nevent: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":2},\"stickyd\":{\"provider\":\"anthropic\",\"deployment\":\"a\",\"cost_micros\":7}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	if string(out) != want {
		t.Fatalf("stream\n%s\nwant\n%s", out, want)
	}
}

// embedService is a fake Service that embeds and lists its models.
type embedService struct {
	*fakeService
	got gateway.EmbedCall
}

func (e *embedService) Embed(ctx context.Context, call gateway.EmbedCall) (gateway.Embedding, error) {
	e.got = call
	if call.Request.Model != "e" {
		return gateway.Embedding{}, gateway.Unsupported("model", "model %q cannot embed", call.Request.Model)
	}
	return gateway.Embedding{Vectors: []json.RawMessage{json.RawMessage(`[1,2]`)}, Usage: gateway.Usage{Input: 2}, Provider: "openai", Deployment: "d", CostMicros: 1}, nil
}

func (e *embedService) Models() []string { return []string{"e", "m"} }

// /v1/embeddings and /v1/models.
func TestEmbeddingsAndModels(t *testing.T) {
	svc := &embedService{fakeService: newFake(nil)}
	srv := newHTTP(t, svc, HTTPOptions{})
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/embeddings", `{"model":"e","input":"hi","dimensions":2,"x":1}`, nil)
	if resp.StatusCode != 200 || !strings.Contains(string(out), `"data":[{"embedding":[1,2],"index":0,"object":"embedding"}]`) ||
		string(svc.got.Request.Native.Body) != `{"model":"e","input":"hi","dimensions":2,"x":1}` || !reflect.DeepEqual(svc.got.Request.Extra, []string{"x"}) {
		t.Fatalf("embeddings %d %s (%+v)", resp.StatusCode, out, svc.got)
	}
	resp, out = do(t, http.MethodPost, srv.URL+"/v1/embeddings", `{"model":"m","input":"hi"}`, nil)
	if resp.StatusCode != 400 || !strings.Contains(string(out), `cannot embed`) || !strings.Contains(string(out), `"code":"unsupported_parameter"`) {
		t.Fatalf("a model that cannot embed: %d %s", resp.StatusCode, out)
	}
	_, out = do(t, http.MethodGet, srv.URL+"/v1/models", "", nil)
	if !strings.Contains(string(out), `"data":[{"created":0,"id":"e","object":"model","owned_by":"stickyd"},{"created":0,"id":"m","object":"model","owned_by":"stickyd"}]`) {
		t.Fatalf("models %s", out)
	}
}

// keyedModels lists to each key the models it may call.
type keyedModels struct{ *embedService }

func (k keyedModels) ModelsFor(key string) []string {
	if key == "narrow" {
		return []string{"m"}
	}
	return k.Models()
}

// GET /v1/models lists to a key only the models it may call.
func TestModelsForTheKey(t *testing.T) {
	svc := keyedModels{&embedService{fakeService: newFake(nil)}}
	srv := newHTTP(t, svc, HTTPOptions{Auth: func(r *http.Request) (string, error) {
		return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), nil
	}})
	_, out := do(t, http.MethodGet, srv.URL+"/v1/models", "", map[string]string{"Authorization": "Bearer narrow"})
	if !strings.Contains(string(out), `"data":[{"created":0,"id":"m","object":"model","owned_by":"stickyd"}]`) {
		t.Fatalf("the narrow key's models: %s", out)
	}
	_, out = do(t, http.MethodGet, srv.URL+"/v1/models", "", map[string]string{"Authorization": "Bearer wide"})
	if !strings.Contains(string(out), `"id":"e"`) || !strings.Contains(string(out), `"id":"m"`) {
		t.Fatalf("the wide key's models: %s", out)
	}
}
