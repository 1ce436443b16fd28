package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
)

// provider is a local OpenAI-compatible server speaking the real wire
// format (JSON and SSE with a usage chunk), answering after delay. It
// counts every call by its first message and how many run at once.
type provider struct {
	delay   time.Duration
	usage   gateway.Usage // per call: Input excludes Cached
	mu      sync.Mutex
	calls   map[string]int
	running atomic.Int64
	peak    atomic.Int64
	srv     *httptest.Server
	// limitUntil, while in the future (unix nanoseconds), answers every
	// call 429 with Retry-After: 1; limited counts those answers.
	limitUntil atomic.Int64
	limited    atomic.Int64
	// Faults: hold adds to delay (nanoseconds); fail500 answers every
	// completion 500 while the model listing works; cut ends each stream
	// after its first piece by dropping the connection, having reported
	// usage on every chunk (as vLLM's continuous_usage_stats does); stall
	// sends nothing after the first piece for that long (nanoseconds);
	// trickle sends a piece every 200 ms for 20 s.
	hold    atomic.Int64
	fail500 atomic.Bool
	cut     atomic.Bool
	stall   atomic.Int64
	trickle atomic.Bool
	failed  atomic.Int64 // completions answered 500
}

func newProvider(t *testing.T, delay time.Duration) *provider {
	p := &provider{delay: delay, calls: map[string]int{}, usage: gateway.Usage{Input: 12, CachedInput: 30, Output: 7}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *provider) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/models" {
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"small","object":"model"}]}`)
		return
	}
	var req struct {
		Model    string `json:"model"`
		Stream   bool   `json:"stream"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	if time.Now().UnixNano() < p.limitUntil.Load() {
		p.limited.Add(1)
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)
		return
	}
	n := p.running.Add(1)
	defer p.running.Add(-1)
	for {
		peak := p.peak.Load()
		if n <= peak || p.peak.CompareAndSwap(peak, n) {
			break
		}
	}
	p.mu.Lock()
	p.calls[req.Messages[0].Content]++
	p.mu.Unlock()
	if p.fail500.Load() {
		p.failed.Add(1)
		http.Error(w, `{"error":{"message":"internal error","type":"server_error"}}`, http.StatusInternalServerError)
		return
	}
	// A call whose caller went away (its connection dropped: the gateway
	// that made it died) stops counting as running.
	select {
	case <-time.After(p.delay + time.Duration(p.hold.Load())):
	case <-r.Context().Done():
		return
	}
	u := p.usage
	usage := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}`,
		u.Input+u.CachedInput, u.Output, u.Input+u.CachedInput+u.Output, u.CachedInput)
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"echo: %s"},"finish_reason":"stop"}],"usage":%s}`,
			req.Model, req.Messages[0].Content, usage)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	if p.cut.Load() || p.stall.Load() > 0 || p.trickle.Load() {
		p.faultyStream(w, r, req.Model)
		return
	}
	for _, piece := range []string{"ec", "ho: ", req.Messages[0].Content} {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]}\n\n", req.Model, piece)
		w.(http.Flusher).Flush()
	}
	fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n", req.Model)
	fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[],\"usage\":%s}\n\ndata: [DONE]\n\n", req.Model, usage)
}

