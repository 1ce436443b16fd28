package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// shareProvider is an OpenAI-compatible provider that records which
// server ran each call (the deployment's X-Server header), and the calls
// running at once: exactly (peak) and sampled every 10 ms.
type shareProvider struct {
	delay   time.Duration
	running atomic.Int64
	peak    atomic.Int64
	sampled atomic.Int64 // the highest sample
	mu      sync.Mutex
	ranOn   map[string]string // call → server
	perSrv  map[string]int
	url     string
}

func newShareProvider(t *testing.T, ip string, delay time.Duration) *shareProvider {
	p := &shareProvider{delay: delay, ranOn: map[string]string{}, perSrv: map[string]int{}}
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: p}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	p.url = "http://" + ln.Addr().String() + "/v1"
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if n := p.running.Load(); n > p.sampled.Load() {
				p.sampled.Store(n)
			}
		}
	}()
	return p
}

func (p *shareProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	n := p.running.Add(1)
	defer p.running.Add(-1)
	for {
		pk := p.peak.Load()
		if n <= pk || p.peak.CompareAndSwap(pk, n) {
			break
		}
	}
	server := r.Header.Get("X-Server")
	p.mu.Lock()
	p.ranOn[req.Messages[0].Content] = server
	p.perSrv[server]++
	p.mu.Unlock()
	select {
	case <-time.After(p.delay):
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"c","object":"chat.completion","created":1,"model":%q,"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`, req.Model)
}

// Calls run where they arrive: three servers share a model's limit of 30
// (the leader leases each a share); 45 callers, 15 on each server, call
// without pause. Every answered call ran on the server it was sent to, the
// provider never sees more than 30 at once (exactly, and sampled every 10
// ms), through a server cut off from the others for 10 s (in a network
// namespace, where one can be made) and a SIGKILL of the leader; the calls
// sent to the servers that stayed up are all answered.
func TestGatewayCallsRunWhereTheyArrive(t *testing.T) {
	if raceEnabled {
		// Three servers and 45 callers for 30 s: make test runs it
		// without the race detector (the gateway's packages and its other
		// cluster tests run under it).
		t.Skip("runs without the race detector (make test's second run)")
	}
	const limit, perServer = 30, 15
	netw := newChaosNet(t)
	providerIP := "127.0.0.1"
	if netw != nil {
		providerIP = netw.hostIP
	}
	p := newShareProvider(t, providerIP, 100*time.Millisecond)
	gw := make([]string, 3)
	ps, leader := startClusterSpec(t, 3, func(i int) procSpec {
		sp := procSpec{workers: 1}
		if netw != nil {
			sp.ip = netw.hostIP
			if i == 2 {
				sp.ip, sp.netns = netw.nsIP, netw.ns
			}
		}
		gw[i] = onIP(freePort(t), sp.ip)
		sp.extra = []string{fmt.Sprintf(`
gateway {
  address      = %q
  grpc_address = %q
  call_timeout = "6s"
  queue_timeout = "1m"
  model "small" {
    concurrency = %d
    queue_max   = 5000
    deployment "local" {
      provider = "openai"
      base_url = %q
      model    = "small-v1"
      headers  = { "X-Server" = "s%d" }
      price {
        free = true
      }
    }
  }
}`, gw[i], onIP(freePort(t), sp.ip), limit, p.url, i+1)}
		return sp
	})
	client := &http.Client{Timeout: 2 * time.Minute}
	var (
		mu       sync.Mutex
		answered = make([]int, 3)
		wrong    []string
		failed   = make([]int, 3)
		firstErr = make([]string, 3)
		// While a server is killed or cut off (and for the calls that
		// overlap that time), its callers' failures are expected.
		downFrom  = make([]time.Time, 3)
		downUntil = make([]time.Time, 3)
		seq       atomic.Int64
	)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		for range perServer {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					id := fmt.Sprintf("call-%d-%d", i, seq.Add(1))
					body := fmt.Sprintf(`{"model":"small","messages":[{"role":"user","content":%q}]}`, id)
					sent := time.Now()
					r, err := client.Post("http://"+gw[i]+"/v1/chat/completions", "application/json", strings.NewReader(body))
					if err == nil {
						b, _ := io.ReadAll(r.Body)
						r.Body.Close()
						if r.StatusCode != 200 {
							err = fmt.Errorf("HTTP %d: %s", r.StatusCode, b)
						}
					}
					mu.Lock()
					switch {
					case err == nil:
						answered[i]++
						p.mu.Lock()
						if on := p.ranOn[id]; on != "s"+strconv.Itoa(i+1) {
							wrong = append(wrong, id+" ran on "+on)
						}
						p.mu.Unlock()
					case !downFrom[i].IsZero() && time.Now().After(downFrom[i]) && (downUntil[i].IsZero() || sent.Before(downUntil[i])):
					default:
						failed[i]++
						if firstErr[i] == "" {
							firstErr[i] = err.Error()
						}
					}
					mu.Unlock()
					if err != nil {
						time.Sleep(50 * time.Millisecond)
					}
				}
			}()
		}
	}
	time.Sleep(5 * time.Second)
	mu.Lock()
	steady := slicesSum(answered)
	mu.Unlock()
	t.Logf("5 s of calls on three servers: %d answered (%v by server), peak %d at the provider", steady, answered, p.peak.Load())
	time.Sleep(3 * time.Second)
	mu.Lock()
	t.Logf("the next 3 s: %.0f calls/s (the limit over the provider's 100 ms allows 300/s), %v by server", float64(slicesSum(answered)-steady)/3, answered)
	mu.Unlock()

	if netw != nil {
		mu.Lock()
		downFrom[2] = time.Now()
		mu.Unlock()
		setLink := func(state string) {
			if out, err := execIP("netns", "exec", netw.ns, "ip", "link", "set", netw.nsDev, state); err != nil {
				t.Fatalf("ip link set %s: %v: %s", state, err, out)
			}
		}
		setLink("down")
		time.Sleep(10 * time.Second)
		setLink("up")
		waitFor(t, 30*time.Second, "the cut-off server's calls to be answered again", func() bool {
			mu.Lock()
			before := answered[2]
			mu.Unlock()
			time.Sleep(time.Second)
			mu.Lock()
			defer mu.Unlock()
			return answered[2] > before
		})
		mu.Lock()
		downUntil[2] = time.Now()
		mu.Unlock()
		t.Logf("after the cut: %v answered by server, peak %d", answered, p.peak.Load())
	} else {
		t.Log("no network namespace can be made here (root and iproute2 are needed): no partition")
	}

	// SIGKILL the leader (now, whoever it is).
	if s, ok := status(t, ps[(leader+1)%3]); ok {
		for i := range ps {
			if s.Leader == "s"+strconv.Itoa(i+1) {
				leader = i
			}
		}
	}
	mu.Lock()
	downFrom[leader] = time.Now()
	mu.Unlock()
	if err := ps[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(12 * time.Second)
	cancel()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d answered in all (%v by server; the killed one was s%d), peak %d exact and %d sampled every 10 ms (limit %d); provider counts %v",
		slicesSum(answered), answered, leader+1, p.peak.Load(), p.sampled.Load(), limit, p.perSrv)
	if pk := p.peak.Load(); pk > limit || p.sampled.Load() > limit {
		t.Fatalf("the provider saw %d calls at once (sampled %d); the limit is %d", pk, p.sampled.Load(), limit)
	}
	if len(wrong) > 0 {
		t.Fatalf("%d calls ran elsewhere than where they arrived: %v", len(wrong), wrong[:min(5, len(wrong))])
	}
	for i := range 3 {
		if answered[i] == 0 {
			t.Fatalf("server s%d answered no call", i+1)
		}
		if failed[i] > 0 {
			t.Fatalf("%d calls sent to s%d, which stayed up, failed: %s", failed[i], i+1, firstErr[i])
		}
	}
}

func slicesSum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

func execIP(args ...string) ([]byte, error) {
	return exec.Command("ip", args...).CombinedOutput()
}
