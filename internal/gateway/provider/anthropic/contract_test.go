package anthropic

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// rawFake records the bytes of each request.
func rawFake(t *testing.T, reply http.HandlerFunc) (*Adapter, func() []string) {
	t.Helper()
	var bodies []string
	done := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, string(b))
		reply(w, r)
		done <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	a, err := New(Config{BaseURL: srv.URL, APIKey: testKey, HTTPClient: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	return a, func() []string {
		for range len(done) {
			<-done
		}
		return bodies
	}
}

// A request from another API's shape is built from the gateway's fields:
// tools, tool calls and their answers, images, tool_choice with parallel
// calls off, top_k, stop sequences and the user.
func TestTranslatedRequest(t *testing.T) {
	a, bodies := rawFake(t, replyJSON(t, http.StatusOK, "messages_cache.json"))
	no, k := false, 40
	req := gateway.Request{Model: "claude", MaxCompletionTokens: 500, TopK: &k, Stop: []string{"END"}, User: "maria", ParallelToolCalls: &no,
		ServiceTier: "auto",
		Messages: []gateway.Message{
			{Role: "system", Content: "be brief"},
			{Role: "user", Parts: []gateway.Part{{Type: "text", Text: "what is this?"}, {Type: "image", URL: "data:image/png;base64,iVBORw0KGgo="},
				{Type: "image", URL: "https://example.test/cat.jpg", Detail: "auto"}}},
			{Role: "assistant", Content: "Checking.", ToolCalls: []gateway.ToolCall{{ID: "t1", Name: "look", Arguments: `{"q":"cat"}`}, {ID: "t2", Name: "now"}}},
			{Role: "tool", ToolCallID: "t1", Content: "a cat"},
			{Role: "tool", ToolCallID: "t2", Content: "noon"},
			{Role: "user", Content: "and?"},
		},
		Tools:      []gateway.Tool{{Name: "look", Description: "looks", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)}, {Name: "now"}},
		ToolChoice: &gateway.ToolChoice{Mode: "required"},
	}
	resp, err := a.Complete(t.Context(), req)
	if err != nil || resp.Native != nil {
		t.Fatalf("Complete: %+v %v", resp, err)
	}
	want := `{"model":"claude","system":"be brief","messages":[` +
		`{"role":"user","content":[{"type":"text","text":"what is this?"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},{"type":"image","source":{"type":"url","url":"https://example.test/cat.jpg"}}]},` +
		`{"role":"assistant","content":[{"type":"text","text":"Checking."},{"type":"tool_use","id":"t1","name":"look","input":{"q":"cat"}},{"type":"tool_use","id":"t2","name":"now","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a cat"},{"type":"tool_result","tool_use_id":"t2","content":"noon"}]},` +
		`{"role":"user","content":"and?"}],"max_tokens":500,"top_k":40,"stop_sequences":["END"],"metadata":{"user_id":"maria"},` +
		`"tools":[{"name":"look","description":"looks","input_schema":{"type":"object","properties":{"q":{"type":"string"}}}},{"name":"now","input_schema":{"type":"object","properties":{}}}],` +
		`"tool_choice":{"type":"any","disable_parallel_tool_use":true},"service_tier":"auto"}`
	if got := bodies()[0]; got != want {
		t.Fatalf("sent\n%s\nwant\n%s", got, want)
	}
}

// What the Messages API cannot carry is refused naming the parameter,
// before any request is sent.
func TestRefusals(t *testing.T) {
	a, bodies := rawFake(t, func(w http.ResponseWriter, r *http.Request) { t.Error("the provider was called") })
	seed, pen, top, strict := int64(1), 0.5, 2, true
	for _, tc := range []struct {
		param string
		edit  func(*gateway.Request)
	}{
		{"n", func(r *gateway.Request) { r.N = 2 }},
		{"seed", func(r *gateway.Request) { r.Seed = &seed }},
		{"presence_penalty", func(r *gateway.Request) { r.PresencePenalty = &pen }},
		{"frequency_penalty", func(r *gateway.Request) { r.FrequencyPenalty = &pen }},
		{"logit_bias", func(r *gateway.Request) { r.LogitBias = map[string]float64{"1": 2} }},
		{"logprobs", func(r *gateway.Request) { r.Logprobs = true }},
		{"logprobs", func(r *gateway.Request) { r.TopLogprobs = &top }},
		{"metadata", func(r *gateway.Request) { r.Metadata = map[string]string{"a": "b"} }},
		{"reasoning_effort", func(r *gateway.Request) { r.ReasoningEffort = "low" }},
		{"service_tier", func(r *gateway.Request) { r.ServiceTier = "flex" }},
		{"response_format", func(r *gateway.Request) { r.ResponseFormat = &gateway.ResponseFormat{Type: "json_object"} }},
		{"response_format", func(r *gateway.Request) { r.ResponseFormat = &gateway.ResponseFormat{Type: "json_schema"} }},
		{"audio", func(r *gateway.Request) { r.Extra = []string{"audio"} }},
		{"tools[0].function.strict", func(r *gateway.Request) { r.Tools = []gateway.Tool{{Name: "f", Strict: &strict}} }},
		{"messages[0].name", func(r *gateway.Request) { r.Messages[0].Name = "bob" }},
		{"messages[0].content[0].image_url.detail", func(r *gateway.Request) {
			r.Messages[0].Parts = []gateway.Part{{Type: "image", URL: "https://x/y.png", Detail: "high"}}
		}},
		{"messages[0].content[0]", func(r *gateway.Request) { r.Messages[0].Parts = []gateway.Part{{Type: "input_audio"}} }},
		{"messages[0].content[0].image_url.url", func(r *gateway.Request) { r.Messages[0].Parts = []gateway.Part{{Type: "image", URL: "ftp://x"}} }},
	} {
		t.Run(tc.param, func(t *testing.T) {
			req := gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "x"}}}
			tc.edit(&req)
			for _, call := range []func() error{
				func() error { _, err := a.Complete(t.Context(), req); return err },
				func() error { _, err := a.Stream(t.Context(), req); return err },
			} {
				var pe *gateway.ProviderError
				if err := call(); !errors.As(err, &pe) || pe.Kind != gateway.KindUnsupported || pe.Param != tc.param || pe.Message == "" {
					t.Fatalf("got %v, want a refusal naming %s", err, tc.param)
				}
			}
		})
	}
	if n := len(bodies()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
	// Their defaults are no refusal.
	zero := 0.0
	req := gateway.Request{Model: "m", Messages: []gateway.Message{{Role: "user", Content: "x"}}, N: 1, PresencePenalty: &zero,
		ResponseFormat: &gateway.ResponseFormat{Type: "text"}}
	if _, err := a.buildRequest(req, false); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
}