// faultyStream sends a first piece, then cuts, stalls or trickles.
func (p *provider) faultyStream(w http.ResponseWriter, r *http.Request, model string) {
	piece := func(text string, usage string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":%q,\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"finish_reason\":null}]%s}\n\n", model, text, usage)
		w.(http.Flusher).Flush()
	}
	switch {
	case p.cut.Load():
		// 42 prompt tokens (30 cached), 2 produced so far.
		piece("partial", `,"usage":{"prompt_tokens":42,"completion_tokens":2,"total_tokens":44,"prompt_tokens_details":{"cached_tokens":30}}`)
		panic(http.ErrAbortHandler) // the connection drops mid-stream
	case p.stall.Load() > 0:
		piece("then nothing", "")
		select {
		case <-time.After(time.Duration(p.stall.Load())):
		case <-r.Context().Done():
		}
	default:
		for range 100 {
			piece(".", "")
			select {
			case <-time.After(200 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}
}

func (p *provider) count(content string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[content]
}

// gatewayBlock is a gateway configuration with one model "small" on the
// provider, at $1/M input, $0.5/M cached input and $4/M output.
func gatewayBlock(p *provider, concurrency int) *agent.GatewayConfig {
	return &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0",
		APIKeys: map[string]string{"billing-team": "key-billing"},
		Models: []*agent.GatewayModel{{Name: "small", Concurrency: concurrency, Deployments: []*agent.GatewayDeployment{{
			Name: "local", Provider: "openai", BaseURL: p.srv.URL + "/v1", Model: "small-v1",
			Price: &gateway.Price{Input: 1, CachedInput: 0.5, Output: 4}}}}}}
}

// The three transports, one router: an unmodified OpenAI client (JSON and
// SSE), the async REST API and the gRPC service all reach the provider,
// and the cost counters are the exact sum of the replayed usage, cached
// tokens and streams included.
func TestGatewayTransports(t *testing.T) {
	p := newProvider(t, 0)
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) { c.Gateway = gatewayBlock(p, 4) })
	base := "http://" + a.GatewayAddr()

	cfg := openai.DefaultConfig("key-billing")
	cfg.BaseURL = base + "/v1"
	client := openai.NewClientWithConfig(cfg)
	ctx := context.Background()
	resp, err := client.CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "small",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "one"}}})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Choices[0].Message.Content != "echo: one" || resp.Usage.PromptTokens != 42 || resp.Usage.CompletionTokens != 7 {
		t.Fatalf("JSON answer %+v", resp)
	}
	stream, err := client.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{Model: "small", Stream: true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true}, Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "two"}}})
	if err != nil {
		t.Fatal(err)
	}
	var text string
	var usage *openai.Usage
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Choices) > 0 {
			text += r.Choices[0].Delta.Content
		}
		if r.Usage != nil {
			usage = r.Usage
		}
	}
	stream.Close()
	if text != "echo: two" || usage == nil || usage.PromptTokens != 42 {
		t.Fatalf("SSE answer %q, usage %+v", text, usage)
	}
	// The SSE stream names who served it (headers, and its last chunk)
	// and its cost (that chunk, and a trailer).
	sreq, _ := http.NewRequest("POST", base+"/v1/chat/completions",
		strings.NewReader(`{"model":"small","stream":true,"messages":[{"role":"user","content":"three"}]}`))
	sreq.Header.Set("Authorization", "Bearer key-billing")
	sreq.Header.Set("Content-Type", "application/json")
	sresp, err := http.DefaultClient.Do(sreq)
	if err != nil {
		t.Fatal(err)
	}
	sbody, _ := io.ReadAll(sresp.Body)
	sresp.Body.Close()
	if sresp.Header.Get("X-Stickyd-Provider") != "openai" || sresp.Header.Get("X-Stickyd-Deployment") != "local" ||
		sresp.Trailer.Get("X-Stickyd-Cost-Micros") != "55" ||
		!strings.Contains(string(sbody), `"stickyd":{"provider":"openai","deployment":"local","cost_micros":55}`) {
		t.Fatalf("SSE stream: headers %v, trailer %v\n%s", sresp.Header, sresp.Trailer, sbody)
	}
	// A wrong key is refused.
	bad := openai.DefaultConfig("nope")
	bad.BaseURL = base + "/v1"
	if _, err := openai.NewClientWithConfig(bad).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "small",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}}); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("a wrong key: %v", err)
	}

	// Async REST: 202, then the job.
	req, _ := http.NewRequest("POST", base+"/v1/gateway/requests", strings.NewReader(`{"model":"small","messages":[{"role":"user","content":"three"}],"session":"maria"}`))
	req.Header.Set("Authorization", "Bearer key-billing")
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		ID string `json:"id"`
	}
	_ = json.NewDecoder(hr.Body).Decode(&sub)
	hr.Body.Close()
	if hr.StatusCode != http.StatusAccepted || sub.ID == "" {
		t.Fatalf("submit: %d %+v", hr.StatusCode, sub)
	}
	var job gateway.Job
	waitFor(t, 10*time.Second, "the submitted call to finish", func() bool {
		r, _ := http.NewRequest("GET", base+"/v1/gateway/requests/"+sub.ID+"?wait=5s", nil)
		r.Header.Set("Authorization", "Bearer key-billing")
		hr, err := http.DefaultClient.Do(r)
		if err != nil {
			return false
		}
		defer hr.Body.Close()
		_ = json.NewDecoder(hr.Body).Decode(&job)
		return job.State == gateway.JobDone || job.State == gateway.JobFailed
	})
	if job.State != gateway.JobDone || job.Response == nil || job.Response.Content != "echo: three" || job.Response.Deployment != "local" {
		t.Fatalf("job %+v", job)
	}

	// gRPC: Complete and Stream with the generated client.
	conn, err := grpc.NewClient(a.GatewayGRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer("key-billing")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	gc := gatewaypb.NewGatewayClient(conn)
	cr, err := gc.Complete(ctx, &gatewaypb.CompletionRequest{Model: "small", Messages: []*gatewaypb.Message{{Role: "user", Content: "four"}}})
	if err != nil || cr.GetContent() != "echo: four" {
		t.Fatalf("gRPC Complete: %v %v", cr, err)
	}
	st, err := gc.Stream(ctx, &gatewaypb.CompletionRequest{Model: "small", Messages: []*gatewaypb.Message{{Role: "user", Content: "five"}}})
	if err != nil {
		t.Fatal(err)
	}
	text = ""
	done := false
	var chunks []*gatewaypb.CompletionChunk
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, c)
		text += c.GetDelta()
		done = done || c.GetDone()
	}
	if text != "echo: five" || !done {
		t.Fatalf("gRPC stream %q done %v", text, done)
	}
	// A stream names who served it, first and last, and its cost last.
	first, last := chunks[0], chunks[len(chunks)-1]
	if first.GetProvider() != "openai" || first.GetDeployment() != "local" ||
		last.GetProvider() != "openai" || last.GetDeployment() != "local" || last.GetCostMicros() != 55 {
		t.Fatalf("gRPC stream's first chunk %v, last %v: want openai/local, 55 micro-dollars", first, last)
	}

	// Six calls, each 12 input + 30 cached + 7 output tokens: 12×1 +
	// 30×0.5 + 7×4 = 55 micro-dollars each.
	var c gateway.Counters
	waitFor(t, 5*time.Second, "the counters", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/gateway/usage", testToken, "")
		_ = json.Unmarshal([]byte(body), &c)
		return c.Total.Calls == 6
	})
	if c.Total.Micros != 6*55 || c.Total.Usage.CachedInput != 180 || c.Total.Usage.Input != 72 || c.Sessions["billing-team/maria"].Micros != 55 || c.Sessions["billing-team"].Calls != 5 {
		t.Fatalf("counters %+v", c)
	}
	day := time.Now().UTC().Format(time.DateOnly)
	if c.Days[day].Micros != 330 {
		t.Fatalf("today's counter %+v", c.Days)
	}
	_, m := adminCall(t, a, "GET", "/metrics", "", "")
	for _, want := range []string{"stickyd_gateway_cost_dollars_total 0.00033", "stickyd_gateway_calls_total 6",
		`stickyd_gateway_tokens_total{kind="cached_input"} 180`, `stickyd_gateway_concurrency_limit{model="small"} 4`} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// The gateway across three servers: the model's limit holds for the
