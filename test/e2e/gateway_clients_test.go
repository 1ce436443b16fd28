package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
)

// recording is a fake provider's log of the request bodies it received,
// by path, as they came.
type recording struct {
	mu     sync.Mutex
	bodies map[string][]string
}

func (r *recording) add(path string, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.bodies == nil {
		r.bodies = map[string][]string{}
	}
	r.bodies[path] = append(r.bodies[path], string(body))
}

func (r *recording) of(path string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bodies[path]...)
}

// fakeOpenAI speaks OpenAI's Chat Completions and Embeddings APIs: a
// request with tools whose last message is not a tool's answer gets a call
// of get_weather; a JSON format gets JSON; n answers n choices, logprobs
// are answered when asked.
func fakeOpenAI(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	srv := httptest.NewServer(openAIHandler(rec))
	t.Cleanup(srv.Close)
	return srv, rec
}

// openAIHandler is fakeOpenAI's handler, for the fakes that speak
// OpenAI's wire behind their own addressing (Azure, vLLM).
func openAIHandler(rec *recording) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add(r.URL.Path, body)
		var req struct {
			Model    string `json:"model"`
			Stream   bool   `json:"stream"`
			N        int    `json:"n"`
			Logprobs bool   `json:"logprobs"`
			Tools    []any  `json:"tools"`
			Choice   any    `json:"tool_choice"`
			Format   *struct {
				Type string `json:"type"`
			} `json:"response_format"`
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
			StreamOptions *struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
			Input []string `json:"input"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, `{"error":{"message":"not JSON","type":"invalid_request_error"}}`, 400)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/models":
			io.WriteString(w, `{"object":"list","data":[]}`)
			return
		case "/v1/embeddings":
			// [0.5, -1.5] as little-endian float32, base64; floats otherwise.
			vec := `[0.5,-1.5]`
			if strings.Contains(string(body), `"encoding_format":"base64"`) {
				vec = `"AAAAPwAAwL8="`
			}
			fmt.Fprintf(w, `{"object":"list","data":[{"object":"embedding","index":0,"embedding":%s},{"object":"embedding","index":1,"embedding":%s}],"model":%q,"usage":{"prompt_tokens":4,"total_tokens":4}}`, vec, vec, req.Model)
			return
		}
		last := ""
		if n := len(req.Messages); n > 0 {
			last = req.Messages[n-1].Role
		}
		callTool := len(req.Tools) > 0 && last != "tool" && req.Choice != "none"
		text := "It is 21 degrees in Vilnius."
		if req.Format != nil && req.Format.Type != "text" {
			text = `{"city":"Vilnius","temp_c":21}`
		}
		usage := `{"prompt_tokens":20,"completion_tokens":10,"total_tokens":30}`
		if !req.Stream {
			n := max(req.N, 1)
			var choices []string
			for i := range n {
				msg := fmt.Sprintf(`{"role":"assistant","content":%q,"refusal":null}`, text)
				finish := "stop"
				if callTool {
					msg, finish = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_w1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Vilnius\"}"}}]}`, "tool_calls"
				}
				logprobs := "null"
				if req.Logprobs {
					logprobs = `{"content":[{"token":"It","logprob":-0.1,"bytes":[73,116],"top_logprobs":[{"token":"It","logprob":-0.1,"bytes":[73,116]}]}]}`
				}
				choices = append(choices, fmt.Sprintf(`{"index":%d,"message":%s,"logprobs":%s,"finish_reason":%q}`, i, msg, logprobs, finish))
			}
			fmt.Fprintf(w, `{"id":"chatcmpl-e2e","object":"chat.completion","created":1,"model":%q,"system_fingerprint":"fp_e2e","choices":[%s],"usage":%s}`,
				req.Model, strings.Join(choices, ","), usage)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		chunk := func(delta, finish string) {
			f := "null"
			if finish != "" {
				f = fmt.Sprintf("%q", finish)
			}
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-e2e\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":%s,\"logprobs\":null,\"finish_reason\":%s}],\"usage\":null}\n\n", req.Model, delta, f)
			w.(http.Flusher).Flush()
		}
		if callTool {
			chunk(`{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_w1","type":"function","function":{"name":"get_weather","arguments":""}}]}`, "")
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}`, "")
			chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"\"Vilnius\"}"}}]}`, "")
			chunk(`{}`, "tool_calls")
		} else {
			chunk(`{"role":"assistant","content":""}`, "")
			for _, piece := range []string{"It is 21 ", "degrees in Vilnius."} {
				chunk(fmt.Sprintf(`{"content":%q}`, piece), "")
			}
			chunk(`{}`, "stop")
		}
		if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
			fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-e2e\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[],\"usage\":%s}\n\n", req.Model, usage)
		}
		io.WriteString(w, "data: [DONE]\n\n")
	})
}

