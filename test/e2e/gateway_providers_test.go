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
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/bedrock/bedrocktest"
)

// The fakes of the providers beyond OpenAI and Anthropic (theirs are in
// gateway_clients_test.go), each speaking its provider's wire with the
// same behaviour: a request with tools whose conversation holds no tool
// answer gets a call of get_weather({"city":"Vilnius"}); a JSON format
// gets {"city":"Vilnius","temp_c":21}; anything else "It is 21 degrees in
// Vilnius." Each records the bodies it received, and refuses a request
// without its credentials as its provider would.

const (
	e2eAnswer = "It is 21 degrees in Vilnius."
	e2eJSON   = `{"city":"Vilnius","temp_c":21}`
)

// fakeCompat is a vLLM-like OpenAI-compatible server: the OpenAI fake's
// answers, but the usage on every chunk of a stream (vLLM's
// continuous_usage_stats, which the deployment asks for), behind a key
// in X-Api-Key and a team header.
func fakeCompat(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	inner := openAIHandler(rec)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "vllm-key" || r.Header.Get("X-Team") != "e2e" || r.Header.Get("Authorization") != "" {
			w.WriteHeader(401)
			io.WriteString(w, `{"object":"error","message":"Unauthorized","type":"Unauthorized","param":null,"code":401}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if !bytes.Contains(body, []byte(`"stream":true`)) {
			inner.ServeHTTP(w, r)
			return
		}
		if !bytes.Contains(body, []byte(`"continuous_usage_stats":true`)) {
			w.WriteHeader(400)
			io.WriteString(w, `{"object":"error","message":"the e2e fake wants continuous_usage_stats","type":"BadRequestError","code":400}`)
			return
		}
		inner.ServeHTTP(&everyChunkUsage{ResponseWriter: w}, r)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// everyChunkUsage writes vLLM's continuous usage into each chunk.
type everyChunkUsage struct {
	http.ResponseWriter
	n int
}

func (e *everyChunkUsage) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"usage":null`)) {
		e.n++
		u := fmt.Sprintf(`"usage":{"prompt_tokens":20,"completion_tokens":%d,"total_tokens":%d}`, e.n, 20+e.n)
		if _, err := e.ResponseWriter.Write(bytes.Replace(b, []byte(`"usage":null`), []byte(u), 1)); err != nil {
			return 0, err
		}
		return len(b), nil
	}
	return e.ResponseWriter.Write(b)
}

func (e *everyChunkUsage) Flush() { e.ResponseWriter.(http.Flusher).Flush() }

// fakeAzure is Azure OpenAI: the OpenAI fake's answers at a deployment's
// path with the api-version query and the key in api-key; a stream opens
// with Azure's chunk of prompt filter results and no choice.
func fakeAzure(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	inner := openAIHandler(rec)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("api-key") != "azure-key" {
			w.WriteHeader(401)
			io.WriteString(w, `{"error":{"code":"401","message":"Access denied due to invalid subscription key or wrong API endpoint."}}`)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/openai/deployments/")
		deployment, op, _ := strings.Cut(rest, "/")
		if !ok || r.URL.Query().Get("api-version") != "2024-10-21" {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"404","message":"Resource not found"}}`)
			return
		}
		r.URL.Path = "/v1/" + op
		r.Header.Set("X-Azure-Deployment", deployment)
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[{"prompt_index":0,"content_filter_results":{"hate":{"filtered":false,"severity":"safe"}}}]}`+"\n\n")
		}
		inner.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// fakeGemini is the Gemini API: generateContent, streamGenerateContent
