package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// nativeCall is a Chat Completions request as an official client writes
// it: every parameter the gateway used to refuse or drop, in the
// client's own order and spacing.
const nativeCall = `{"messages":[{"role":"user","content":[{"type":"text","text":"What is in this image?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo=","detail":"low"}}]}],` +
	`"model":"small", "n":2,"seed":7,"logprobs":true,"top_logprobs":2,"max_completion_tokens":300,"reasoning_effort":"low",` +
	`"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],` +
	`"response_format":{"type":"json_schema","json_schema":{"name":"w","schema":{"type":"object"}}},"logit_bias":{"50256":-100},"frequency_penalty":0.5,` +
	`"presence_penalty":0.25,"metadata":{"k":"v"},"service_tier":"auto","user":"u","parallel_tool_calls":false,"tool_choice":"auto","prediction":{"type":"content","content":"x"}}`

const completionWithTools = `{"id":"chatcmpl-9","object":"chat.completion","created":1,"model":"gpt-4o-2024-08-06","system_fingerprint":"fp_1",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Vilnius\"}"}}]},"logprobs":{"content":[]},"finish_reason":"tool_calls"},` +
	`{"index":1,"message":{"role":"assistant","content":"second"},"logprobs":null,"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`

// A caller's own Chat Completions request reaches the provider byte for
// byte but its model; the answer comes back as the provider wrote it,
// with the first choice's tool calls read.
func TestNativeComplete(t *testing.T) {
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completionWithTools)
	})
	a := newAdapter(t, ts, nil)
	req := gateway.Request{Model: "gpt-4o", Messages: []gateway.Message{{Role: "user", Content: "x"}},
		Native: &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: []byte(nativeCall)}}
	resp, err := a.Complete(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(nativeCall, `"model":"small"`, `"model":"gpt-4o"`, 1)
	if got := string(ts.only(t).body); got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
	if resp.Native == nil || string(resp.Native.Body) != completionWithTools || resp.FinishReason != "tool_calls" ||
		!reflect.DeepEqual(resp.ToolCalls, []gateway.ToolCall{{ID: "call_1", Name: "get_weather", Arguments: `{"city":"Vilnius"}`}}) ||
		resp.Usage != (gateway.Usage{Input: 20, Output: 9}) {
		t.Fatalf("answer %+v", resp)
	}
}

