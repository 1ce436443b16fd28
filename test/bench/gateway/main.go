// Command gateway measures what the AI gateway adds to a call: an
// open-loop load (requests sent on a fixed schedule, latency measured from
// each one's scheduled time, so a slow server cannot slow the load down)
// against an instant local OpenAI-compatible provider, called directly and
// through the gateway, side by side in the same run with the same client:
//
//   - direct: POST /v1/chat/completions on the provider;
//   - gateway, slot path: the same request on the gateway's
//     OpenAI-compatible endpoint (a free slot: no queue);
//   - gateway, queue path: POST /v1/gateway/requests (the call is written
//     to the replicated queue, started and finished through raft), then
//     GET /v1/gateway/requests/{id}?wait until it is done.
//
// Each path runs at each rate (default 1000, 2000 and 5000 requests/s) for
// -duration, then the rate is raised step by step to find the highest one
// held with no error and a p99 under -slo.
//
//	go run ./test/bench/gateway            # 5 s per rate
//	go run ./test/bench/gateway -quick     # 2 s per rate, no search
//
// The load, the provider and the agent run in three processes, as in
// production (-in-process runs all in this one, where each one's garbage
// collections stop the others too).
//
// It prints the machine and a Markdown table on stdout, progress on
// stderr (with BENCH_DEBUG set, also the process's goroutines, heap and GC
// count after each run). It must stay a program that prints a table, never a timed
// assertion.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	goruntime "runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/test/internal/benchkit"
)

var program = benchkit.Program[*options, *report]{
	Name:    "gateway",
	Parse:   parseFlags,
	Measure: measure,
	Report:  printReport,
}

func main() {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(serveRole(role, os.Stdout, os.Stderr))
	}
	// Thousands of calls in flight each hold a socket in this process
	// (client, gateway and provider): take the hard limit of open files.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	program.Main()
}

type options struct {
	paths     map[string]bool
	profile   string
	memprof   string
	inProcess bool
	pin       bool
	rates     []int
	duration  time.Duration
	slo       time.Duration
	search    bool
	logLevel  hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	f := benchkit.NewFlags("gateway", "2 s per rate and no search for the highest rate", stderr)
	o := &options{}
	rates := f.String("rates", "1000,2000,5000", "request rates to measure, per second")
	paths := f.String("paths", "direct,slot,queue", "the paths to measure: direct, slot, queue")
	f.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.StringVar(&o.memprof, "memprofile", "", "write a profile of the whole run's allocations to this file")
	f.BoolVar(&o.pin, "pin", false, "give the agent process a CPU of its own (the last), the load and the provider sharing the others")
	f.BoolVar(&o.inProcess, "in-process", false, "run the provider and the agent in this process (each one's garbage collections then stop the others too) rather than in their own, as in production")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "how long each rate runs")
	f.DurationVar(&o.slo, "slo", time.Second, "the p99 a rate must stay under to count as held")
	f.BoolVar(&o.search, "search", true, "raise the rate until it is not held")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if f.QuickDefault("duration") {
		o.duration = 2 * time.Second
	}
	if f.QuickDefault("search") {
		o.search = false
	}
	for _, r := range benchkit.SplitList(*rates) {
		var n int
		if _, err := fmt.Sscan(r, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", r)
		}
		o.rates = append(o.rates, n)
	}
	o.paths = map[string]bool{}
	for _, p := range benchkit.SplitList(*paths) {
		if p != "direct" && p != "slot" && p != "queue" {
			return nil, fmt.Errorf("-paths: %q is not one of direct, slot, queue", p)
		}
		o.paths[p] = true
	}
	if !o.paths["direct"] {
		return nil, errors.New("-paths: direct is the reference and must be measured")
	}
	var err error
	o.logLevel, err = f.LogLevel()
	return o, err
}

// run is one path at one rate.
type run struct {
	path     string
	rate     int
	sent     int
	errors   int
	firstErr string
	p50, p99 time.Duration
}

type report struct {
	o     *options
	runs  []run
	held  map[string]int
	extra map[string]string
}

