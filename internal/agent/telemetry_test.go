package agent_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/telemetry"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// An agent with a telemetry block exports its gateway's calls to the
// OTLP/HTTP endpoint it names; the last spans go out as it stops.
func TestTelemetryExportsGatewayTraces(t *testing.T) {
	// A provider speaking OpenAI's wire, and a collector keeping what it
	// is sent.
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"small-v1",`+
			`"choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`)
	}))
	defer provider.Close()
	var mu sync.Mutex
	var traces bytes.Buffer
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method == "POST" && r.URL.Path == "/v1/traces" {
			mu.Lock()
			traces.Write(b)
			mu.Unlock()
		}
	}))
	defer collector.Close()

	cfg := &agent.Config{
		Name:   "traced",
		Front:  &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:  &agent.AdminConfig{Address: "127.0.0.1:0", Token: "traced-token-0123456789"},
		Server: &agent.ServerConfig{},
		Groups: []*agent.GroupConfig{{Name: "web", Workers: 1, Builtin: "counter"}},
		Gateway: &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0",
			Models: []*agent.GatewayModel{{Name: "small", Concurrency: 1, Deployments: []*agent.GatewayDeployment{{
				Name: "local", Provider: "openai", BaseURL: provider.URL + "/v1", Model: "small-v1", Price: &gateway.Price{Free: true}}}}}},
		Telemetry: &telemetry.Config{OTLPEndpoint: strings.TrimPrefix(collector.URL, "http://")},
	}
	log := hclog.NewNullLogger()
	a, err := agent.New(cfg, map[string]agent.Builtin{
		"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log}),
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(ctx)
	resp, err := http.Post("http://"+a.GatewayAddr()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"small","messages":[{"role":"user","content":"hello"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, b)
	}
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"chat small", "chat small-v1", "gen_ai.usage.input_tokens", "traced"} {
		if !bytes.Contains(traces.Bytes(), []byte(want)) {
			t.Errorf("the collector got no %q in %d bytes", want, traces.Len())
		}
	}
	t.Logf("the collector got %d bytes", traces.Len())
}

// The telemetry block is read from the agent's file.
func TestTelemetryBlock(t *testing.T) {
	c, err := agent.ParseConfig("agent.hcl", []byte(`
telemetry {
  otlp_endpoint = "collector:4317"
  otlp_protocol = "grpc"
  sample_ratio  = 0.25
  headers       = { "x-api-key" = "k" }
}
`))
	if err != nil {
		t.Fatal(err)
	}
	tc := c.Telemetry
	if tc == nil || tc.OTLPEndpoint != "collector:4317" || tc.OTLPProtocol != "grpc" || tc.SampleRatio == nil || *tc.SampleRatio != 0.25 || tc.Headers["x-api-key"] != "k" {
		t.Fatalf("read as %+v", tc)
	}
}
