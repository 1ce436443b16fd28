package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// The prompt's estimate counts every byte of text as a token (at least
// as many as any byte-level tokenizer makes), the overheads, images at
// their ceiling, and a caller's own body at its bytes, images as images.
func TestEstimatePrompt(t *testing.T) {
	text := Request{Messages: []Message{{Role: "user", Content: "hello"}}}
	img := "data:image/png;base64," + strings.Repeat("A", 10_000)
	withImage := Request{Messages: []Message{{Role: "user", Parts: []Part{{Type: PartText, Text: "what is it?"}, {Type: PartImage, URL: img}}}}}
	native := withImage
	native.Extra = []string{"prediction"}
	native.Native = &Native{Shape: ShapeOpenAIChat, Body: []byte(`{"model":"m","prediction":{"type":"content","content":"` + strings.Repeat("x", 500) + `"},"messages":[{"role":"user","content":[{"type":"text","text":"what is it?"},{"type":"image_url","image_url":{"url":"` + img + `"}}]}]}`)}
	tools := Request{Messages: []Message{{Role: "assistant", ToolCalls: []ToolCall{{ID: "c1", Name: "f", Arguments: `{"a":1}`}}}, {Role: "tool", ToolCallID: "c1", Content: "42"}},
		Tools:          []Tool{{Name: "f", Description: "adds", Parameters: []byte(`{"type":"object"}`)}},
		ResponseFormat: &ResponseFormat{Type: "json_schema", Name: "out", Schema: []byte(`{"type":"object"}`)}}
	tests := []struct {
		name string
		req  Request
		want int64
	}{
		{"text", text, primingTokens + messageTokens + 4 + 5},
		{"an image", withImage, primingTokens + messageTokens + 4 + 11 + imageTokens},
		// The body's bytes, less the image's URL, plus the image.
		{"a member only its API has", native, int64(len(native.Native.Body)) - int64(len(img)) + imageTokens},
		// The fields carry all of it: the body's JSON is not counted.
		{"the caller's own body", Request{Messages: text.Messages, Native: &Native{Body: []byte(`{"messages":[{"role":"user","content":"hello"}],"model":"a-long-model-name"}`)}},
			primingTokens + messageTokens + 4 + 5},
		{"an audio part", Request{Messages: []Message{{Role: "user", Parts: []Part{{Type: "input_audio"}}}}, Native: &Native{Body: make([]byte, 5000)}}, 5000},
		// The assistant's message and its call, the tool's answer, the
		// tool, the response format.
		{"tools", tools, primingTokens + (messageTokens + 9) + (messageTokens + 2 + 1 + 7) + (messageTokens + 4 + 2 + 2) + (messageTokens + 1 + 4 + 17) + (11 + 3 + 17)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EstimatePrompt(tt.req); got != tt.want {
				t.Fatalf("EstimatePrompt = %d, want %d", got, tt.want)
			}
		})
	}
	if n := outputBound(Request{MaxTokens: 100, MaxCompletionTokens: 300, N: 2}, 50); n != 600 {
		t.Fatalf("output bound %d, want 600 (the larger bound, two answers)", n)
	}
	if n := outputBound(Request{}, 8192); n != 8192 {
		t.Fatalf("output bound without max_tokens %d, want the model's cap", n)
	}
	// The dearest prompt price counts: here the cache write's 1.25×.
	if w := (Price{Input: 2, CachedInput: 1, Output: 8}).worst(1000, 100); w != 1000*2.5+100*8 {
		t.Fatalf("worst %d", w)
	}
}

// FitBudgets: a budget spent whole refuses even a free call; one whose
// reservations leave no room for the worst case refuses, saying what is
// held; the figure itself fits.
func TestFitBudgets(t *testing.T) {
	b := []Budget{{Scope: Scope{Kind: gatewaywire.ScopeKey, Name: "k"}, Limit: 1_000_000, Label: `API key "k"`}}
	at := func(spent, held int64) func(Scope) (int64, int64) {
		return func(Scope) (int64, int64) { return spent, held }
	}
	tests := []struct {
		spent, held, worst int64
		want               string
	}{
		{0, 950_000, 50_000, ""},
		{0, 950_001, 50_000, `API key "k" spent $0.000000 of $1.000000, $0.950001 held by calls under way; this call may cost up to $0.050000`},
		{1_000_000, 0, 0, `API key "k" spent $1.000000 of $1.000000`},
		{400_000, 600_000, 0, `held by calls under way`},
	}
	for _, tt := range tests {
		err := FitBudgets(b, tt.worst, at(tt.spent, tt.held))
		if tt.want == "" && err != nil || tt.want != "" && (!errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("spent %d, held %d, worst %d: %v, want %q", tt.spent, tt.held, tt.worst, err, tt.want)
		}
	}
}

