// Command gateway measures what an AI gateway adds to a call, stickyd's
// beside Portkey's open-source gateway: the same fake OpenAI-compatible
// provider (instant, or -provider-latency), the same Go client, the same
// run, every system measured at every load in turn and the whole repeated
// -rounds times, so the machine's noise falls on all of them; each figure
// is the median of the rounds.
//
// The systems (-systems):
//
//   - direct: the provider itself, the reference the others' added
//     latency is counted from;
//   - proxy: Go's own reverse proxy (net/http/httputil, streams flushed
//     as they come) in front of the provider: a floor, what relaying a
//     call costs in Go on this machine with no gateway's work at all;
//   - stickyd1: one stickyd server (raft on disk), its OpenAI-compatible
//     /v1/chat/completions;
//   - stickyd3: three servers in one raft cluster, the calls spread over
//     the three in turn;
//   - portkey: Portkey's gateway (npm @portkey-ai/gateway, installed in
//     testdata/portkey by make bench-gateway-deps), one node process;
//   - queue (not by default): one stickyd server's persisted queue, POST
//     /v1/gateway/requests then GET …?wait until done.
//
// The loads: closed loop with -concurrency callers (each sends its next
// call when the last is answered), and open loop at each of -rates calls
// per second (sent on a fixed schedule, each timed from its scheduled
// time, so a slow server cannot slow the load down). Half the calls
// (-stream) are streamed, done when their [DONE] arrives; the others are
// whole answers read to their end.
//
// CPU per call is the user and system CPU time of the system's own
// processes (stickyd's servers, all three summed; Portkey's node) over a
// cell, divided by the calls answered in it.
//
// stickyd runs with every feature of its gateway on (-features on: a
// created key under a tenant, budgets reserved and settled on every call,
// rate, token and concurrency limits, model lists, prices and counters),
// or with them off.
//
//	go run ./test/bench/gateway            # 3 rounds of 5 s per cell
//	go run ./test/bench/gateway -quick     # 1 round of 2 s per cell
//
// It prints the machine and Markdown tables on stdout, progress on
// stderr. It must stay a program that prints tables, never a timed
// assertion.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
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
	// Calls in flight each hold a socket in this process: take the hard
	// limit of open files.
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	program.Main()
}

// The systems, in the order of the tables.
var systemNames = []struct{ key, name string }{
	{"direct", "direct (the provider)"},
	{"proxy", "Go reverse proxy (the floor)"},
	{"stickyd1", "stickyd, 1 server"},
	{"stickyd3", "stickyd, 3 servers"},
	{"portkey", "Portkey"},
	{"queue", "stickyd, 1 server, queue path"},
}