// aggregate (the provider never sees more than 3 at once) while 1,000
// submitted calls arrive through every server; a follower's OpenAI-style
// call is forwarded to the leader; the leader is SIGKILLed mid-queue, and
// after the election every call ends done or explicitly rejected, and none
// ran twice (the provider counts each one).
func TestGatewayClusterLimitAndDurability(t *testing.T) {
	const calls, limit = 1000, 3
	p := newProvider(t, 5*time.Millisecond)
	// The new leader hands the dead one's share on once the calls it ran
	// must have ended (call_timeout): 10 s here, not the default 2 min.
	ps, leader, gwAddrs := startGatewayCluster(t, p, limit, "  call_timeout = \"10s\"\n", "      price {\n        input  = 1\n        output = 4\n      }\n")
	follower := (leader + 1) % 3

	// A follower forwards a synchronous call to the leader.
	cfg := openai.DefaultConfig("")
	cfg.BaseURL = "http://" + gwAddrs[follower] + "/v1"
	resp, err := openai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "small",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "through a follower"}}})
	if err != nil || resp.Choices[0].Message.Content != "echo: through a follower" {
		t.Fatalf("a follower's call: %+v %v", resp, err)
	}

	// 1,000 calls submitted through the three servers.
	ids := make([]string, calls)
	var wg sync.WaitGroup
	var subErr atomic.Value
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"small","messages":[{"role":"user","content":"call-%04d"}],"idempotency_key":"k-%04d"}`, i, i)
			r, err := http.Post("http://"+gwAddrs[i%3]+"/v1/gateway/requests", "application/json", strings.NewReader(body))
			if err != nil {
				subErr.Store(err)
				return
			}
			defer r.Body.Close()
			var sub struct {
				ID string `json:"id"`
			}
			_ = json.NewDecoder(r.Body).Decode(&sub)
			if r.StatusCode != http.StatusAccepted || sub.ID == "" {
				subErr.Store(fmt.Errorf("submit %d: HTTP %d", i, r.StatusCode))
			}
			ids[i] = sub.ID
		}()
	}
	wg.Wait()
	if err, _ := subErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	// Kill the leader while the queue runs.
	waitFor(t, 30*time.Second, "some calls to run", func() bool { return p.count("call-0100") > 0 || totalCalls(p) >= 100 })
	if err := ps[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-ps[leader].exited
	states := map[gateway.JobState]int{}
	waitFor(t, 3*time.Minute, "every call to end", func() bool {
		clear(states)
		for _, id := range ids {
			var j gateway.Job
			r, err := http.Get("http://" + gwAddrs[follower] + "/v1/gateway/requests/" + id)
			if err != nil {
				return false
			}
			err = json.NewDecoder(r.Body).Decode(&j)
			r.Body.Close()
			if err != nil {
				return false
			}
			states[j.State]++
		}
		if states[gateway.JobDone]+states[gateway.JobFailed] == calls {
			return true
		}
		t.Logf("calls by state: %v", states)
		return false
	})
	twice := 0
	p.mu.Lock()
	for _, n := range p.calls {
		if n > 1 {
			twice++
		}
	}
	p.mu.Unlock()
	if twice > 0 {
		t.Fatalf("%d calls reached the provider more than once", twice)
	}
	if peak := p.peak.Load(); peak > limit {
		t.Fatalf("the provider saw %d calls at once; the aggregate limit is %d", peak, limit)
	}
	t.Logf("%d calls: %d done, %d rejected after the leader's SIGKILL; peak %d at the provider (limit %d); none ran twice",
		calls, states[gateway.JobDone], states[gateway.JobFailed], p.peak.Load(), limit)
}

func totalCalls(p *provider) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

// A synchronous call that names an idempotency key runs once, whatever
// the transport: the OpenAI JSON call and gRPC Complete, each sent twice
// (a retry after a lost answer), reach the provider once each, are
// charged once, and the retry gets the first run's answer.
func TestGatewaySyncIdempotency(t *testing.T) {
	p := newProvider(t, 0)
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) { c.Gateway = gatewayBlock(p, 4) })
	base := "http://" + a.GatewayAddr()
	post := func() (int, string) {
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(`{"model":"small","messages":[{"role":"user","content":"once"}]}`))
		req.Header.Set("Authorization", "Bearer key-billing")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "k-json-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code1, body1 := post()
	code2, body2 := post()
	if code1 != 200 || code2 != 200 || !strings.Contains(body1, "echo: once") || !strings.Contains(body2, "echo: once") {
		t.Fatalf("answers %d %s / %d %s", code1, body1, code2, body2)
	}
	if n := p.count("once"); n != 1 {
		t.Fatalf("the provider ran the JSON call %d times, want 1", n)
	}

	_, gc := gatewayClients(t, a)
	ctx := context.Background()
	for i := range 2 {
		cr, err := gc.Complete(ctx, &gatewaypb.CompletionRequest{Model: "small", IdempotencyKey: "k-grpc-1",
			Messages: []*gatewaypb.Message{{Role: "user", Content: "grpc-once"}}})
		if err != nil || cr.GetContent() != "echo: grpc-once" || cr.GetProvider() != "openai" {
			t.Fatalf("gRPC Complete %d: %v %v", i+1, cr, err)
		}
	}
	if n := p.count("grpc-once"); n != 1 {
		t.Fatalf("the provider ran the gRPC call %d times, want 1", n)
	}
	var c gateway.Counters
	waitFor(t, 5*time.Second, "the counters", func() bool {
		_, body := adminCall(t, a, "GET", "/v1/gateway/usage", testToken, "")
		_ = json.Unmarshal([]byte(body), &c)
		return c.Total.Calls >= 2
	})
	time.Sleep(200 * time.Millisecond)
	_, body := adminCall(t, a, "GET", "/v1/gateway/usage", testToken, "")
	_ = json.Unmarshal([]byte(body), &c)
	if c.Total.Calls != 2 || c.Total.Micros != 2*55 {
		t.Fatalf("charged %d calls, %d micro-dollars; want 2 and 110", c.Total.Calls, c.Total.Micros)
	}
}

// A provider's rate limit is absorbed on every transport: during 1.5 s of
// 429 Retry-After: 1 on the only deployment, JSON, SSE, gRPC Complete and
// gRPC Stream calls wait and complete, none fails, and the deployment is
// not degraded.
func TestGatewayRateLimitAbsorbed(t *testing.T) {
	p := newProvider(t, 0)
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) { c.Gateway = gatewayBlock(p, 8) })
	httpCall, gc := gatewayClients(t, a)
	calls := map[string]func(string) error{
		"json": func(c string) error { return httpCall(c, false) },
		"sse":  func(c string) error { return httpCall(c, true) },
		"grpc-complete": func(c string) error {
			_, err := gc.Complete(context.Background(), &gatewaypb.CompletionRequest{Model: "small", Messages: []*gatewaypb.Message{{Role: "user", Content: c}}})
			return err
		},
		"grpc-stream": func(c string) error {
			st, err := gc.Stream(context.Background(), &gatewaypb.CompletionRequest{Model: "small", Messages: []*gatewaypb.Message{{Role: "user", Content: c}}})
			if err != nil {
				return err
			}
			for {
				ch, err := st.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				_ = ch
			}
		},
	}
	p.limitUntil.Store(time.Now().Add(1500 * time.Millisecond).UnixNano())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []string
	for name, do := range calls {
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := do(fmt.Sprintf("%s-%d", name, i)); err != nil {
					mu.Lock()
					failures = append(failures, name+": "+err.Error())
					mu.Unlock()
				}
			}()
		}
	}
	wg.Wait()
	if len(failures) > 0 || p.limited.Load() == 0 {
		t.Fatalf("%d of 16 calls failed behind %d 429s: %v", len(failures), p.limited.Load(), failures)
	}
	_, body := adminCall(t, a, "GET", "/v1/gateway/health", testToken, "")
	if strings.Contains(body, `"degraded":true`) {
		t.Fatalf("the 429s degraded the deployment: %s", body)
	}
}

// A graceful stop drains the gateway: calls under way when the agent is
// told to stop (JSON, SSE, gRPC) finish with their answers, and a new one
// is no longer taken.
func TestGatewayStopDrains(t *testing.T) {
	p := newProvider(t, 1500*time.Millisecond)
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) { c.Gateway = gatewayBlock(p, 8) })
	httpCall, gc := gatewayClients(t, a)
	errs := make(chan error, 3)
	go func() { errs <- httpCall("drain-json", false) }()
	go func() { errs <- httpCall("drain-sse", true) }()
	go func() {
		cr, err := gc.Complete(context.Background(), &gatewaypb.CompletionRequest{Model: "small", Messages: []*gatewaypb.Message{{Role: "user", Content: "drain-grpc"}}})
		if err == nil && cr.GetContent() != "echo: drain-grpc" {
			err = fmt.Errorf("gRPC answer %v", cr)
		}
		errs <- err
	}()
	waitFor(t, 5*time.Second, "three calls at the provider", func() bool { return p.running.Load() == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- a.Shutdown(ctx) }()
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("a call under way at the stop: %v", err)
		}
	}
	if err := <-stopped; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := httpCall("after", false); err == nil {
		t.Fatal("a call was taken after the stop")
	}
}

// The cluster-wide limit holds across a leader change: calls wait in the
// leader's queue, the leader is SIGSTOPped long enough for another to be
// elected, then resumed; the deposed leader starts none of the calls it
// still held (they go to the new leader), so the provider never sees more
// than the limit at once, and every call is answered.
func TestGatewayLimitThroughLeaderStop(t *testing.T) {
	waits(t)
	const calls, limit = 60, 4
	p := newProvider(t, 150*time.Millisecond)
	ps, leader, gwAddrs := startGatewayCluster(t, p, limit, "  queue_timeout = \"2m\"\n", "      price {\n        free = true\n      }\n")
	client := &http.Client{Timeout: 3 * time.Minute}
	var wg sync.WaitGroup
	var failed atomic.Int64
	var firstErr atomic.Value
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"small","messages":[{"role":"user","content":"stop-%02d"}]}`, i)
			r, err := client.Post("http://"+gwAddrs[leader]+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err == nil {
				b, _ := io.ReadAll(r.Body)
				r.Body.Close()
				if r.StatusCode != 200 {
					err = fmt.Errorf("HTTP %d: %s", r.StatusCode, b)
				}
			}
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		}()
	}
	waitFor(t, 10*time.Second, "the leader's calls to run", func() bool { return p.running.Load() == limit })
	if err := ps[leader].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	other := ps[(leader+1)%3]
	waitFor(t, 30*time.Second, "another leader", func() bool {
		s, ok := status(t, other)
		return ok && s.Leader != "" && s.Leader != "s"+strconv.Itoa(leader+1)
	})
	time.Sleep(time.Second)
	if err := ps[leader].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if peak := p.peak.Load(); peak > limit {
		t.Fatalf("the provider saw %d calls at once through the leader change; the limit is %d", peak, limit)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d calls failed: %v\n%s", n, calls, firstErr.Load(), lastLines(ps[leader].out.String(), 40))
	}
	t.Logf("%d calls through a SIGSTOP of the leader: peak %d at the provider (limit %d), none failed", calls, p.peak.Load(), limit)
}

