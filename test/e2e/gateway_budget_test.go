package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// usageProvider is an OpenAI-compatible fake whose every answer's usage
// is known: 30 prompt tokens, and the output tokens the message names
// ("out=1234"), after delay. It adds up the true cost of what it
// answered at the test's price ($1 per million input tokens, $10 per
// million output tokens).
type usageProvider struct {
	delay    time.Duration
	srv      *httptest.Server
	answered atomic.Int64
	trueCost atomic.Int64 // micro-dollars
	running  atomic.Int64
	peak     atomic.Int64
}

const promptTokens = 30

func newUsageProvider(t *testing.T, delay time.Duration) *usageProvider {
	p := &usageProvider{delay: delay}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/models" {
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"small-v1","object":"model"}]}`)
			return
		}
		var req struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
			Messages  []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		out, _ := strconv.Atoi(strings.TrimPrefix(req.Messages[0].Content, "out="))
		if req.MaxTokens > 0 {
			out = min(out, req.MaxTokens) // a provider holds to max_tokens
		}
		n := p.running.Add(1)
		defer p.running.Add(-1)
		for peak := p.peak.Load(); n > peak && !p.peak.CompareAndSwap(peak, n); peak = p.peak.Load() {
		}
		select {
		case <-time.After(p.delay):
		case <-r.Context().Done():
			return
		}
		p.answered.Add(1)
		p.trueCost.Add(promptTokens*1 + int64(out)*10)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"length"}],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
			req.Model, promptTokens, out, promptTokens+out)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// startPricedCluster starts three servers whose gateways serve model
// "small" (model's lines added to its block, max_output_tokens 8192) on
// p at its price; it returns the servers, the leader's index and each
// one's gateway address.
func startPricedCluster(t *testing.T, p *usageProvider, model string) ([]*proc, int, []string) {
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
  model "small" {
    max_output_tokens = 8192
%s
    deployment "local" {
      provider = "openai"
      base_url = %q
      model    = "small-v1"
      price {
        input  = 1
        output = 10
      }
    }
  }
}`, gwAddrs[i], freePort(t), model, p.srv.URL+"/v1")
	})
	return ps, leader, gwAddrs
}

// budgetCall is one answer as a caller saw it.
type budgetCall struct {
	status     int
	code       string // the error's code
	message    string
	cost       int64 // the answer's cost_micros
	retryAfter string
}

// gatewayPost posts a chat completion with key to the gateway at addr.
func gatewayPost(t *testing.T, addr, key, body string) budgetCall {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("calling the gateway: %v", err)
		return budgetCall{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var v struct {
		Stickyd struct {
			CostMicros int64 `json:"cost_micros"`
		} `json:"stickyd"`
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &v)
	c := budgetCall{status: resp.StatusCode, code: v.Error.Code, message: v.Error.Message, cost: v.Stickyd.CostMicros, retryAfter: resp.Header.Get("Retry-After")}
	if c.status == http.StatusOK {
		if h := resp.Header.Get("X-Stickyd-Cost-Micros"); h != "" && h != strconv.FormatInt(c.cost, 10) {
			t.Errorf("cost %d in the body, %s in the header", c.cost, h)
		}
	}
	return c
}

// keysKnownAtOnce checks that every gateway at addrs knows every key at
// its first request, however soon after its creation: a server whose
// replica has not applied a key yet (with no key yet, its gateway would
// be open and take a call with it as one without a key) catches up with
// the leader before it decides.
func keysKnownAtOnce(t *testing.T, addrs []string, keys ...string) {
	t.Helper()
	for _, addr := range addrs {
		for _, key := range keys {
			req, _ := http.NewRequest("GET", "http://"+addr+"/v1/gateway/usage", nil)
			req.Header.Set("Authorization", "Bearer "+key)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("a key created a moment ago, on %s: %d %s", addr, resp.StatusCode, b)
			}
		}
	}
}