func measure(ctx context.Context, o *options, stderr io.Writer) (*report, error) {
	var providerAddr, gwAddr string
	if o.inProcess {
		provider, err := startProvider()
		if err != nil {
			return nil, err
		}
		defer provider.Close()
		providerAddr = provider.Addr().String()
		addr, stop, err := startGatewayAgent(ctx, "http://"+providerAddr+"/v1", benchkit.NewAgentLogger(o.logLevel, stderr))
		if err != nil {
			return nil, err
		}
		defer stop()
		gwAddr = addr
	} else {
		// Three processes, as in production: the load, the provider and
		// the agent, each with its own heap and collections.
		var agentEnv []string
		if o.pin && goruntime.NumCPU() > 1 {
			last := goruntime.NumCPU() - 1
			var set unix.CPUSet
			for i := range last {
				set.Set(i)
			}
			// This process and the provider (started after) on the
			// others; the agent moves itself to the last.
			for _, t := range append(threads(), 0) {
				_ = unix.SchedSetaffinity(t, &set)
			}
			agentEnv = append(agentEnv, roleEnv+"_CPU="+fmt.Sprint(last))
		}
		addr, stop, err := spawn("provider", stderr)
		if err != nil {
			return nil, err
		}
		defer stop()
		providerAddr = addr
		addr, stop, err = spawn("agent", stderr, append(agentEnv, providerEnv+"=http://"+providerAddr+"/v1", logEnv+"="+o.logLevel.String())...)
		if err != nil {
			return nil, err
		}
		defer stop()
		gwAddr = addr
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConns: 20000, MaxIdleConnsPerHost: 20000, IdleConnTimeout: time.Minute}, Timeout: 30 * time.Second}
	body := `{"model":"small","messages":[{"role":"user","content":"hello"}]}`
	all := []struct {
		key  string
		name string
		do   func(ctx context.Context) error
	}{
		{"direct", "direct", func(ctx context.Context) error {
			return post(ctx, client, "http://"+providerAddr+"/v1/chat/completions", body, http.StatusOK, nil)
		}},
		{"slot", "gateway, slot path", func(ctx context.Context) error {
			return post(ctx, client, "http://"+gwAddr+"/v1/chat/completions", body, http.StatusOK, nil)
		}},
		{"queue", "gateway, queue path", func(ctx context.Context) error {
			var sub struct {
				ID string `json:"id"`
			}
			if err := post(ctx, client, "http://"+gwAddr+"/v1/gateway/requests", body, http.StatusAccepted, &sub); err != nil {
				return err
			}
			var j gateway.Job
			for j.State != gateway.JobDone {
				if err := get(ctx, client, "http://"+gwAddr+"/v1/gateway/requests/"+sub.ID+"?wait=30s", &j); err != nil {
					return err
				}
				if j.State == gateway.JobFailed || j.State == gateway.JobCancelled {
					return fmt.Errorf("call %s %s: %s", sub.ID, j.State, j.Error)
				}
			}
			return nil
		}},
	}
	paths := all[:0:0]
	for _, p := range all {
		if o.paths[p.key] {
			paths = append(paths, p)
		}
	}
	if o.profile != "" {
		f, err := os.Create(o.profile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	if o.memprof != "" {
		goruntime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(o.memprof); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	r := &report{o: o, held: map[string]int{}, extra: map[string]string{}}
	// The fixed rates first, every path at each rate in turn; then, per
	// path, the search for the highest rate held, the gateway's paths
	// before the direct one (an overload must not leave the process
	// short of sockets for the paths after it). Each run starts from
	// fresh connections after a pause.
	measureOne := func(name string, do func(context.Context) error, rate int) (run, error) {
		client.CloseIdleConnections()
		time.Sleep(time.Second)
		fmt.Fprintf(stderr, "gateway: %s at %d/s for %s\n", name, rate, o.duration)
		res, err := load(ctx, do, rate, o.duration)
		res.path = name
		if os.Getenv("BENCH_DEBUG") != "" {
			var ms goruntime.MemStats
			goruntime.ReadMemStats(&ms)
			fmt.Fprintf(stderr, "gateway: after %s at %d/s: %d goroutines, heap %d MB, %d GCs\n", name, rate, goruntime.NumGoroutine(), ms.HeapAlloc>>20, ms.NumGC)
		}
		return res, err
	}
	for _, p := range paths {
		if _, err := load(ctx, p.do, 200, time.Second); err != nil { // warm up
			return nil, err
		}
	}
	for _, rate := range o.rates {
		for _, p := range paths {
			res, err := measureOne(p.name, p.do, rate)
			if err != nil {
				return nil, err
			}
			r.runs = append(r.runs, res)
			if res.errors == 0 && res.p99 < o.slo {
				r.held[p.name] = max(r.held[p.name], rate)
			}
		}
	}
	if o.search {
		// The gateway's paths before the direct one (first in paths).
		for i := range paths {
			p := paths[(i+1)%len(paths)]
			for rate := o.rates[len(o.rates)-1] + 1000; rate <= 10000; rate += 1000 {
				if r.held[p.name] < rate-1000 {
					break
				}
				res, err := measureOne(p.name+" (search)", p.do, rate)
				if err != nil {
					return nil, err
				}
				if res.errors > 0 || res.p99 >= o.slo {
					r.extra[p.name] = fmt.Sprintf("%d/s: %d errors of %d, p99 %s", rate, res.errors, res.sent, benchkit.FormatDuration(res.p99))
					break
				}
				r.held[p.name] = rate
			}
		}
	}
	return r, nil
}

// load sends rate requests per second for d on a fixed schedule, each in
// its own goroutine, and measures each from its scheduled time.
func load(ctx context.Context, do func(context.Context) error, rate int, d time.Duration) (run, error) {
	res := run{rate: rate}
	n := int(float64(rate) * d.Seconds())
	lat := make([]time.Duration, n)
	var errs atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := do(ctx); err != nil {
				errs.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				lat[i] = -1
				return
			}
			lat[i] = time.Since(at)
		}()
	}
	wg.Wait()
	res.sent, res.errors = n, int(errs.Load())
	if s, ok := firstErr.Load().(string); ok {
		res.firstErr = s
	}
	ok := slices.DeleteFunc(lat, func(d time.Duration) bool { return d < 0 })
	slices.Sort(ok)
	if len(ok) > 0 {
		res.p50, res.p99 = benchkit.Percentile(ok, 0.50), benchkit.Percentile(ok, 0.99)
	}
	return res, nil
}

