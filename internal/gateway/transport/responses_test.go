package transport

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The Responses API: input items become the gateway's messages; the answer
// is a response object with its output items.
func TestResponses(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: gateway.Response{ID: "x", Model: "gpt", FinishReason: "tool_calls",
		ToolCalls: []gateway.ToolCall{{ID: "call_1", Name: "f", Arguments: `{"a":1}`}}, Usage: gateway.Usage{Input: 3, Output: 2}}}})
	srv := newHTTP(t, svc, HTTPOptions{})
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/responses", `{"model":"m","instructions":"be brief","max_output_tokens":50,
		"input":[{"role":"user","content":[{"type":"input_text","text":"hi"},{"type":"input_image","image_url":"https://x/y.png"}]},
		{"type":"function_call","call_id":"c0","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c0","output":"ok"}],
		"tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"text":{"format":{"type":"json_object"}},"reasoning":{"effort":"low"}}`, nil)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	for _, want := range []string{`"object":"response"`, `"status":"completed"`, `"type":"function_call"`, `"call_id":"call_1"`, `"arguments":"{\"a\":1}"`, `"input_tokens":3`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("answer lacks %s: %s", want, out)
		}
	}
	req := svc.lastCall(t).Request
	if len(req.Messages) != 4 || req.Messages[0].Role != "system" || len(req.Messages[1].Parts) != 2 || req.Messages[2].ToolCalls[0].ID != "c0" ||
		req.Messages[3].Role != "tool" || req.MaxCompletionTokens != 50 || req.ReasoningEffort != "low" || req.ResponseFormat.Type != "json_object" || len(req.Tools) != 1 {
		t.Fatalf("request %+v", req)
	}
}