type options struct {
	systems    []string
	conc       int
	rates      []int
	duration   time.Duration
	pause      time.Duration
	warmup     time.Duration
	rounds     int
	stream     float64
	featuresOn bool
	latency    time.Duration
	timeout    time.Duration
	portkeyDir string
	logLevel   hclog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	f := benchkit.NewFlags("gateway", "1 round of 2 s per cell", stderr)
	o := &options{}
	systems := f.String("systems", "direct,proxy,stickyd1,stickyd3,portkey", "the systems to measure: direct, proxy, stickyd1, stickyd3, portkey, queue (direct is always measured)")
	rates := f.String("rates", "500,1000", "open-loop rates, calls per second")
	feat := f.String("features", "on", "stickyd's gateway features (keys, tenants, budgets, limits, prices): on or off")
	f.IntVar(&o.conc, "concurrency", 16, "closed-loop callers (0: no closed loop)")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "how long each cell (a system at a load) runs")
	f.DurationVar(&o.pause, "pause", time.Second, "the pause before each cell")
	f.DurationVar(&o.warmup, "warmup", 2*time.Second, "each system's warm-up at 200 calls/s before the first round")
	f.IntVar(&o.rounds, "rounds", 3, "rounds of every cell; the tables show their median")
	f.Float64Var(&o.stream, "stream", 0.5, "the share of calls streamed (0 to 1)")
	f.DurationVar(&o.latency, "provider-latency", 0, "the fake provider's latency before each answer")
	f.DurationVar(&o.timeout, "timeout", 10*time.Second, "a call's bound: past it the call is an error")
	f.StringVar(&o.portkeyDir, "portkey", defaultPortkeyDir(), "the directory Portkey is installed in (npm ci)")
	if err := f.Parse(args); err != nil {
		return nil, err
	}
	if f.QuickDefault("duration") {
		o.duration = 2 * time.Second
	}
	if f.QuickDefault("rounds") {
		o.rounds = 1
	}
	if f.QuickDefault("warmup") {
		o.warmup = time.Second
	}
	if f.QuickDefault("pause") {
		o.pause = 500 * time.Millisecond
	}
	for _, r := range benchkit.SplitList(*rates) {
		var n int
		if _, err := fmt.Sscan(r, &n); err != nil || n < 1 {
			return nil, fmt.Errorf("-rates: %q is not a positive number", r)
		}
		o.rates = append(o.rates, n)
	}
	want := map[string]bool{"direct": true}
	for _, s := range benchkit.SplitList(*systems) {
		if !slices.ContainsFunc(systemNames, func(n struct{ key, name string }) bool { return n.key == s }) {
			return nil, fmt.Errorf("-systems: %q is not one of direct, proxy, stickyd1, stickyd3, portkey, queue", s)
		}
		want[s] = true
	}
	for _, n := range systemNames {
		if want[n.key] {
			o.systems = append(o.systems, n.key)
		}
	}
	switch *feat {
	case "on":
		o.featuresOn = true
	case "off":
	default:
		return nil, fmt.Errorf("-features: %q is not on or off", *feat)
	}
	if o.stream < 0 || o.stream > 1 {
		return nil, fmt.Errorf("-stream: %v is not between 0 and 1", o.stream)
	}
	if o.rounds < 1 || o.conc < 0 || (o.conc == 0 && len(o.rates) == 0) {
		return nil, fmt.Errorf("want at least one round and one load")
	}
	var err error
	o.logLevel, err = f.LogLevel()
	return o, err
}

// system is one system under test.
type system struct {
	key, name string
	t         target
	pids      []int // its processes (none for direct)
	stickyd   *stickydCluster
}

// trips is the batches a stickyd cluster's servers have sent their
// leader (-1: not a cluster, or not read).
func (s system) trips(ctx context.Context) float64 {
	if s.stickyd == nil || len(s.stickyd.names) < 2 {
		return -1
	}
	return s.stickyd.trips(ctx)
}

func (o *options) loads() []loadSpec {
	var out []loadSpec
	if o.conc > 0 {
		out = append(out, loadSpec{name: fmt.Sprintf("C=%d", o.conc), conc: o.conc})
	}
	for _, r := range o.rates {
		out = append(out, loadSpec{name: fmt.Sprintf("%d/s", r), rate: r})
	}
	return out
}