// A caller's own streamed request gets stream_options.include_usage (the
// gateway counts usage) and nothing else changed; its events come back
// as they were, but the usage chunk when the caller did not ask for it.
func TestNativeStream(t *testing.T) {
	events := []string{
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"get_weather","arguments":""}}]},"finish_reason":null}],"usage":null}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\""}}]},"finish_reason":null}],"usage":null}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":\"Vilnius\"}"}}]},"finish_reason":null}],"usage":null}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}`,
		`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":9,"total_tokens":29}}`,
	}
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, e := range events {
			fmt.Fprintf(w, "data: %s\n\n", e)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
	a := newAdapter(t, ts, nil)
	for _, tc := range []struct {
		name, body, sent string
		usageChunk       bool
	}{
		{"usage added", `{"model":"small","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"up","stream":true,"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, false},
		{"usage asked", `{"model":"small","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
			`{"model":"up","stream":true,"stream_options":{"include_usage":true},"messages":[]}`, true},
		{"other options kept", `{"model":"small","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}`,
			`{"model":"up","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":true},"messages":[]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts.mu.Lock()
			ts.reqs = nil
			ts.mu.Unlock()
			ch, err := a.Stream(context.Background(), gateway.Request{Model: "up", Native: &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: []byte(tc.body)}})
			if err != nil {
				t.Fatal(err)
			}
			chunks := collect(t, ch)
			if got := string(ts.only(t).body); got != tc.sent {
				t.Fatalf("sent\n%s\nwant\n%s", got, tc.sent)
			}
			var natives []string
			var calls []gateway.ToolCallDelta
			for _, c := range chunks {
				if c.Native != nil {
					natives = append(natives, string(c.Native.Data))
				}
				calls = append(calls, c.ToolCalls...)
			}
			want := events[:4]
			if tc.usageChunk {
				want = events
			}
			if !reflect.DeepEqual(natives, want) {
				t.Fatalf("passed on\n%s\nwant\n%s", strings.Join(natives, "\n"), strings.Join(want, "\n"))
			}
			last := chunks[len(chunks)-1]
			if !last.Done || last.FinishReason != "tool_calls" || *last.Usage != (gateway.Usage{Input: 20, Output: 9}) {
				t.Fatalf("last chunk %+v", last)
			}
			if len(calls) != 3 || calls[0].ID != "call_1" || calls[0].Name != "get_weather" || calls[1].Arguments+calls[2].Arguments != `{"city":"Vilnius"}` {
				t.Fatalf("tool call deltas %+v", calls)
			}
		})
	}
}

// A request from another API's shape is built from the gateway's fields:
// tools, tool calls and results, images, structured output and every
// parameter as itself (max_completion_tokens stays itself).
func TestTranslatedRequest(t *testing.T) {
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, completionWithTools)
	})
	a := newAdapter(t, ts, nil)
	seed, temp, no, strict := int64(3), 0.5, false, true
	req := gateway.Request{Model: "gpt-4o", MaxCompletionTokens: 300, Temperature: &temp, Seed: &seed, ReasoningEffort: "high",
		Stop: []string{"END"}, User: "u", ParallelToolCalls: &no, ServiceTier: "flex", Metadata: map[string]string{"a": "b"},
		Messages: []gateway.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Parts: []gateway.Part{{Type: "text", Text: "look"}, {Type: "image", URL: "https://x/y.png", Detail: "high"}}},
			{Role: "assistant", ToolCalls: []gateway.ToolCall{{ID: "t1", Name: "f", Arguments: `{"a":1}`}}},
			{Role: "tool", ToolCallID: "t1", Content: "42"},
		},
		Tools:          []gateway.Tool{{Name: "f", Description: "does f", Parameters: json.RawMessage(`{"type":"object"}`), Strict: &strict}},
		ToolChoice:     &gateway.ToolChoice{Mode: "tool", Name: "f"},
		ResponseFormat: &gateway.ResponseFormat{Type: "json_schema", Name: "out", Schema: json.RawMessage(`{"type":"object"}`), Strict: &strict},
	}
	if _, err := a.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	want := `{"model":"gpt-4o","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/y.png","detail":"high"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
		`{"role":"tool","content":"42","tool_call_id":"t1"}],"max_completion_tokens":300,"temperature":0.5,"stop":["END"],"user":"u","seed":3,` +
		`"metadata":{"a":"b"},"service_tier":"flex","reasoning_effort":"high",` +
		`"tools":[{"type":"function","function":{"name":"f","description":"does f","parameters":{"type":"object"},"strict":true}}],` +
		`"tool_choice":{"function":{"name":"f"},"type":"function"},"parallel_tool_calls":false,` +
		`"response_format":{"type":"json_schema","json_schema":{"name":"out","schema":{"type":"object"},"strict":true}}}`
	if got := string(ts.only(t).body); got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
}

// What a request from another API's shape asks that this API has not, or
// that the gateway's answer could not bring back, is refused naming it.
func TestTranslatedRefusals(t *testing.T) {
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) { t.Error("the provider was called") })
	a := newAdapter(t, ts, nil)
	k := 5
	for _, tc := range []struct {
		param string
		edit  func(*gateway.Request)
	}{
		{"thinking", func(r *gateway.Request) { r.Extra = []string{"thinking"} }},
		{"n", func(r *gateway.Request) { r.N = 2 }},
		{"logprobs", func(r *gateway.Request) { r.Logprobs = true }},
		{"top_k", func(r *gateway.Request) { r.TopK = &k }},
		{"messages[0].content[0]", func(r *gateway.Request) { r.Messages[0].Parts = []gateway.Part{{Type: "document"}} }},
	} {
		t.Run(tc.param, func(t *testing.T) {
			req := gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "x"}}}
			tc.edit(&req)
			_, err := a.Complete(context.Background(), req)
			var pe *gateway.ProviderError
			if !errorsAs(err, &pe) || pe.Kind != gateway.KindUnsupported || pe.Param != tc.param {
				t.Fatalf("Complete: %v", err)
			}
			if _, err := a.Stream(context.Background(), req); gateway.KindOf(err) != gateway.KindUnsupported {
				t.Fatalf("Stream: %v", err)
			}
		})
	}
}

// Embeddings: a caller's own request as it is (the model replaced), the
// answer as it is; a request from the gateway's fields built from them.
func TestEmbed(t *testing.T) {
	const answer = `{"object":"list","data":[{"object":"embedding","index":1,"embedding":"AAAA"},{"object":"embedding","index":0,"embedding":[0.5,-1]}],"model":"te-3","usage":{"prompt_tokens":4,"total_tokens":4}}`
	ts := newTestServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/embeddings" {
			t.Errorf("path %s", r.URL.Path)
		}
		io.WriteString(w, answer)
	})
	a := newAdapter(t, ts, nil)
	body := `{"model":"emb","input":["a","b"],"encoding_format":"base64"}`
	out, err := a.Embed(context.Background(), gateway.EmbedRequest{Model: "te-3", Native: &gateway.Native{Shape: gateway.ShapeOpenAIEmbeddings, Body: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	if got := string(ts.only(t).body); got != `{"model":"te-3","input":["a","b"],"encoding_format":"base64"}` {
		t.Fatalf("sent %s", got)
	}
	if string(out.Native.Body) != answer || string(out.Vectors[0]) != "[0.5,-1]" || string(out.Vectors[1]) != `"AAAA"` || out.Usage.Input != 4 {
		t.Fatalf("answer %+v", out)
	}
	ts.mu.Lock()
	ts.reqs = nil
	ts.mu.Unlock()
	dims := 2
	if _, err := a.Embed(context.Background(), gateway.EmbedRequest{Model: "te-3", Input: json.RawMessage(`"x"`), Dimensions: &dims}); err != nil {
		t.Fatal(err)
	}
	if got := string(ts.only(t).body); got != `{"model":"te-3","input":"x","dimensions":2}` {
		t.Fatalf("sent %s", got)
	}
}

func errorsAs(err error, pe **gateway.ProviderError) bool { return errors.As(err, pe) }