// keyed is an Access func: the keys and tenants of a test.
func keyed(keys map[string]Access) func(string) (Access, bool) {
	return func(k string) (Access, bool) { a, ok := keys[k]; return a, ok }
}

// The reservation math under contention: 100 calls at once against a
// key with $1 left, each $0.05 at worst and less in truth. At most 20
// run; the others are refused budget_exceeded before their provider is
// called; the key spends the sum of the true costs, at most $1; nothing
// stays held.
func TestReservationsNeverOvershoot(t *testing.T) {
	p := &fake{name: "p", hold: make(chan struct{})}
	var n atomic.Int64
	for i := range 100 {
		// True costs from $0.01 to $0.0499 (output at $10 per million).
		p.script = append(p.script, step{usage: Usage{Input: 10, Output: int64(1000 + 39*i)}})
	}
	price := Price{Input: 1, Output: 10}
	ledger := NewMemLedger()
	r := newRouter(t, Config{Ledger: ledger, Access: keyed(map[string]Access{"ci": {KeyAllowance: Allowance{BudgetMicros: 1_000_000}}}),
		Models: []Model{{Name: "m", Concurrency: 100, Deployments: []Deployment{{Name: "d", Price: price, Adapter: p}}}}})
	req := func(i int) Call {
		c := call("m", fmt.Sprint(i))
		c.Key, c.Session, c.Request.MaxTokens = "ci", "ci", 4990
		return c
	}
	if w := r.models["m"].worstCost(EstimatePrompt(req(10).Request), 4990); w > 50_000 || w < 49_900 {
		t.Fatalf("worst case %d µ$, want about $0.05", w)
	}
	var wg sync.WaitGroup
	var refused atomic.Int64
	var trueCost atomic.Int64
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := r.Complete(context.Background(), req(i))
			switch {
			case err == nil:
				trueCost.Add(resp.CostMicros)
				n.Add(1)
			case errors.Is(err, ErrBudget):
				refused.Add(1)
			default:
				t.Errorf("call %d: %v", i, err)
			}
		}()
	}
	// Every call is either running (held) or refused before the provider
	// is let go: the reservations alone stop the 21st.
	waitUntil(t, func() bool { return p.running.Load()+refused.Load() == 100 })
	if got := p.running.Load(); got != 20 {
		t.Fatalf("%d calls reached the provider with $1 left at $0.05 each, want 20", got)
	}
	close(p.hold)
	wg.Wait()
	c := ledger.Counters()
	if c.Keys["ci"].Micros > 1_000_000 || c.Keys["ci"].Micros != trueCost.Load() || n.Load()+refused.Load() != 100 {
		t.Fatalf("key spent %d (true costs %d), %d answered, %d refused", c.Keys["ci"].Micros, trueCost.Load(), n.Load(), refused.Load())
	}
	if h := ledger.Held(); len(h) != 0 {
		t.Fatalf("%d reservations still held", len(h))
	}
	// The money freed by calls cheaper than their worst case serves
	// more calls now.
	if _, err := r.Complete(context.Background(), req(100)); err != nil {
		t.Fatalf("a call with %d µ$ left: %v", 1_000_000-c.Keys["ci"].Micros, err)
	}
}