// A caller's own Messages request is sent byte for byte but its model,
// and its answer and events come back as the provider wrote them, with
// the tool calls read.
func TestNative(t *testing.T) {
	body := `{"model":"claude-x", "max_tokens":1024,"thinking":{"type":"enabled","budget_tokens":2000},"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}],"stream":true}`
	a, bodies := rawFake(t, replySSE(t, "stream_tool_use.sse", nil))
	ch, err := a.Stream(t.Context(), gateway.Request{Model: "claude-sonnet-4-5", Native: &gateway.Native{Shape: gateway.ShapeAnthropicMessages, Body: []byte(body)}})
	if err != nil {
		t.Fatal(err)
	}
	chunks := collect(t, ch)
	if got := bodies()[0]; got != strings.Replace(body, `"claude-x"`, `"claude-sonnet-4-5"`, 1) {
		t.Fatalf("sent %s", got)
	}
	var events []string
	var calls []gateway.ToolCallDelta
	for _, c := range chunks {
		if c.Native == nil {
			t.Fatalf("chunk without its event: %+v", c)
		}
		events = append(events, "event: "+c.Native.Event+"\ndata: "+string(c.Native.Data)+"\n\n")
		calls = append(calls, c.ToolCalls...)
		if c.Usage == nil || c.Usage.Input != 472 {
			t.Fatalf("chunk without message_start's usage: %+v", c)
		}
	}
	if got, want := strings.Join(events, ""), string(fixture(t, "stream_tool_use.sse")); got != want {
		t.Fatalf("events passed on:\n%s\nwant\n%s", got, want)
	}
	want := []gateway.ToolCallDelta{{Index: 0, ID: "toolu_01T1x1fJ34qAmk2tNTrN7Up6", Name: "get_weather"}, {Index: 0, Arguments: `{"location": "Paris"}`}}
	if !reflect.DeepEqual(calls, want) {
		t.Fatalf("tool calls %+v", calls)
	}
	last := chunks[len(chunks)-1]
	if !last.Done || last.FinishReason != "tool_calls" || last.Usage.Output != 89 {
		t.Fatalf("last %+v", last)
	}
}

// A whole answer's tool_use blocks are the response's tool calls.
func TestCompleteToolUse(t *testing.T) {
	const answer = `{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"text","text":"Let me look."},` +
		`{"type":"tool_use","id":"toolu_1","name":"look","input":{"q":"cat"}},{"type":"tool_use","id":"toolu_2","name":"now","input":{}}],` +
		`"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":20}}`
	a, _ := rawFake(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, answer) })
	native := `{"model":"c","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}`
	resp, err := a.Complete(t.Context(), gateway.Request{Model: "claude", Native: &gateway.Native{Shape: gateway.ShapeAnthropicMessages, Body: []byte(native)}})
	if err != nil {
		t.Fatal(err)
	}
	want := []gateway.ToolCall{{ID: "toolu_1", Name: "look", Arguments: `{"q":"cat"}`}, {ID: "toolu_2", Name: "now", Arguments: `{}`}}
	if !reflect.DeepEqual(resp.ToolCalls, want) || resp.Content != "Let me look." || resp.FinishReason != "tool_calls" || string(resp.Native.Body) != answer {
		t.Fatalf("answer %+v", resp)
	}
}

// A streamed call with no arguments gets {} as its arguments, so that
// the pieces joined are JSON.
func TestStreamToolWithoutArguments(t *testing.T) {
	const sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"model\":\"c\",\"usage\":{\"input_tokens\":5,\"output_tokens\":1}}}\n\n" +
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"now\",\"input\":{}}}\n\n" +
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":3}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	a, _ := rawFake(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, sse) })
	ch, err := a.Stream(t.Context(), gateway.Request{Model: "c", Messages: []gateway.Message{{Role: "user", Content: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	var args string
	var usages []gateway.Usage
	for _, c := range collect(t, ch) {
		for _, tc := range c.ToolCalls {
			args += tc.Arguments
		}
		usages = append(usages, *c.Usage)
	}
	if args != "{}" {
		t.Fatalf("arguments %q", args)
	}
	// message_start's usage first (what a caller who leaves is charged),
	// the last cumulative output at the end.
	if usages[0] != (gateway.Usage{Input: 5, Output: 1}) || usages[len(usages)-1] != (gateway.Usage{Input: 5, Output: 3}) {
		t.Fatalf("usages %+v", usages)
	}
}