func measure(ctx context.Context, o *options, stderr io.Writer) (_ *report, err error) {
	logDir, err := os.MkdirTemp("", "stickyd-bench-gateway-logs-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err == nil {
			os.RemoveAll(logDir)
		} else {
			fmt.Fprintf(stderr, "gateway: the peers' output is kept in %s\n", logDir)
		}
	}()
	prov, err := spawn("provider", stderr, latencyEnv+"="+o.latency.String())
	if err != nil {
		return nil, err
	}
	defer prov.stop()
	providerURL := "http://" + prov.addr + "/v1"
	r := &report{o: o, machine: benchkit.Machine(), date: time.Now().UTC(), usage: map[string]string{}}

	var one *stickydCluster
	for _, key := range o.systems {
		s := system{key: key, name: nameOf(key)}
		switch key {
		case "direct":
			s.t = target{urls: []string{providerURL + "/chat/completions"}, model: providerModel, header: http.Header{"Authorization": {"Bearer sk-bench"}}}
		case "proxy":
			fmt.Fprintln(stderr, "gateway: starting Go's reverse proxy")
			p, err := spawn("proxy", stderr, upstreamEnv+"=http://"+prov.addr)
			if err != nil {
				return nil, err
			}
			defer p.stop()
			s.pids = []int{p.pid}
			s.t = target{urls: []string{"http://" + p.addr + "/v1/chat/completions"}, model: providerModel, header: http.Header{"Authorization": {"Bearer sk-bench"}}}
		case "stickyd1", "queue":
			if one == nil {
				fmt.Fprintln(stderr, "gateway: starting stickyd, 1 server")
				if one, err = startStickyd(ctx, 1, providerURL, o.featuresOn, o.logLevel.String(), stderr); err != nil {
					return nil, err
				}
				defer one.stop()
			}
			s.stickyd, s.pids = one, one.pids()
			s.t = target{urls: []string{"http://" + one.gateways[0] + "/v1/chat/completions"}, model: "small", header: one.header}
			if key == "queue" {
				s.t = target{urls: []string{"http://" + one.gateways[0]}, model: "small", header: one.header, queue: true}
			}
		case "stickyd3":
			fmt.Fprintln(stderr, "gateway: starting stickyd, 3 servers")
			c, err := startStickyd(ctx, 3, providerURL, o.featuresOn, o.logLevel.String(), stderr)
			if err != nil {
				return nil, err
			}
			defer c.stop()
			s.stickyd, s.pids = c, c.pids()
			s.t = target{model: "small", header: c.header}
			for _, gw := range c.gateways {
				s.t.urls = append(s.t.urls, "http://"+gw+"/v1/chat/completions")
			}
		case "portkey":
			fmt.Fprintln(stderr, "gateway: starting Portkey")
			p, err := startPortkey(ctx, o.portkeyDir, providerURL, logDir)
			if err != nil {
				return nil, err
			}
			defer p.proc.stop()
			s.pids = []int{p.proc.pid}
			s.t = target{urls: []string{"http://" + p.addr + "/v1/chat/completions"}, model: providerModel, header: p.header}
			r.portkey = p.version
		}
		r.sys = append(r.sys, s)
	}

	// One client for every system: its idle connections go before the
	// servers close them (node's keep-alive is 5 s), so no call is sent
	// on a connection the server is closing.
	hc := &http.Client{
		Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: 4 * time.Second},
		Timeout:   o.timeout,
	}
	for _, s := range r.sys {
		fmt.Fprintf(stderr, "gateway: warming %s up\n", s.name)
		w := drive(ctx, hc, s.t, loadSpec{rate: 200}, o.warmup, o.stream)
		if w.errors > 0 {
			return nil, fmt.Errorf("%s: %d errors of %d calls while warming up: %s", s.name, w.errors, w.ok+w.errors, w.firstErr)
		}
	}
	// Every process of the benchmark: what the machine spent besides is
	// other processes' (the noise, reported).
	ours := []int{os.Getpid(), prov.pid}
	for _, s := range r.sys {
		for _, pid := range s.pids {
			if !slices.Contains(ours, pid) {
				ours = append(ours, pid)
			}
		}
	}
	for round := range o.rounds {
		for _, l := range o.loads() {
			// Each round starts the systems' turns one further, so no
			// system always follows the same one.
			for j := range r.sys {
				s := r.sys[(j+round)%len(r.sys)]
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				hc.CloseIdleConnections()
				time.Sleep(o.pause)
				c, err := measureCell(ctx, hc, s, l, o, ours)
				if err != nil {
					return nil, err
				}
				c.round = round
				r.cells = append(r.cells, c)
				fmt.Fprintf(stderr, "gateway: round %d, %s, %s: %d answered, %d errors, p50 %s, p99 %s, CPU %s a call; other processes: %.2f CPUs\n",
					round+1, s.name, l.name, c.out.ok, c.out.errors, benchkit.FormatDuration(c.out.p(-1, 0.5)),
					benchkit.FormatDuration(c.out.p(-1, 0.99)), cpuPerCall(c), c.others)
			}
		}
	}
	counted := map[*stickydCluster]bool{}
	for _, s := range r.sys {
		if s.stickyd == nil || counted[s.stickyd] {
			continue
		}
		counted[s.stickyd] = true
		t, err := s.stickyd.usage(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading %s's usage: %w", s.name, err)
		}
		r.usage[s.key] = fmt.Sprintf("%s counted %d calls, %d tokens in and %d out, $%.6f", s.name, t.Calls, t.Usage.Input, t.Usage.Output, float64(t.Micros)/1e6)
	}
	return r, nil
}