// A reservation goes when its call ends without an answer, when a stream
// ends (settled by its charge), and when a stream's caller leaves.
func TestReservationsReleased(t *testing.T) {
	many := make([]string, 100) // more than the stream's buffer: it waits for its caller
	for i := range many {
		many[i] = "x"
	}
	fail := &fake{name: "f", script: []step{{err: &ProviderError{Kind: KindBadRequest, Status: 400}}, {}, {chunks: many}}}
	ledger := NewMemLedger()
	r := newRouter(t, Config{Ledger: ledger, SessionBudget: 1_000_000,
		Models: []Model{{Name: "m", Concurrency: 4, MaxOutputTokens: 1000, Deployments: []Deployment{{Name: "d", Price: Price{Input: 1, Output: 1}, Adapter: fail}}}}})
	if _, err := r.Complete(context.Background(), call("m", "x")); err == nil {
		t.Fatal("the provider's refusal was not returned")
	}
	if len(ledger.Held()) != 0 || ledger.Counters().Total.Calls != 0 {
		t.Fatalf("after a failed call: held %+v", ledger.Held())
	}
	ch, err := r.Stream(context.Background(), call("m", "y"))
	if err != nil {
		t.Fatal(err)
	}
	drain(ch)
	if len(ledger.Held()) != 0 || ledger.Counters().Total.Calls != 1 {
		t.Fatalf("after a stream: held %+v, counters %+v", ledger.Held(), ledger.Counters().Total)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch, err = r.Stream(ctx, call("m", "z"))
	if err != nil {
		t.Fatal(err)
	}
	<-ch
	if len(ledger.Held()) != 1 {
		t.Fatalf("a stream under way holds %d reservations", len(ledger.Held()))
	}
	cancel()
	waitUntil(t, func() bool { return len(ledger.Held()) == 0 })
	if c := ledger.Counters().Total; c.Calls != 2 {
		t.Fatalf("the left stream is not charged: %+v", c)
	}
}

// A key's and a tenant's budgets reset with their period, at midnight and
// on the first of the month in the gateway's day_zone, not in UTC.
func TestPeriodicBudgetsResetInZone(t *testing.T) {
	zone, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip(err)
	}
	var mu sync.Mutex
	now := time.Date(2026, 11, 30, 18, 30, 0, 0, zone) // 23:30 UTC
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); defer mu.Unlock(); now = t }
	p := &fake{name: "p"}
	for range 20 {
		p.script = append(p.script, step{usage: Usage{Input: 1000}})
	}
	ledger := NewMemLedger()
	// A call costs $0.001; the daily key may spend $0.002, the monthly
	// tenant $0.004.
	access := map[string]Access{
		"daily":   {Tenant: "acme", KeyAllowance: Allowance{BudgetMicros: 2000, Period: gatewaywire.PeriodDay}, TenantAllowance: Allowance{BudgetMicros: 4000, Period: gatewaywire.PeriodMonth}},
		"monthly": {Tenant: "acme", TenantAllowance: Allowance{BudgetMicros: 4000, Period: gatewaywire.PeriodMonth}},
	}
	r := newRouter(t, Config{Ledger: ledger, Zone: zone, Clock: clock, Access: keyed(access),
		Models: []Model{{Name: "m", Concurrency: 2, Deployments: []Deployment{{Name: "d", Price: Price{Input: 1}, Adapter: p}}}}})
	do := func(key string) error {
		c := call("m", key)
		c.Key, c.Session = key, key
		_, err := r.Complete(context.Background(), c)
		return err
	}
	for range 2 {
		if err := do("daily"); err != nil {
			t.Fatal(err)
		}
	}
	if err := do("daily"); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), `API key "daily" spent $0.002000 of $0.002000 today`) {
		t.Fatalf("the third call of the day: %v", err)
	}
	set(now.Add(time.Hour)) // 00:30 UTC, still the 30th in New York
	if err := do("daily"); !errors.Is(err, ErrBudget) {
		t.Fatalf("past midnight in UTC, not in the zone: %v", err)
	}
	set(time.Date(2026, 12, 1, 0, 5, 0, 0, zone)) // a new day and month in the zone
	for range 2 {
		if err := do("daily"); err != nil {
			t.Fatalf("a new day: %v", err)
		}
	}
	for range 2 {
		if err := do("monthly"); err != nil {
			t.Fatalf("the tenant's month has room: %v", err)
		}
	}
	if err := do("monthly"); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), `tenant "acme" spent $0.004000 of $0.004000 this month`) {
		t.Fatalf("past the tenant's month: %v", err)
	}
	set(time.Date(2026, 12, 31, 23, 59, 0, 0, zone))
	if err := do("monthly"); !errors.Is(err, ErrBudget) {
		t.Fatalf("the last minute of the month: %v", err)
	}
	set(time.Date(2027, 1, 1, 0, 0, 0, 0, zone))
	if err := do("monthly"); err != nil {
		t.Fatalf("a new month: %v", err)
	}
	c := ledger.Counters()
	if c.Tenants["acme"].Months["2026-12"].Micros != 4000 || c.Tenants["acme"].Months["2027-01"].Micros != 1000 || c.KeyAccounts["daily"].Days["2026-11-30"].Calls != 2 {
		t.Fatalf("accounts: tenant %+v, daily %+v", c.Tenants["acme"], c.KeyAccounts["daily"])
	}
}