func post(ctx context.Context, c *http.Client, url, body string, want int, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(c, req, want, out)
}

func get(ctx context.Context, c *http.Client, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	return do(c, req, http.StatusOK, out)
}

func do(c *http.Client, req *http.Request, want int, out any) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != want {
		return fmt.Errorf("HTTP %d: %.200s", resp.StatusCode, b)
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// startProvider serves an instant OpenAI-compatible answer.
func startProvider() (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	answer := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"small-v1","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintln(os.Stderr, "provider:", err)
		}
	}()
	return ln, nil
}

func printReport(w io.Writer, o *options, r *report) {
	fmt.Fprintf(w, "AI gateway overhead: open-loop load, instant local OpenAI-compatible provider, %s per rate\n", o.duration)
	fmt.Fprintf(w, "machine: %s\n\n", benchkit.Machine())
	direct := map[int]run{}
	for _, x := range r.runs {
		if x.path == "direct" {
			direct[x.rate] = x
		}
	}
	fmt.Fprintln(w, "| path | rate /s | sent | errors | p50 | p99 | added p50 | added p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, x := range r.runs {
		added50, added99 := "—", "—"
		if d, ok := direct[x.rate]; ok && x.path != "direct" {
			added50, added99 = benchkit.FormatDuration(x.p50-d.p50), benchkit.FormatDuration(x.p99-d.p99)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %s | %s | %s | %s |\n", x.path, x.rate, x.sent, x.errors,
			benchkit.FormatDuration(x.p50), benchkit.FormatDuration(x.p99), added50, added99)
	}
	fmt.Fprintln(w)
	for _, p := range []string{"direct", "gateway, slot path", "gateway, queue path"} {
		line := fmt.Sprintf("highest rate held (0 errors, p99 < %s): %s: %d/s", o.slo, p, r.held[p])
		if e := r.extra[p]; e != "" {
			line += " (next step " + e + ")"
		}
		fmt.Fprintln(w, line)
	}
	for _, x := range r.runs {
		if x.firstErr != "" {
			fmt.Fprintf(w, "first error of %s at %d/s: %s\n", x.path, x.rate, x.firstErr)
		}
	}
}

