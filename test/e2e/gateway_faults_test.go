package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
)

// faultCluster is three servers whose gateways serve two models: "small"
// on one provider (concurrency 16, a queue of 64, queue_timeout 300 ms,
// stall_timeout 1 s, call_timeout 3 s), and "pair" on a primary and a
// backup provider.
type faultCluster struct {
	ps              []*proc
	leader          int
	gw, grpc        []string
	small, pri, bak *provider
}

func startFaultCluster(t *testing.T) *faultCluster {
	t.Helper()
	c := &faultCluster{small: newProvider(t, 0), pri: newProvider(t, 0), bak: newProvider(t, 0)}
	for range 3 {
		c.gw, c.grpc = append(c.gw, freePort(t)), append(c.grpc, freePort(t))
	}
	price := "price {\n        input        = 1\n        cached_input = 0.5\n        output       = 4\n      }"
	c.ps, c.leader = startClusterWith(t, 3, func(i int) string {
		return fmt.Sprintf(`
gateway {
  address         = %q
  grpc_address    = %q
  api_keys        = { billing-team = "key-billing" }
  queue_timeout   = "300ms"
  call_timeout    = "3s"
  retry_after_cap = "5s"
  model "small" {
    concurrency = 16
    queue_max   = 64
    deployment "local" {
      provider      = "openai"
      base_url      = %q
      model         = "small-v1"
      stall_timeout = "1s"
      %s
    }
  }
  model "pair" {
    concurrency = 8
    deployment "primary" {
      provider = "openai"
      base_url = %q
      model    = "pair-v1"
      %s
    }
    deployment "backup" {
      provider = "openai"
      base_url = %q
      model    = "pair-v1"
      %s
    }
  }
}`, c.gw[i], c.grpc[i], c.small.srv.URL+"/v1", price, c.pri.srv.URL+"/v1", price, c.bak.srv.URL+"/v1", price)
	})
	return c
}

// follower is a server that is not the leader: calls through it are
// forwarded, the harder road.
func (c *faultCluster) follower() int { return (c.leader + 1) % 3 }

// gwAnswer is what a caller learned of one call: who served it and its
// cost, or its error.
type gwAnswer struct {
	provider, deployment string
	cost                 int64
	err                  error
}

// faultCaller makes calls on every transport through server i.
type faultCaller struct {
	t    *testing.T
	base string
	gc   gatewaypb.GatewayClient
}