// A key's and a tenant's RPM, TPM and concurrency refuse with
// ErrRateLimit and say when to retry; a key's model list holds.
func TestKeyLimits(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 6, 10, 0, 30, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	p := &fake{name: "p"}
	access := map[string]Access{
		"rpm":  {KeyAllowance: Allowance{Limits: Limits{RPM: 2}}},
		"tpm":  {KeyAllowance: Allowance{Limits: Limits{TPM: 25}}},
		"one":  {KeyAllowance: Allowance{Limits: Limits{Concurrency: 1}, Models: []string{"m"}}},
		"a":    {Tenant: "team", TenantAllowance: Allowance{Limits: Limits{RPM: 3}, Models: []string{"m"}}},
		"b":    {Tenant: "team", TenantAllowance: Allowance{Limits: Limits{RPM: 3}, Models: []string{"m"}}},
		"open": {},
	}
	r := newRouter(t, Config{Clock: clock, Access: keyed(access), Models: []Model{
		{Name: "m", Concurrency: 4, Deployments: []Deployment{{Name: "d", Price: Price{Free: true}, Adapter: p}}},
		{Name: "other", Concurrency: 4, Deployments: []Deployment{{Name: "d", Price: Price{Free: true}, Adapter: &fake{name: "o"}}}}}})
	do := func(ctx context.Context, key, model string) error {
		c := call(model, key)
		c.Key = key
		_, err := r.Complete(ctx, c)
		return err
	}
	limited := func(err error, want time.Duration, says string) {
		t.Helper()
		var le *LimitError
		if !errors.As(err, &le) || !errors.Is(err, ErrRateLimit) || le.RetryAfter != want || !strings.Contains(err.Error(), says) {
			t.Fatalf("err %v, want a rate limit saying %q with retry after %v", err, says, want)
		}
	}
	t.Run("rpm", func(t *testing.T) {
		for range 2 {
			if err := do(context.Background(), "rpm", "m"); err != nil {
				t.Fatal(err)
			}
			advance(10 * time.Second)
		}
		// The first call leaves the minute 40 s from now.
		limited(do(context.Background(), "rpm", "m"), 40*time.Second, `API key "rpm" made 2 calls in the last minute (rpm = 2)`)
		advance(40 * time.Second)
		if err := do(context.Background(), "rpm", "m"); err != nil {
			t.Fatalf("once the first call left the minute: %v", err)
		}
	})
	t.Run("tpm", func(t *testing.T) {
		// Each call: 10 input and 5 output tokens (the fake's default).
		for range 2 {
			if err := do(context.Background(), "tpm", "m"); err != nil {
				t.Fatal(err)
			}
		}
		limited(do(context.Background(), "tpm", "m"), 60*time.Second, `API key "tpm" used its tokens of the last minute (tpm = 25)`)
		advance(time.Minute)
		if err := do(context.Background(), "tpm", "m"); err != nil {
			t.Fatalf("a minute later: %v", err)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		p.mu.Lock()
		p.hold = make(chan struct{})
		p.mu.Unlock()
		done := make(chan error)
		go func() { done <- do(context.Background(), "one", "m") }()
		waitUntil(t, func() bool { return p.running.Load() == 1 })
		limited(do(context.Background(), "one", "m"), time.Second, `API key "one" has 1 calls running (concurrency = 1)`)
		p.mu.Lock()
		close(p.hold)
		p.hold = nil
		p.mu.Unlock()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := do(context.Background(), "one", "m"); err != nil {
			t.Fatalf("once the first call ended: %v", err)
		}
	})
	t.Run("tenant", func(t *testing.T) {
		for _, k := range []string{"a", "b", "a"} {
			if err := do(context.Background(), k, "m"); err != nil {
				t.Fatal(err)
			}
		}
		limited(do(context.Background(), "b", "m"), 60*time.Second, `tenant "team" made 3 calls`)
	})
	t.Run("models", func(t *testing.T) {
		for _, k := range []string{"one", "a"} {
			if err := do(context.Background(), k, "other"); !errors.Is(err, ErrModelNotAllowed) || !strings.Contains(err.Error(), `API key "`+k+`" may not call model "other"`) {
				t.Fatalf("%s calling a model outside its list: %v", k, err)
			}
		}
		if err := do(context.Background(), "open", "other"); err != nil {
			t.Fatalf("a key without a list: %v", err)
		}
	})
}

// The limiter's minute: counted second by second, and the wait says when
// enough of it has left.
func TestLimiterWindow(t *testing.T) {
	l := newLimiter()
	start := time.Unix(1_000_000, 0)
	sc := []LimitScope{{Name: "key:k", Kind: "API key", Who: "k", Limits: Limits{RPM: 3}}}
	for i := range 3 {
		end, err := l.acquire(start.Add(time.Duration(i)*20*time.Second), sc)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		end()
	}
	// At 40.5 s: the calls of 0, 20 and 40 s; the first leaves at 60 s.
	_, err := l.acquire(start.Add(40500*time.Millisecond), sc)
	var le *LimitError
	if !errors.As(err, &le) || le.RetryAfter != 20*time.Second {
		t.Fatalf("at 40.5 s: %v (retry %v), want a wait of 19.5 s rounded up to 20", err, le)
	}
	if _, err := l.acquire(start.Add(60*time.Second), sc); err != nil {
		t.Fatalf("at 60 s: %v", err)
	}
	l.addTokens(start.Add(61*time.Second), []string{"key:k", "key:unknown"}, 5)
	if w := l.by["key:k"]; w.tokens[(start.Unix()+61)%60] != 5 {
		t.Fatal("tokens not counted")
	}
}