// measureCell runs load l on system s, and reads what CPU time its
// processes spent meanwhile and how busy processes other than ours (the
// benchmark's) kept the machine.
func measureCell(ctx context.Context, hc *http.Client, s system, l loadSpec, o *options, ours []int) (cell, error) {
	// The trips are read outside the CPU's window (a scrape of each
	// server's metrics is not a call's work).
	tripsBefore := s.trips(ctx)
	before, err := cpuTime(s.pids)
	if err != nil {
		return cell{}, err
	}
	oursBefore, err := cpuTime(ours)
	if err != nil {
		return cell{}, err
	}
	busyBefore, err := machineBusy()
	if err != nil {
		return cell{}, err
	}
	t0 := time.Now()
	out := drive(ctx, hc, s.t, l, o.duration, o.stream)
	// What the calls left to do (a stickyd server's charges go to the
	// log in batches every 20 ms) counts too.
	time.Sleep(200 * time.Millisecond)
	after, err := cpuTime(s.pids)
	if err != nil {
		return cell{}, err
	}
	oursAfter, err := cpuTime(ours)
	if err != nil {
		return cell{}, err
	}
	busyAfter, err := machineBusy()
	if err != nil {
		return cell{}, err
	}
	others := busyAfter - busyBefore - oursAfter.sub(oursBefore).total()
	elapsed := time.Since(t0)
	trips := -1.0
	if tripsBefore >= 0 {
		if t := s.trips(ctx); t >= 0 {
			trips = t - tripsBefore
		}
	}
	return cell{sys: s.key, load: l.name, out: out, cpu: after.sub(before), others: float64(others) / float64(elapsed), trips: trips}, nil
}

func nameOf(key string) string {
	for _, n := range systemNames {
		if n.key == key {
			return n.name
		}
	}
	return key
}

// roleEnv makes this program one of the benchmark's processes (spawn):
// "provider" (its latency in latencyEnv), "proxy" (its upstream in
// upstreamEnv) or "agent" (its configuration
// file in configEnv, its log level in logEnv). It prints the address it
// serves on (the agent: its gateway's) on its first line of output and
// stops at SIGTERM.
const (
	roleEnv     = "STICKYD_BENCH_GATEWAY_ROLE"
	latencyEnv  = "STICKYD_BENCH_GATEWAY_LATENCY"
	configEnv   = "STICKYD_BENCH_GATEWAY_CONFIG"
	logEnv      = "STICKYD_BENCH_GATEWAY_LOG"
	upstreamEnv = "STICKYD_BENCH_GATEWAY_UPSTREAM"
)

// serveRole is one of the benchmark's processes: it runs until SIGTERM.
func serveRole(role string, stdout, stderr io.Writer) int {
	// Before anything else: an agent's stop must not be cut short by
	// the signal's default action.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var addr string
	stop := func() {}
	switch role {
	case "provider":
		latency, _ := time.ParseDuration(os.Getenv(latencyEnv))
		ln, err := startProvider(latency)
		if err != nil {
			fmt.Fprintln(stderr, "provider:", err)
			return 1
		}
		addr, stop = ln.Addr().String(), func() { ln.Close() }
	case "proxy":
		ln, err := startProxy(os.Getenv(upstreamEnv))
		if err != nil {
			fmt.Fprintln(stderr, "proxy:", err)
			return 1
		}
		addr, stop = ln.Addr().String(), func() { ln.Close() }
	case "agent":
		level := hclog.LevelFromString(os.Getenv(logEnv))
		if level == hclog.NoLevel {
			level = hclog.Warn
		}
		log := benchkit.NewAgentLogger(level, stderr)
		cfg, err := agent.LoadConfig(os.Getenv(configEnv))
		if err != nil {
			fmt.Fprintln(stderr, "gateway agent:", err)
			return 1
		}
		a, err := benchkit.StartAgent(context.Background(), cfg, log)
		if err != nil {
			fmt.Fprintln(stderr, "gateway agent:", err)
			return 1
		}
		addr, stop = a.GatewayAddr(), func() { _ = benchkit.StopAgent(context.Background(), a) }
		role += "." + cfg.Name
	default:
		fmt.Fprintf(stderr, "%s=%q: want provider, proxy or agent\n", roleEnv, role)
		return 2
	}
	// STICKYD_BENCH_GATEWAY_CPUPROFILE=PREFIX writes a CPU profile of the
	// process's whole life to PREFIX.ROLE (an agent's: PREFIX.agent.NAME).
	if prefix := os.Getenv("STICKYD_BENCH_GATEWAY_CPUPROFILE"); prefix != "" {
		if f, err := os.Create(prefix + "." + role); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	fmt.Fprintln(stdout, addr)
	<-sig
	stop()
	return 0
}