func (c *faultCluster) caller(t *testing.T, i int) *faultCaller {
	conn, err := grpc.NewClient(c.grpc[i], grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithPerRPCCredentials(bearer("key-billing")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &faultCaller{t: t, base: "http://" + c.gw[i], gc: gatewaypb.NewGatewayClient(conn)}
}

var transports = []string{"json", "sse", "grpc-complete", "grpc-stream", "async"}

// call sends one call of model on transport, paid from session, and
// reads who served it and its cost from the answer itself.
func (f *faultCaller) call(transport, model, session, content string, hdr ...string) gwAnswer {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	msgs := []*gatewaypb.Message{{Role: "user", Content: content}}
	switch transport {
	case "grpc-complete":
		r, err := f.gc.Complete(ctx, &gatewaypb.CompletionRequest{Model: model, Session: session, Messages: msgs})
		if err != nil {
			return gwAnswer{err: err}
		}
		return gwAnswer{provider: r.GetProvider(), deployment: r.GetDeployment(), cost: r.GetCostMicros()}
	case "grpc-stream":
		st, err := f.gc.Stream(ctx, &gatewaypb.CompletionRequest{Model: model, Session: session, Messages: msgs})
		if err != nil {
			return gwAnswer{err: err}
		}
		var a gwAnswer
		first := true
		for {
			ch, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return a
			}
			if err != nil {
				a.err = err
				return a
			}
			if first && (ch.GetProvider() == "" || ch.GetDeployment() == "") {
				return gwAnswer{err: fmt.Errorf("the first chunk names no provider: %v", ch)}
			}
			first = false
			if ch.GetDone() {
				a = gwAnswer{provider: ch.GetProvider(), deployment: ch.GetDeployment(), cost: ch.GetCostMicros()}
			}
		}
	case "async":
		body := fmt.Sprintf(`{"model":%q,"session":%q,"messages":[{"role":"user","content":%q}]}`, model, session, content)
		code, b, _ := f.post("/v1/gateway/requests", body, hdr...)
		var sub struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal([]byte(b), &sub); code != http.StatusAccepted || err != nil {
			return gwAnswer{err: fmt.Errorf("submit: %d %s", code, b)}
		}
		for {
			req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/v1/gateway/requests/"+sub.ID+"?wait=10s", nil)
			req.Header.Set("Authorization", "Bearer key-billing")
			r, err := http.DefaultClient.Do(req)
			if err != nil {
				return gwAnswer{err: err}
			}
			var j gateway.Job
			err = json.NewDecoder(r.Body).Decode(&j)
			r.Body.Close()
			switch {
			case err != nil:
				return gwAnswer{err: err}
			case j.State == gateway.JobDone && j.Response != nil:
				return gwAnswer{provider: j.Response.Provider, deployment: j.Response.Deployment, cost: j.Response.CostMicros}
			case j.State == gateway.JobFailed || j.State == gateway.JobCancelled:
				return gwAnswer{err: fmt.Errorf("job %s: %s (%s)", j.State, j.Error, j.ErrorKind)}
			}
		}
	}
	stream := transport == "sse"
	body := fmt.Sprintf(`{"model":%q,"stream":%v,"messages":[{"role":"user","content":%q}]}`, model, stream, content)
	code, b, r := f.post("/v1/chat/completions", body, append([]string{"X-Stickyd-Session", session}, hdr...)...)
	if code != http.StatusOK {
		return gwAnswer{err: fmt.Errorf("HTTP %d: %s", code, b)}
	}
	if stream && strings.Contains(b, `"error"`) {
		return gwAnswer{err: fmt.Errorf("the stream failed: %s", b)}
	}
	var meta struct {
		Stickyd struct {
			Provider   string `json:"provider"`
			Deployment string `json:"deployment"`
			CostMicros int64  `json:"cost_micros"`
		} `json:"stickyd"`
	}
	payload := b
	if stream {
		payload = ""
		sc := bufio.NewScanner(strings.NewReader(b))
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(line, `"stickyd"`) {
				payload = line
			}
		}
	}
	if err := json.Unmarshal([]byte(payload), &meta); err != nil {
		return gwAnswer{err: fmt.Errorf("no stickyd object in the answer: %s", b)}
	}
	cost := r.Header.Get("X-Stickyd-Cost-Micros")
	if stream {
		cost = r.Trailer.Get("X-Stickyd-Cost-Micros")
	}
	if cost != fmt.Sprint(meta.Stickyd.CostMicros) || r.Header.Get("X-Stickyd-Provider") != meta.Stickyd.Provider ||
		r.Header.Get("X-Stickyd-Deployment") != meta.Stickyd.Deployment {
		return gwAnswer{err: fmt.Errorf("headers %v, trailer %v disagree with the body's %+v", r.Header, r.Trailer, meta.Stickyd)}
	}
	return gwAnswer{provider: meta.Stickyd.Provider, deployment: meta.Stickyd.Deployment, cost: meta.Stickyd.CostMicros}
}

// post sends body with the key and the header pairs hdr, and returns the
// status, the whole body (trailers read) and the response.
func (f *faultCaller) post(path, body string, hdr ...string) (int, string, *http.Response) {
	req, _ := http.NewRequest("POST", f.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer key-billing")
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	r, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, err.Error(), nil
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b), r
}

// usage reads the counters from server i.
func (c *faultCluster) usage(t *testing.T, i int) gateway.UsageAnswer {
	t.Helper()
	var u gateway.UsageAnswer
	_, body := adminCallAt(t, c.ps[i].admin, "GET", "/v1/gateway/usage", testToken)
	if err := json.Unmarshal([]byte(body), &u); err != nil {
		t.Fatalf("usage: %v: %s", err, body)
	}
	return u
}