// keyUsage reads what key has spent, as the key itself reads it on the
// gateway's listener at addr.
func keyUsage(t *testing.T, addr, key string) gateway.KeyUsage {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/gateway/usage", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var u gateway.KeyUsage
	if resp.StatusCode != 200 || json.Unmarshal(b, &u) != nil {
		t.Fatalf("a key's usage: %d %s", resp.StatusCode, b)
	}
	return u
}

// Acceptance 2 of issue 46, on three servers: 100 callers at once, spread
// over every server's gateway, against a key with $1.00 left, each call
// $0.05 at worst (its max_tokens at the price; the provider's answer
// costs less). The key's spend ends at most $1.00, every refusal says
// budget_exceeded, and the settled total is the sum of the true costs
// (what the provider's usage says), with nothing left held.
func TestGatewayBudgetNeverOvershoots(t *testing.T) {
	p := newUsageProvider(t, 400*time.Millisecond)
	ps, leader, gwAddrs := startPricedCluster(t, p, "concurrency = 200\nqueue_max = 5000")
	follower := (leader + 1) % 3

	// The key, created on a follower: $1.249150, of which five calls of
	// $0.049830 spend $0.249150, leaving $1.000000.
	code, body := adminDoAs(t, ps[follower].admin, "POST", "/v1/gateway/keys", testToken, `{"name":"budget","budget_micros":1249150}`)
	var nk gateway.NewKey
	if code != http.StatusCreated || json.Unmarshal([]byte(body), &nk) != nil || !strings.HasPrefix(nk.Secret, "sk-stickyd-") {
		t.Fatalf("creating the key: %d %s", code, body)
	}
	keysKnownAtOnce(t, gwAddrs, nk.Secret)
	const maxTokens = 4980
	call := func(i, out int) string {
		return fmt.Sprintf(`{"model":"small","max_tokens":%d,"messages":[{"role":"user","content":"out=%d"}],"user":"c%03d"}`, maxTokens, out, i)
	}
	for i := range 5 {
		if c := gatewayPost(t, gwAddrs[i%3], nk.Secret, call(i, maxTokens)); c.status != 200 || c.cost != 49_830 {
			t.Fatalf("spending call %d: %+v", i, c)
		}
	}
	u := keyUsage(t, gwAddrs[follower], nk.Secret)
	if u.Budget == nil || u.Budget.SpentMicros != 249_150 || u.Budget.LeftMicros != 1_000_000 {
		t.Fatalf("before the callers (read from the %s): %+v", u.Source, u.Budget)
	}
	before := p.trueCost.Load()

	// 100 callers at once, each asking for up to 4,980 tokens: $0.049980
	// of output and the prompt's bytes at worst, about $0.05.
	rng := rand.New(rand.NewPCG(46, 2))
	outs := make([]int, 100)
	for i := range outs {
		outs[i] = 1000 + rng.IntN(maxTokens-1000+1)
	}
	results := make([]budgetCall, 100)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i] = gatewayPost(t, gwAddrs[i%3], nk.Secret, call(100+i, outs[i]))
		}()
	}
	close(start)
	wg.Wait()

	var answered, refused int
	var answeredCost, worst int64
	for i, c := range results {
		switch {
		case c.status == http.StatusOK:
			answered++
			answeredCost += c.cost
		case c.status == http.StatusTooManyRequests && c.code == "budget_exceeded":
			refused++
			// The refusal names what this call may cost at worst.
			if _, w, ok := strings.Cut(c.message, "this call may cost up to $"); ok {
				d, _ := strconv.ParseFloat(w, 64)
				worst = max(worst, int64(d*1e6+0.5))
			}
		default:
			t.Errorf("caller %d: HTTP %d %q %s: want an answer or budget_exceeded", i, c.status, c.code, c.message)
		}
	}
	if worst == 0 || worst > 50_000 {
		t.Fatalf("the calls' worst case is $%.6f, want at most $0.05", float64(worst)/1e6)
	}
	spent := p.trueCost.Load() - before
	// The settled counters, as the leader has them, read by the key itself
	// on another server, and by the admin API.
	var settled int64
	waitFor(t, 10*time.Second, "the settled counters", func() bool {
		u = keyUsage(t, gwAddrs[(leader+2)%3], nk.Secret)
		settled = u.Total.Micros
		return settled == p.trueCost.Load() && u.Budget != nil && u.Budget.HeldMicros == 0
	})
	var all gateway.UsageAnswer
	_, body = adminCallAt(t, ps[leader].admin, "GET", "/v1/gateway/usage", testToken)
	if err := json.Unmarshal([]byte(body), &all); err != nil {
		t.Fatal(err)
	}
	t.Logf("acceptance 2: %d callers, %d answered, %d refused budget_exceeded; worst case per call $%.6f; "+
		"spent by the callers $%.6f of $1.000000 left (answers' costs $%.6f); settled total $%.6f, true costs $%.6f (provider peak %d at once)",
		len(results), answered, refused, float64(worst)/1e6, float64(spent)/1e6, float64(answeredCost)/1e6,
		float64(settled)/1e6, float64(p.trueCost.Load())/1e6, p.peak.Load())
	switch {
	case spent > 1_000_000:
		t.Fatalf("the callers spent $%.6f of $1.00 left", float64(spent)/1e6)
	case answered+refused != 100 || refused == 0 || answered < 20:
		t.Fatalf("%d answered, %d refused: with $1.00 left and $0.05 at worst, 20 at least must run and the rest be refused", answered, refused)
	case answeredCost != spent:
		t.Fatalf("the answers say $%.6f, the provider's usage $%.6f", float64(answeredCost)/1e6, float64(spent)/1e6)
	case settled != p.trueCost.Load() || all.Keys["budget"].Micros != settled || all.Keys["budget"].Calls != int64(answered+5):
		t.Fatalf("settled $%.6f (admin API %+v), true costs $%.6f", float64(settled)/1e6, all.Keys["budget"], float64(p.trueCost.Load())/1e6)
	case u.Budget.SpentMicros > u.Budget.LimitMicros:
		t.Fatalf("the key's budget %+v", u.Budget)
	}
	// Every refused call was refused before its provider was called.
	if got := p.answered.Load(); got != int64(answered+5) {
		t.Fatalf("the provider answered %d calls, the callers got %d answers", got, answered+5)
	}
}