// A server that stops gracefully hands its share of a model's limit back
// as it goes: the others run the whole limit at once, not after its
// calls' grace (call_timeout, 2 minutes by default) has passed. Each
// server holds at least one of the four slots while idle, so without it
// the survivors run three at most for two minutes.
func TestGatewayShareHandedBackOnStop(t *testing.T) {
	const limit = 4
	p := newProvider(t, 800*time.Millisecond)
	ps, leader, gwAddrs := startGatewayCluster(t, p, limit, "", "      price {\n        free = true\n      }\n")
	leaving, other := (leader+1)%3, (leader+2)%3
	burst := func(addr string, n int) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":"small","messages":[{"role":"user","content":"share-%02d"}]}`, i)
				r, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err == nil {
					b, _ := io.ReadAll(r.Body)
					r.Body.Close()
					if r.StatusCode != 200 {
						err = fmt.Errorf("HTTP %d: %s", r.StatusCode, b)
					}
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// The server to stop has run calls, and holds a share.
	burst(gwAddrs[leaving], 2*limit)
	if err := ps[leaving].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-ps[leaving].exited
	p.peak.Store(0)
	burst(gwAddrs[other], 3*limit)
	if peak := p.peak.Load(); peak != limit {
		t.Fatalf("after a server stopped, the others ran %d calls at once; the limit is %d", peak, limit)
	}
}

// lastLines is the end of a log, n lines at most.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// gatewayClients are a test's ways into an agent's gateway, as the key
// billing-team: an OpenAI-compatible call (JSON or SSE; an error unless
// 200 with content in its answer and no error event) and a gRPC client.
func gatewayClients(t *testing.T, a *agent.Agent) (func(content string, stream bool) error, gatewaypb.GatewayClient) {
	t.Helper()
	return gatewayClientsAt(t, a.GatewayAddr(), a.GatewayGRPCAddr())
}

// gatewayClientsAt are gatewayClients for the gateway listening on addr
// (HTTP) and grpcAddr.
func gatewayClientsAt(t *testing.T, addr, grpcAddr string) (func(content string, stream bool) error, gatewaypb.GatewayClient) {
	t.Helper()
	base := "http://" + addr
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer("key-billing")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	httpCall := func(content string, stream bool) error {
		body := fmt.Sprintf(`{"model":"small","stream":%v,"messages":[{"role":"user","content":%q}]}`, stream, content)
		req, _ := http.NewRequest("POST", base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer key-billing")
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || !strings.Contains(string(b), content) || strings.Contains(string(b), `"error"`) {
			return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
		}
		return nil
	}
	return httpCall, gatewaypb.NewGatewayClient(conn)
}

// startGatewayCluster starts three servers whose gateways serve model
// "small" on p with the cluster-wide limit; gateway and deployment are
// lines added to those blocks. It returns the servers, the leader's index
// and each one's gateway address.
func startGatewayCluster(t *testing.T, p *provider, limit int, gateway, deployment string) ([]*proc, int, []string) {
	t.Helper()
	gwAddrs := make([]string, 3)
	for i := range gwAddrs {
		gwAddrs[i] = freePort(t)
	}
	ps, leader := startClusterWith(t, 3, func(i int) string {
		return fmt.Sprintf(`
gateway {
  address      = %q
  grpc_address = %q
%s  model "small" {
    concurrency = %d
    queue_max   = 5000
    deployment "local" {
      provider = "openai"
      base_url = %q
      model    = "small-v1"
%s    }
  }
}`, gwAddrs[i], freePort(t), gateway, limit, p.srv.URL+"/v1", deployment)
	})
	return ps, leader, gwAddrs
}

// The usage API is exact at once on every server: after each answer, a
// follower that did not take the call already counts it (it asks the
// leader's ledger), the API key's counter included; an API key with a
// budget is refused once it has spent it, whatever session it names.
func TestGatewayUsageExactAndKeyBudget(t *testing.T) {
	p := newProvider(t, 0)
	keys := "  api_keys    = { billing = \"key-billing\", small = \"key-small\" }\n  key_budgets = { small = 0.0001 }\n"
	price := "      price {\n        input        = 1\n        cached_input = 0.5\n        output       = 4\n      }\n"
	ps, leader, gwAddrs := startGatewayCluster(t, p, 4, keys, price)
	in, reader := (leader+1)%3, (leader+2)%3
	call := func(key, session, content string) (int, string) {
		body := fmt.Sprintf(`{"model":"small","messages":[{"role":"user","content":%q}]}`, content)
		req, _ := http.NewRequest("POST", "http://"+gwAddrs[in]+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("X-Stickyd-Session", session)
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	usage := func() gateway.UsageAnswer {
		var u gateway.UsageAnswer
		_, body := adminCallAt(t, ps[reader].admin, "GET", "/v1/gateway/usage", testToken)
		if err := json.Unmarshal([]byte(body), &u); err != nil {
			t.Fatalf("usage: %v: %s", err, body)
		}
		return u
	}
	for i := range 30 {
		if code, body := call("key-billing", fmt.Sprint("s", i%3), fmt.Sprint("exact-", i)); code != 200 {
			t.Fatalf("call %d: %d %s", i, code, body)
		}
		// 12 input + 30 cached + 7 output tokens: 55 micro-dollars.
		u := usage()
		if u.Total.Calls != int64(i+1) || u.Keys["billing"].Micros != int64(55*(i+1)) || u.Source != "leader" {
			t.Fatalf("after %d answers a follower's usage says %d calls, billing %+v (source %q)", i+1, u.Total.Calls, u.Keys["billing"], u.Source)
		}
	}
	// small may spend $0.0001: two calls (0, then 55 spent before each).
	// Between them the follower has time to apply the ceiling the leader
	// wrote for the first (the whole room: it covers the follower's calls
	// too, and must not count there as held).
	for i, session := range []string{"a", "b"} {
		if i > 0 {
			time.Sleep(500 * time.Millisecond)
		}
		if code, body := call("key-small", session, fmt.Sprint("small-", i)); code != 200 {
			t.Fatalf("small's call %d: %d %s", i, code, body)
		}
	}
	code, body := call("key-small", "c", "small-over")
	if code != http.StatusTooManyRequests && code != http.StatusPaymentRequired || !strings.Contains(body, `API key \"small\" spent $0.000110 of $0.000100`) {
		t.Fatalf("small past its budget in a new session: %d %s", code, body)
	}
	if p.count("small-over") != 0 {
		t.Fatal("the call over the budget reached the provider")
	}
	if u := usage(); u.Keys["small"].Calls != 2 || u.Sessions["small/a"].Calls != 1 {
		t.Fatalf("small's counters: key %+v, sessions %+v", u.Keys["small"], u.Sessions)
	}
	// The leader held small's reservations under a ceiling it wrote to
	// the log (one entry, not one a call), and holds none once the calls
	// ended.
	if w := procMetric(t, ps[leader].admin, "stickyd_gateway_budget_ceiling_writes_total"); w < 1 || w > 2 {
		t.Errorf("the leader wrote %v entries of ceilings for small's 3 calls (want 1 or 2)", w)
	}
	if n := procMetric(t, ps[leader].admin, "stickyd_gateway_budget_ceilings"); n < 1 {
		t.Errorf("the leader keeps %v ceilings", n)
	}
	if n := procMetric(t, ps[leader].admin, "stickyd_gateway_reservations_held"); n != 0 {
		t.Errorf("the leader still holds %v reservations", n)
	}
}