// The gateway under its providers' faults, on a real three-server cluster,
// through every transport (OpenAI JSON and SSE, gRPC Complete and Stream,
// async REST), each call sent to a follower (forwarded to the leader):
// every item of the faults it was found failing.
func TestGatewayFaults(t *testing.T) {
	waits(t)
	c := startFaultCluster(t)
	f := c.caller(t, c.follower())
	each := func(t *testing.T, n int, model, session, prefix string) []gwAnswer {
		var mu sync.Mutex
		var out []gwAnswer
		var wg sync.WaitGroup
		for _, tr := range transports {
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := f.call(tr, model, session, fmt.Sprintf("%s-%s-%d", prefix, tr, i))
					if a.err != nil {
						a.err = fmt.Errorf("%s: %w", tr, a.err)
					}
					mu.Lock()
					out = append(out, a)
					mu.Unlock()
				}()
			}
		}
		wg.Wait()
		return out
	}
	failures := func(as []gwAnswer) []string {
		var errs []string
		for _, a := range as {
			if a.err != nil {
				errs = append(errs, a.err.Error())
			}
		}
		return errs
	}

	t.Run("every answer names its server and cost", func(t *testing.T) {
		as := each(t, 4, "small", "named", "named")
		if errs := failures(as); len(errs) > 0 {
			t.Fatalf("%d of %d calls failed: %v", len(errs), len(as), errs)
		}
		for _, a := range as {
			// 12 input + 30 cached + 7 output tokens: 55 micro-dollars.
			if a.provider != "openai" || a.deployment != "local" || a.cost != 55 {
				t.Fatalf("an answer named %+v; every one must name openai/local and cost 55", a)
			}
		}
	})

	t.Run("a rate limit shorter than the cap is absorbed on every transport", func(t *testing.T) {
		c.small.limitUntil.Store(time.Now().Add(1500 * time.Millisecond).UnixNano())
		as := each(t, 3, "small", "limited", "limited")
		if errs := failures(as); len(errs) > 0 || c.small.limited.Load() == 0 {
			t.Fatalf("%d of %d calls failed behind %d 429s: %v", len(errs), len(as), c.small.limited.Load(), errs)
		}
		_, body := adminCallAt(t, c.ps[c.follower()].admin, "GET", "/v1/gateway/health", testToken)
		if strings.Contains(body, `"degraded":true`) {
			t.Fatalf("the 429s degraded the deployment: %s", body)
		}
	})

	t.Run("accepted async calls wait their turn", func(t *testing.T) {
		// 64 calls of 400 ms through 16 slots: 1.6 s, five times the
		// queue_timeout.
		c.small.hold.Store(int64(400 * time.Millisecond))
		defer c.small.hold.Store(0)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for i := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a := f.call("async", "small", "queued", fmt.Sprint("queued-", i)); a.err != nil {
					errs <- a.err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("an accepted call failed: %v", err)
		}
		if peak := c.small.peak.Load(); peak > 16 {
			t.Fatalf("the provider saw %d calls at once; the limit is 16", peak)
		}
	})

	t.Run("an idempotency key runs a call once", func(t *testing.T) {
		before := c.usage(t, c.leader).Sessions["billing-team/replayed"].Calls
		for _, tr := range []string{"json", "async"} {
			content := "replayed-" + tr
			var wg sync.WaitGroup
			for range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if a := f.call(tr, "small", "replayed", content, "Idempotency-Key", "key-"+tr); a.err != nil {
						t.Errorf("%s replay: %v", tr, a.err)
					}
				}()
			}
			wg.Wait()
			if n := c.small.count(content); n != 1 {
				t.Fatalf("%s: the provider ran the call %d times for 3 sends of one key", tr, n)
			}
		}
		if n := c.usage(t, c.leader).Sessions["billing-team/replayed"].Calls - before; n != 2 {
			t.Fatalf("%d charges for two keys", n)
		}
	})

	t.Run("a primary that fails while its health check passes is not readmitted over and over", func(t *testing.T) {
		c.pri.fail500.Store(true)
		defer c.pri.fail500.Store(false)
		deadline := time.Now().Add(7 * time.Second)
		var sent, failed int
		for time.Now().Before(deadline) {
			sent++
			if a := f.call("json", "pair", "flap", fmt.Sprint("flap-", sent)); a.err != nil || a.deployment != "backup" {
				failed++
			}
			time.Sleep(20 * time.Millisecond)
		}
		// Ten outcomes fill the window and degrade it; the readmission
		// after 5 s is a trial that one failure ends.
		if failed > 0 || c.pri.failed.Load() > 12 {
			t.Fatalf("of %d calls %d failed or went elsewhere than the backup; the failing primary took %d", sent, failed, c.pri.failed.Load())
		}
		t.Logf("%d calls in 7 s, all answered by the backup; the failing primary took %d", sent, c.pri.failed.Load())
	})

	t.Run("streams cut midway degrade their deployment and are charged what was reported", func(t *testing.T) {
		c.bak.cut.Store(true) // the primary is degraded from the last test: the backup serves
		before := c.usage(t, c.leader).Sessions["billing-team/cut"]
		var cut int
		for i := range 5 {
			if a := f.call("sse", "pair", "cut", fmt.Sprint("cut-", i)); a.err != nil {
				cut++
			}
		}
		c.bak.cut.Store(false)
		// Three in a row degrade the backup; with both degraded, the
		// gateway still tries both (nothing answers otherwise).
		if cut < 3 {
			t.Fatalf("only %d of 5 cut streams failed", cut)
		}
		_, body := adminCallAt(t, c.ps[c.follower()].admin, "GET", "/v1/gateway/health", testToken)
		var h map[string]gateway.ModelHealth
		_ = json.Unmarshal([]byte(body), &h)
		if !h["pair"].Deployments["backup"].Degraded {
			t.Fatalf("after %d cut streams the backup is not degraded: %s", cut, body)
		}
		// Each cut stream is charged what the provider reported before the
		// cut: 12 input, 30 cached, 2 output tokens, 12 + 15 + 8 = 35; the
		// others (served by the primary, readmitted) 55.
		after := c.usage(t, c.leader).Sessions["billing-team/cut"]
		if calls, spent := after.Calls-before.Calls, after.Micros-before.Micros; calls != 5 || spent != int64(35*cut+55*(5-cut)) {
			t.Fatalf("%d cut streams of 5: charged %d calls, %d micro-dollars; want 5 calls, %d", cut, calls, spent, 35*cut+55*(5-cut))
		}
	})

	t.Run("a stalled stream and one past call_timeout end as timeouts", func(t *testing.T) {
		c.small.stall.Store(int64(20 * time.Second))
		start := time.Now()
		a := f.call("sse", "small", "slow", "stalled")
		c.small.stall.Store(0)
		if a.err == nil || !strings.Contains(a.err.Error(), "timeout") || time.Since(start) > 15*time.Second {
			t.Fatalf("a stream silent for 20 s (stall_timeout 1 s) ended after %v with %v", time.Since(start), a.err)
		}
		c.small.trickle.Store(true)
		start = time.Now()
		a = f.call("grpc-stream", "small", "slow", "trickled")
		c.small.trickle.Store(false)
		if a.err == nil || time.Since(start) > 15*time.Second {
			t.Fatalf("a stream trickling for 20 s (call_timeout 3 s) ended after %v with %v", time.Since(start), a.err)
		}
	})

	t.Run("the limit holds through a SIGKILL of the leader", func(t *testing.T) {
		c.small.peak.Store(0)
		c.small.hold.Store(int64(300 * time.Millisecond))
		var wg sync.WaitGroup
		errs := make(chan error, 80)
		for i := range 80 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if a := f.call("async", "small", "killed", fmt.Sprint("killed-", i)); a.err != nil {
					errs <- a.err
				}
			}()
		}
		waitFor(t, 10*time.Second, "calls to run", func() bool { return c.small.running.Load() == 16 })
		if err := c.ps[c.leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		close(errs)
		var interrupted int
		for err := range errs {
			// A call the dead leader had started is rejected, never run
			// twice; none fails otherwise.
			if !strings.Contains(err.Error(), gateway.FailInterrupted) {
				t.Errorf("a call failed: %v", err)
			}
			interrupted++
		}
		peak := c.small.peak.Load()
		if peak > 16 || interrupted > 16 {
			t.Fatalf("through the leader's SIGKILL the provider saw %d calls at once (limit 16); %d calls interrupted", peak, interrupted)
		}
		t.Logf("80 calls through a SIGKILL of the leader: peak %d at the provider (limit 16), %d interrupted (started by the dead leader), none run twice", peak, interrupted)
		for i := range 80 {
			if n := c.small.count(fmt.Sprint("killed-", i)); n > 1 {
				t.Fatalf("killed-%d ran %d times", i, n)
			}
		}
	})
}