// fakeAnthropic speaks Anthropic's Messages API, whole and streamed: a
// request with tools whose last turn holds no tool_result gets a tool_use
// of get_weather (its input streamed in two input_json_delta pieces).
func fakeAnthropic(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add(r.URL.Path, body)
		if r.URL.Path == "/v1/models" {
			io.WriteString(w, `{"data":[]}`)
			return
		}
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
			Tools  []any  `json:"tools"`
		}
		_ = json.Unmarshal(body, &req)
		useTool := len(req.Tools) > 0 && !strings.Contains(string(body), `"tool_result"`)
		usageStart := `{"input_tokens":30,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":1}`
		if !req.Stream {
			content, stop := `[{"type":"text","text":"Hello from Claude."}]`, "end_turn"
			if useTool {
				content, stop = `[{"type":"tool_use","id":"toolu_w1","name":"get_weather","input":{"city":"Vilnius"}}]`, "tool_use"
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg_e2e","type":"message","role":"assistant","model":%q,"content":%s,"stop_reason":%q,"stop_sequence":null,"usage":{"input_tokens":30,"output_tokens":12}}`, req.Model, content, stop)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		ev := func(name, data string) {
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data)
			w.(http.Flusher).Flush()
		}
		ev("message_start", fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_e2e","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":%s}}`, req.Model, usageStart))
		stop := "end_turn"
		if useTool {
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_w1","name":"get_weather","input":{}}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Vilnius\"}"}}`)
			stop = "tool_use"
		} else {
			ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
			ev("ping", `{"type":"ping"}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"It is 21 degrees "}}`)
			ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"in Vilnius."}}`)
		}
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`)
		ev("message_delta", fmt.Sprintf(`{"type":"message_delta","delta":{"stop_reason":%q,"stop_sequence":null},"usage":{"output_tokens":12}}`, stop))
		ev("message_stop", `{"type":"message_stop"}`)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// npmClients is the folder of the Node harness; it skips the test (or
// fails it where STICKYD_REQUIRE_AGENTS=1, as CI sets) when node or the
// installed clients are missing.
func npmClients(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("testdata", "npmclients"))
	if err != nil {
		t.Fatal(err)
	}
	missing := ""
	if _, err := exec.LookPath("node"); err != nil {
		missing = "node is not installed (Debian: apt-get install nodejs npm), then run make deps"
	} else if _, err := os.Stat(filepath.Join(dir, "node_modules", "openai")); err != nil {
		missing = "the npm clients are not installed: run make deps (npm ci in " + dir + ")"
	}
	if missing != "" {
		if os.Getenv("STICKYD_REQUIRE_AGENTS") == "1" {
			t.Fatal(missing)
		}
		t.Skip(missing)
	}
	return dir
}

// The official clients, unchanged, through the gateway: the openai
// client's tool-calling conversations (whole and streamed), a vision
// request, JSON-schema output, embeddings, the models, the Responses API;
// @anthropic-ai/sdk's streamed tool use against /v1/messages on an
// Anthropic deployment and on an OpenAI one. Every request the openai
// client made to an OpenAI deployment, and @anthropic-ai/sdk to an
// Anthropic one, reached the fake provider byte for byte as the client
// sent it, apart from the model (the deployment's) and, on an OpenAI
// stream whose caller did not ask for it, stream_options.include_usage
// (the gateway counts usage; Anthropic's streams report it unasked).
func TestGatewayOfficialClients(t *testing.T) {
	dir := npmClients(t)
	oai, oaiRec := fakeOpenAI(t)
	ant, antRec := fakeAnthropic(t)
	t.Setenv("E2E_ANTHROPIC_KEY", "sk-ant-e2e")
	dep := func(name, provider, url, model string) []*agent.GatewayDeployment {
		d := &agent.GatewayDeployment{Name: name, Provider: provider, BaseURL: url, Model: model, Price: &gateway.Price{Input: 1, Output: 4}}
		if provider == "anthropic" {
			d.APIKeyEnv = "E2E_ANTHROPIC_KEY"
		}
		return []*agent.GatewayDeployment{d}
	}
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
		c.Gateway = &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0", APIKeys: map[string]string{"e2e": "key-e2e"},
			Models: []*agent.GatewayModel{
				{Name: "gpt", Concurrency: 4, Deployments: dep("openai", "openai", oai.URL+"/v1", "gpt-upstream")},
				{Name: "gpt2", Concurrency: 4, Deployments: dep("openai-translated", "openai", oai.URL+"/v1", "gpt-translated")},
				{Name: "emb", Concurrency: 4, Deployments: dep("openai-emb", "openai", oai.URL+"/v1", "emb-upstream")},
				{Name: "claude", Concurrency: 4, Deployments: dep("anthropic", "anthropic", ant.URL, "claude-upstream")},
			}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "clients.mjs")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GATEWAY_URL=http://"+a.GatewayAddr(), "GATEWAY_KEY=key-e2e")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node clients.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Sent []struct {
			URL  string  `json:"url"`
			Body *string `json:"body"`
		} `json:"sent"`
		Results map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the clients' report: %v\n%s", err, out)
	}
	for name, r := range got.Results {
		t.Logf("%s: %s", name, r)
	}

	// What the clients got back.
	expect := func(name string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(string(got.Results[name]), w) {
				t.Errorf("%s: %s lacks %s", name, got.Results[name], w)
			}
		}
	}
	expect("toolCall", `"name":"get_weather"`, `"arguments":"{\"city\":\"Vilnius\"}"`, `"finish":"tool_calls"`, `"answer":"It is 21 degrees in Vilnius."`, `"provider":"openai"`)
	expect("toolCallStream", `"name":"get_weather"`, `"arguments":"{\"city\":\"Vilnius\"}"`, `"id":"call_w1"`, `"finish":"tool_calls"`,
		`"usageChunks":0`, `"answer":"It is 21 degrees in Vilnius."`, `"prompt_tokens":20`, `"cost_micros":60`)
	expect("vision", `"It is 21 degrees in Vilnius."`)
	expect("jsonSchema", `{"city":"Vilnius","temp_c":21}`)
	expect("everything", `"choices":2`, `"logprobs":1`, `"fingerprint":"fp_e2e"`)
	expect("embeddings", `"count":2`, `"first":[0.5,-1.5]`, `"prompt_tokens":4`)
	expect("models", `["claude","emb","gpt","gpt2"]`)
	expect("responses", `"call":{"name":"get_weather","arguments":"{\"city\":\"Vilnius\"}"}`, `"answer":"It is 21 degrees in Vilnius."`,
		`"streamed":"It is 21 degrees in Vilnius."`, `"response.completed"`, `"streamedCall":"{\"city\":\"Vilnius\"}"`)
	expect("anthropic_claude", `"input":{"city":"Vilnius"}`, `"stop":"tool_use"`, `"jsonDeltas":2`, `"input_tokens":30`,
		`"answer":"It is 21 degrees in Vilnius."`, `"whole":"Hello from Claude."`)
	expect("anthropic_gpt2", `"input":{"city":"Vilnius"}`, `"stop":"tool_use"`, `"jsonDeltas":2`, `"answer":"It is 21 degrees in Vilnius."`,
		`"whole":"It is 21 degrees in Vilnius."`)

	// What the providers got: the client's bytes.
	var chats, messages, embeds []string
	for _, s := range got.Sent {
		if s.Body == nil {
			continue
		}
		var probe struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal([]byte(*s.Body), &probe)
		switch {
		case strings.HasSuffix(s.URL, "/v1/chat/completions") && probe.Model == "gpt":
			chats = append(chats, *s.Body)
		case strings.HasSuffix(s.URL, "/v1/messages") && probe.Model == "claude":
			messages = append(messages, *s.Body)
		case strings.HasSuffix(s.URL, "/v1/embeddings"):
			embeds = append(embeds, *s.Body)
		}
	}
	var received []string // the fake's bodies for the "gpt" deployment
	for _, b := range oaiRec.of("/v1/chat/completions") {
		if strings.Contains(b, `"model":"gpt-upstream"`) {
			received = append(received, b)
		}
	}
	same := func(what string, sent, received []string, model, upstream string, addsUsage bool) {
		t.Helper()
		if len(sent) == 0 || len(sent) != len(received) {
			t.Fatalf("%s: the clients sent %d requests, the provider got %d", what, len(sent), len(received))
		}
		for i, s := range sent {
			want := strings.Replace(s, fmt.Sprintf(`"model":%q`, model), fmt.Sprintf(`"model":%q`, upstream), 1)
			if addsUsage && strings.Contains(s, `"stream":true`) && !strings.Contains(s, `"include_usage":true`) {
				// The one addition: the gateway asks for the usage it counts.
				want = strings.TrimSuffix(want, "}") + `,"stream_options":{"include_usage":true}}`
			}
			if received[i] != want {
				t.Errorf("%s %d: the client sent\n%s\nthe provider got\n%s\nwant\n%s", what, i, s, received[i], want)
			}
		}
	}
	same("chat completions", chats, received, "gpt", "gpt-upstream", true)
	same("messages", messages, antRec.of("/v1/messages"), "claude", "claude-upstream", false)
	same("embeddings", embeds, oaiRec.of("/v1/embeddings"), "emb", "emb-upstream", false)
	// The parameters that used to be refused or dropped are among them.
	all := strings.Join(received, "\n")
	for _, p := range []string{`"tools":[`, `"image_url":{"url":"data:image/png;base64,`, `"n":2`, `"response_format":{"type":"json_schema"`,
		`"seed":42`, `"logprobs":true`, `"top_logprobs":2`, `"max_completion_tokens":300`, `"reasoning_effort":"low"`, `"logit_bias":{"50256":-100}`} {
		if !strings.Contains(all, p) {
			t.Errorf("no request carried %s to the provider", p)
		}
	}
	if strings.Contains(all, `"max_tokens"`) {
		t.Error("max_completion_tokens reached the provider as max_tokens")
	}
}