// A key's limits and budget on the servers that are not the leader: a
// call there holds its key's limits and reserves its worst case on the
// leader in one trip, and whatever refuses it, nothing stays held. Key
// "lim" (concurrency 2, RPM 5): of four calls at once on the two
// followers two run and two are refused for its concurrency, then three
// more run and the sixth is refused for its RPM; key "poor" ($0.01 left,
// a call's worst case $0.05) is refused budget_exceeded. After each, the
// leader keeps no hold of a limit and the keys hold nothing of their
// budgets; the calls that ran are counted once.
func TestGatewayKeyLimitsOnFollowers(t *testing.T) {
	p := newUsageProvider(t, 300*time.Millisecond)
	ps, leader, gwAddrs := startPricedCluster(t, p, "concurrency = 50")
	followers := []string{gwAddrs[(leader+1)%3], gwAddrs[(leader+2)%3]}
	newKey := func(spec string) string {
		t.Helper()
		code, body := adminDoAs(t, ps[leader].admin, "POST", "/v1/gateway/keys", testToken, spec)
		var nk gateway.NewKey
		if code != http.StatusCreated || json.Unmarshal([]byte(body), &nk) != nil || nk.Secret == "" {
			t.Fatalf("creating a key %s: %d %s", spec, code, body)
		}
		return nk.Secret
	}
	lim := newKey(`{"name":"lim","concurrency":2,"rpm":5,"budget_micros":10000000}`)
	poor := newKey(`{"name":"poor","concurrency":4,"budget_micros":10000}`)
	keysKnownAtOnce(t, followers, lim, poor)
	call := `{"model":"small","max_tokens":4980,"messages":[{"role":"user","content":"out=100"}]}`
	nothingHeld := func(what string) {
		t.Helper()
		waitFor(t, 5*time.Second, what+": no hold of a limit left on the leader, nothing of a budget held", func() bool {
			return procMetric(t, ps[leader].admin, "stickyd_gateway_limit_holds") == 0 &&
				keyUsage(t, followers[0], lim).Budget.HeldMicros == 0 && keyUsage(t, followers[1], poor).Budget.HeldMicros == 0
		})
	}

	results := make([]budgetCall, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { results[i] = gatewayPost(t, followers[i%2], lim, call) })
	}
	wg.Wait()
	ran, busy := 0, 0
	for i, c := range results {
		switch {
		case c.status == http.StatusOK:
			ran++
		case c.status == http.StatusTooManyRequests && c.code == "rate_limit_exceeded" && strings.Contains(c.message, "(concurrency = 2)"):
			busy++
		default:
			t.Fatalf("call %d at once: %+v", i, c)
		}
	}
	if ran != 2 || busy != 2 {
		t.Fatalf("four calls at once with concurrency 2: %d ran, %d refused", ran, busy)
	}
	nothingHeld("after the calls at once")

	// One after the other, each call takes one trip to the leader as it
	// starts (its limits and reservation, one item) and one as it ends
	// (its charge, its tokens and the end of its hold, three items): the
	// end's items no call waits for may leave on their own when the
	// machine stalls the call for over their linger (2 ms) before its
	// charge, a trip more.
	trips := func(metric string) float64 {
		return procMetric(t, ps[(leader+1)%3].admin, metric) + procMetric(t, ps[(leader+2)%3].admin, metric)
	}
	before, itemsBefore := trips("stickyd_gateway_leader_trips_total"), trips("stickyd_gateway_leader_trip_items_total")
	for i := range 3 {
		if c := gatewayPost(t, followers[i%2], lim, call); c.status != http.StatusOK {
			t.Fatalf("call %d of the minute: %+v", 3+i, c)
		}
	}
	n, items := trips("stickyd_gateway_leader_trips_total")-before, trips("stickyd_gateway_leader_trip_items_total")-itemsBefore
	if n < 6 || n > 9 || items != 12 {
		t.Errorf("three calls took %v trips to the leader with %v items, want 6 (9 at most) with 12", n, items)
	}
	t.Logf("three calls: %v trips to the leader, %v items", n, items)
	if c := gatewayPost(t, followers[1], lim, call); c.status != http.StatusTooManyRequests || c.code != "rate_limit_exceeded" ||
		!strings.Contains(c.message, "(rpm = 5)") {
		t.Fatalf("the sixth call of the minute: %+v", c)
	}
	nothingHeld("after the RPM's refusal")

	if c := gatewayPost(t, followers[0], poor, call); c.status != http.StatusTooManyRequests || c.code != "budget_exceeded" {
		t.Fatalf("a call past its key's budget: %+v", c)
	}
	nothingHeld("after the budget's refusal")

	// A batch the leader cannot read is refused, with what was wrong.
	for _, bad := range []string{`not json`, `[{"reservation":{"micros":"ten"}}]`, `{"hold":"x"}`} {
		code, body := adminDoAs(t, ps[leader].admin, "POST", "/v1/internal/gateway/reserve", testToken, bad)
		if code != http.StatusBadRequest || !strings.Contains(body, "decoding the reservations") {
			t.Errorf("a batch %s: %d %s", bad, code, body)
		}
	}

	u := keyUsage(t, followers[1], lim)
	if u.Total.Calls != 5 || u.Total.Micros != 5*(promptTokens+100*10) || p.answered.Load() != 5 {
		t.Fatalf("lim's usage %+v, the provider answered %d: want 5 calls", u.Total, p.answered.Load())
	}
}