// over SSE, batchEmbedContents, the key in x-goog-api-key.
func fakeGemini(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add(r.URL.Path, body)
		w.Header().Set("Content-Type", "application/json; charset=UTF-8")
		if r.Header.Get("x-goog-api-key") != "gemini-key" {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID"}]}}`)
			return
		}
		_, method, _ := strings.Cut(r.URL.Path, ":")
		if method == "batchEmbedContents" {
			var req struct {
				Requests []any `json:"requests"`
			}
			json.Unmarshal(body, &req)
			vecs := make([]string, len(req.Requests))
			for i := range vecs {
				vecs[i] = `{"values":[0.5,-1.5]}`
			}
			fmt.Fprintf(w, `{"embeddings":[%s]}`, strings.Join(vecs, ","))
			return
		}
		var req struct {
			Contents []struct {
				Parts []map[string]json.RawMessage `json:"parts"`
			} `json:"contents"`
			Tools            []any `json:"tools"`
			GenerationConfig struct {
				ResponseMimeType string `json:"responseMimeType"`
			} `json:"generationConfig"`
		}
		if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) == 0 {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":400,"message":"* GenerateContentRequest.contents: contents is not specified","status":"INVALID_ARGUMENT"}}`)
			return
		}
		answered := strings.Contains(string(body), `"functionResponse"`)
		usage := `"usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":10,"totalTokenCount":30}`
		var parts, reason string
		switch {
		case len(req.Tools) > 0 && !answered:
			parts, reason = `[{"functionCall":{"name":"get_weather","args":{"city":"Vilnius"}}}]`, "STOP"
		case req.GenerationConfig.ResponseMimeType == "application/json":
			parts, reason = fmt.Sprintf(`[{"text":%q}]`, e2eJSON), "STOP"
		default:
			parts, reason = fmt.Sprintf(`[{"text":%q}]`, e2eAnswer), "STOP"
		}
		if method == "generateContent" {
			fmt.Fprintf(w, `{"candidates":[{"content":{"parts":%s,"role":"model"},"finishReason":%q,"index":0}],%s,"modelVersion":"gemini-e2e","responseId":"g-1"}`, parts, reason, usage)
			return
		}
		if method != "streamGenerateContent" || r.URL.Query().Get("alt") != "sse" {
			w.WriteHeader(404)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if strings.Contains(parts, `"text"`) && !strings.Contains(parts, "{\\\"") {
			// Text comes in pieces; the last event has the finish reason.
			fmt.Fprintf(w, "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"It is 21 \"}],\"role\":\"model\"},\"index\":0}],\"usageMetadata\":{\"promptTokenCount\":20,\"totalTokenCount\":20},\"modelVersion\":\"gemini-e2e\",\"responseId\":\"g-2\"}\r\n\r\n")
			w.(http.Flusher).Flush()
			parts = `[{"text":"degrees in Vilnius."}]`
		}
		fmt.Fprintf(w, "data: {\"candidates\":[{\"content\":{\"parts\":%s,\"role\":\"model\"},\"finishReason\":%q,\"index\":0}],%s,\"modelVersion\":\"gemini-e2e\",\"responseId\":\"g-2\"}\r\n\r\n", parts, reason, usage)
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// The test's AWS credentials, which the fake Bedrock checks the
// signature of.
const (
	e2eAWSKey    = "AKIDSTICKYDE2E"
	e2eAWSSecret = "stickyd/e2e/secret"
)

// fakeBedrock is Bedrock Runtime: Converse, ConverseStream (the binary
// event stream), InvokeModel for Titan embeddings, each request's SigV4
// signature checked against the test's credentials.
func fakeBedrock(t *testing.T) (*httptest.Server, *recording) {
	rec := &recording{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add(r.URL.Path, body)
		if _, service, err := bedrocktest.VerifySignature(r, body, e2eAWSKey, e2eAWSSecret); err != nil || service != "bedrock" {
			bedrocktest.WriteError(w, 403, "InvalidSignatureException", fmt.Sprintf("signature: %v", err))
			return
		}
		w.Header().Set("X-Amzn-RequestId", "e2e-req")
		switch {
		case r.Method == "GET" && r.URL.Path == "/async-invoke":
			io.WriteString(w, `{"asyncInvokeSummaries":[]}`)
			return
		case strings.HasSuffix(r.URL.Path, "/invoke"):
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"embedding":[0.5,-1.5],"inputTextTokenCount":2}`)
			return
		}
		var req struct {
			ToolConfig   any `json:"toolConfig"`
			OutputConfig any `json:"outputConfig"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			bedrocktest.WriteError(w, 400, "ValidationException", "malformed request")
			return
		}
		callTool := req.ToolConfig != nil && !strings.Contains(string(body), `"toolResult"`)
		text := e2eAnswer
		if req.OutputConfig != nil {
			text = e2eJSON
		}
		usage := map[string]any{"inputTokens": 20, "outputTokens": 10, "totalTokens": 30}
		if strings.HasSuffix(r.URL.Path, "/converse") {
			content, stop := []any{map[string]any{"text": text}}, "end_turn"
			if callTool {
				content = []any{map[string]any{"toolUse": map[string]any{"toolUseId": "tooluse_e2e", "name": "get_weather", "input": map[string]string{"city": "Vilnius"}}}}
				stop = "tool_use"
			}
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"output": map[string]any{"message": map[string]any{"role": "assistant", "content": content}},
				"stopReason": stop, "usage": usage, "metrics": map[string]int{"latencyMs": 5}})
			return
		}
		w.Header().Set("Content-Type", bedrocktest.EventStreamType)
		ev := func(typ string, payload any) {
			bedrocktest.WriteEvent(w, typ, payload)
			w.(http.Flusher).Flush()
		}
		ev("messageStart", map[string]string{"role": "assistant"})
		stop := "end_turn"
		if callTool {
			ev("contentBlockStart", map[string]any{"contentBlockIndex": 0, "start": map[string]any{"toolUse": map[string]string{"toolUseId": "tooluse_e2e", "name": "get_weather"}}})
			for _, piece := range []string{`{"city":`, `"Vilnius"}`} {
				ev("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]any{"toolUse": map[string]string{"input": piece}}})
			}
			stop = "tool_use"
		} else {
			for _, piece := range []string{text[:9], text[9:]} {
				ev("contentBlockDelta", map[string]any{"contentBlockIndex": 0, "delta": map[string]string{"text": piece}})
			}
		}
		ev("contentBlockStop", map[string]any{"contentBlockIndex": 0})
		ev("messageStop", map[string]string{"stopReason": stop})
		ev("metadata", map[string]any{"usage": usage, "metrics": map[string]int{"latencyMs": 5}})
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// The official clients' scenarios (a tool-calling conversation whole and
// streamed, a vision request, JSON-schema output, embeddings, and
// @anthropic-ai/sdk's streamed tool use against /v1/messages) through the
// gateway against a fake of each provider: OpenAI, Anthropic, a vLLM-like
// OpenAI-compatible server, Gemini, Azure OpenAI and Bedrock. Each answers
// as the fake says, or, where the provider cannot carry the feature, the
// gateway refuses it with a 400 naming the parameter; and the fakes got
// the translation (checked on their recorded requests).
func TestGatewayProviders(t *testing.T) {
	dir := npmClients(t)
	oai, _ := fakeOpenAI(t)
	ant, _ := fakeAnthropic(t)
	compat, compatRec := fakeCompat(t)
	gem, gemRec := fakeGemini(t)
	az, azRec := fakeAzure(t)
	br, brRec := fakeBedrock(t)
	for k, v := range map[string]string{"E2E_ANTHROPIC_KEY": "sk-ant-e2e", "E2E_VLLM_KEY": "vllm-key", "E2E_GEMINI_KEY": "gemini-key", "E2E_AZURE_KEY": "azure-key",
		// Bedrock's credentials, found by the AWS SDK's chain in the
		// environment; nothing of the machine's own.
		"AWS_ACCESS_KEY_ID": e2eAWSKey, "AWS_SECRET_ACCESS_KEY": e2eAWSSecret, "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "", "AWS_CA_BUNDLE": "",
		"AWS_CONFIG_FILE": filepath.Join(t.TempDir(), "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(t.TempDir(), "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true"} {
		t.Setenv(k, v)
	}
	price := &gateway.Price{Input: 1, Output: 4}
	model := func(name string, d *agent.GatewayDeployment) *agent.GatewayModel {
		d.Name, d.Price = name, price
		return &agent.GatewayModel{Name: name, Concurrency: 4, Deployments: []*agent.GatewayDeployment{d}}
	}
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
		c.Gateway = &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0", APIKeys: map[string]string{"e2e": "key-e2e"},
			Models: []*agent.GatewayModel{
				model("openai", &agent.GatewayDeployment{Provider: "openai", BaseURL: oai.URL + "/v1", Model: "gpt-e2e"}),
				model("openai-emb", &agent.GatewayDeployment{Provider: "openai", BaseURL: oai.URL + "/v1", Model: "emb-e2e"}),
				model("anthropic", &agent.GatewayDeployment{Provider: "anthropic", BaseURL: ant.URL, Model: "claude-e2e", APIKeyEnv: "E2E_ANTHROPIC_KEY"}),
				model("compat", &agent.GatewayDeployment{Provider: "compat", BaseURL: compat.URL + "/v1", Model: "qwen-e2e", APIKeyEnv: "E2E_VLLM_KEY",
					AuthHeader: "X-Api-Key", Headers: map[string]string{"X-Team": "e2e"}, ContinuousUsage: true}),
				model("compat-emb", &agent.GatewayDeployment{Provider: "compat", BaseURL: compat.URL + "/v1", Model: "bge-e2e", APIKeyEnv: "E2E_VLLM_KEY",
					AuthHeader: "X-Api-Key", Headers: map[string]string{"X-Team": "e2e"}}),
				model("gemini", &agent.GatewayDeployment{Provider: "gemini", BaseURL: gem.URL, Model: "gemini-e2e", APIKeyEnv: "E2E_GEMINI_KEY"}),
				model("gemini-emb", &agent.GatewayDeployment{Provider: "gemini", BaseURL: gem.URL, Model: "gemini-embedding-e2e", APIKeyEnv: "E2E_GEMINI_KEY"}),
				model("azure", &agent.GatewayDeployment{Provider: "azure", BaseURL: az.URL, Model: "gpt4o-prod", APIKeyEnv: "E2E_AZURE_KEY", APIVersion: "2024-10-21"}),
				model("azure-emb", &agent.GatewayDeployment{Provider: "azure", BaseURL: az.URL, Model: "emb-prod", APIKeyEnv: "E2E_AZURE_KEY", APIVersion: "2024-10-21"}),
				model("bedrock", &agent.GatewayDeployment{Provider: "bedrock", BaseURL: br.URL, Model: "anthropic.claude-e2e-v1:0", Region: "eu-central-1"}),
				model("bedrock-emb", &agent.GatewayDeployment{Provider: "bedrock", BaseURL: br.URL, Model: "amazon.titan-embed-text-v2:0", Region: "eu-central-1"}),
			}}
	})
	providers := []string{"openai", "anthropic", "compat", "gemini", "azure", "bedrock"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "providers.mjs")
	cmd.Dir = dir
	// Each embedding model is tried on its provider's row; Bedrock's
	// Claude and Anthropic's models have no embeddings.
	cmd.Env = append(os.Environ(), "GATEWAY_URL=http://"+a.GatewayAddr(), "GATEWAY_KEY=key-e2e", "MODELS="+strings.Join(providers, ","),
		"EMBEDDINGS=openai-emb=openai,anthropic=anthropic,compat-emb=compat,gemini-emb=gemini,azure-emb=azure,bedrock-emb=bedrock,bedrock=bedrock")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node providers.mjs: %v\n%s", err, stderr.String())
	}
	var got struct {
		Results map[string]map[string]json.RawMessage `json:"results"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the clients' report: %v\n%s", err, out)
	}

	// What each scenario must bring back, or the refusal it must get.
	ok := map[string][]string{
		"toolCall":        {`"name":"get_weather"`, `"arguments":{"city":"Vilnius"}`, `"finish":"tool_calls"`, `"answer":"It is 21 degrees in Vilnius."`},
		"toolCallStream":  {`"name":"get_weather"`, `"arguments":{"city":"Vilnius"}`, `"finish":"tool_calls"`, `"answer":"It is 21 degrees in Vilnius."`, `"prompt_tokens":20`},
		"vision":          {`"answer":"It is 21 degrees in Vilnius."`},
		"jsonSchema":      {`"answer":{"city":"Vilnius","temp_c":21}`},
		"anthropicStream": {`"input":{"city":"Vilnius"}`, `"stop":"tool_use"`, `"answer":"It is 21 degrees in Vilnius."`},
		"embeddings":      {`"count":2`, `"first":[0.5,-1.5]`},
	}
	refused := map[string]map[string]string{ // provider → scenario → the parameter named
		"anthropic": {"jsonSchema": "response_format", "embeddings:anthropic": "model"},
		"bedrock":   {"embeddings:bedrock": "model"},
	}
	for _, p := range providers {
		for scenario, raw := range got.Results[p] {
			t.Run(p+"/"+scenario, func(t *testing.T) {
				var r struct {
					OK      json.RawMessage `json:"ok"`
					Refused *struct {
						Status int    `json:"status"`
						Code   string `json:"code"`
						Param  string `json:"param"`
					} `json:"refused"`
					Failed string `json:"failed"`
				}
				json.Unmarshal(raw, &r)
				t.Logf("%s", raw)
				if param, want := refused[p][scenario]; want {
					if r.Refused == nil || r.Refused.Status != 400 || r.Refused.Code != "unsupported_parameter" || r.Refused.Param != param {
						t.Fatalf("want a 400 refusal naming %s, got %s", param, raw)
					}
					return
				}
				if r.OK == nil {
					t.Fatalf("failed: %s", raw)
				}
				kind, _, _ := strings.Cut(scenario, ":")
				for _, w := range ok[kind] {
					if p == "anthropic" {
						// The Anthropic fake's own words: a whole answer
						// is its greeting, its prompt 30 tokens.
						if kind == "toolCall" || kind == "vision" {
							w = strings.Replace(w, e2eAnswer, "Hello from Claude.", 1)
						}
						w = strings.Replace(w, `"prompt_tokens":20`, `"prompt_tokens":30`, 1)
					}
					if !bytes.Contains(r.OK, []byte(w)) {
						t.Errorf("%s lacks %s", r.OK, w)
					}
				}
			})
		}
		if n := len(got.Results[p]); n < 6 {
			t.Errorf("%s ran %d scenarios", p, n)
		}
	}

	// The translations the fakes received.
	all := func(rec *recording, suffix string) string {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var out []string
		for path, bodies := range rec.bodies {
			if strings.HasSuffix(path, suffix) {
				out = append(out, bodies...)
			}
		}
		return strings.Join(out, "\n")
	}
	contains := func(what, in string, want ...string) {
		t.Helper()
		for _, w := range want {
			if !strings.Contains(in, w) {
				t.Errorf("%s: no request carried %s", what, w)
			}
		}
	}
	contains("compat", all(compatRec, "/v1/chat/completions"), `"model":"qwen-e2e"`, `"continuous_usage_stats":true`, `"image_url":{"url":"data:image/png;base64,`)
	contains("azure", all(azRec, "/v1/chat/completions"), `"model":"gpt4o-prod"`, `"json_schema":{"name":"weather"`, `"tool_call_id":"call_w1"`)
	contains("gemini", all(gemRec, ":generateContent")+all(gemRec, ":streamGenerateContent"), `"functionDeclarations":[{"name":"get_weather"`,
		`"parametersJsonSchema":{`, `"functionResponse":{"name":"get_weather","response":{"temp_c":21}}`, `"inlineData":{"mimeType":"image/png"`,
		`"responseMimeType":"application/json"`, `"responseJsonSchema":{`, `"functionCall":{"name":"get_weather","args":{"city":"Vilnius"}}`)
	contains("gemini embeddings", all(gemRec, ":batchEmbedContents"), `"model":"models/gemini-embedding-e2e"`, `{"text":"sessions"}`)
	contains("bedrock", all(brRec, "/converse")+all(brRec, "/converse-stream"), `"toolSpec":{`, `"toolUse":{`, `"toolResult":{`,
		`"image":{"format":"png","source":{"bytes":"iVBORw0KGgo`, `"outputConfig":{"textFormat":{`, `"inferenceConfig":{"maxTokens":256}`)
	contains("bedrock embeddings", all(brRec, "/invoke"), `{"inputText":"sticky"}`, `{"inputText":"sessions"}`)
}