// roleEnv makes this program one of the benchmark's processes (spawn):
// "provider" or "agent" (whose provider's URL is in providerEnv, its log
// level in logEnv). It prints the address it serves on its first line of
// output and stops at SIGTERM.
const (
	roleEnv     = "STICKYD_BENCH_GATEWAY_ROLE"
	providerEnv = "STICKYD_BENCH_GATEWAY_PROVIDER"
	logEnv      = "STICKYD_BENCH_GATEWAY_LOG"
)

// startGatewayAgent starts a server agent whose gateway serves model
// "small" on the provider, and returns its gateway's address.
func startGatewayAgent(ctx context.Context, providerURL string, log hclog.Logger) (string, func(), error) {
	g, err := benchkit.CounterGroup(benchkit.ModeInProcess, 1)
	if err != nil {
		return "", nil, err
	}
	cfg := benchkit.AgentConfig(log, g)
	dir, err := os.MkdirTemp("", "stickyd-bench-gateway-")
	if err != nil {
		return "", nil, err
	}
	// A data dir: raft on disk (BoltDB, fsync), as in production.
	cfg.DataDir = dir
	cfg.Server = &agent.ServerConfig{RaftAddr: "127.0.0.1:0"}
	cfg.Gateway = &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0", QueueTimeout: "30s",
		Models: []*agent.GatewayModel{{Name: "small", Concurrency: 4096, QueueMax: 100000, Deployments: []*agent.GatewayDeployment{{
			Name: "local", Provider: "openai", BaseURL: providerURL, Model: "small-v1",
			Price: &gateway.Price{Input: 1, Output: 4}}}}}}
	a, err := benchkit.StartAgent(ctx, cfg, log)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return a.GatewayAddr(), func() {
		_ = benchkit.StopAgent(context.Background(), a)
		os.RemoveAll(dir)
	}, nil
}

// serveRole is one of the benchmark's processes: it runs until SIGTERM.
func serveRole(role string, stdout, stderr io.Writer) int {
	var addr string
	stop := func() {}
	switch role {
	case "provider":
		ln, err := startProvider()
		if err != nil {
			fmt.Fprintln(stderr, "provider:", err)
			return 1
		}
		addr, stop = ln.Addr().String(), func() { ln.Close() }
	case "agent":
		level := hclog.LevelFromString(os.Getenv(logEnv))
		if level == hclog.NoLevel {
			level = hclog.Warn
		}
		var err error
		addr, stop, err = startGatewayAgent(context.Background(), os.Getenv(providerEnv), benchkit.NewAgentLogger(level, stderr))
		if err != nil {
			fmt.Fprintln(stderr, "gateway agent:", err)
			return 1
		}
	default:
		fmt.Fprintf(stderr, "%s=%q: want provider or agent\n", roleEnv, role)
		return 2
	}
	// STICKYD_BENCH_GATEWAY_CPUPROFILE=PREFIX writes a CPU profile of the
	// process's whole life to PREFIX.ROLE.
	if prefix := os.Getenv(roleEnv + "_CPUPROFILE"); prefix != "" {
		if f, err := os.Create(prefix + "." + role); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	if cpu := os.Getenv(roleEnv + "_CPU"); cpu != "" {
		var n int
		fmt.Sscan(cpu, &n)
		pinTo(n)
	}
	fmt.Fprintln(stdout, addr)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	stop()
	return 0
}

// spawn runs this program as one of the benchmark's processes, with env
// added to its environment, and returns the address it serves on.
func spawn(role string, stderr io.Writer, env ...string) (string, func(), error) {
	exe, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting the %s process: %w", role, err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return "", nil, fmt.Errorf("the %s process did not start: %w", role, err)
	}
	return strings.TrimSpace(line), func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}, nil
}

// pinTo keeps this process's threads on CPU n.
func pinTo(n int) {
	var set unix.CPUSet
	set.Set(n)
	_ = unix.SchedSetaffinity(0, &set)
	// Every thread: the ones already started keep their own mask.
	for _, t := range threads() {
		_ = unix.SchedSetaffinity(t, &set)
	}
}

func threads() []int {
	ents, _ := os.ReadDir("/proc/self/task")
	var out []int
	for _, e := range ents {
		var t int
		if _, err := fmt.Sscan(e.Name(), &t); err == nil {
			out = append(out, t)
		}
	}
	return out
}
