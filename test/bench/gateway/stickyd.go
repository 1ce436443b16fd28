package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/api/client"
)

// stickyd's gateway as the benchmark runs it: n real server agents (this
// program re-executed with the "agent" role, each its own process with
// its raft log on disk), one raft cluster when n > 1, configured by HCL as
// an operator would write it.

// adminToken is the benchmark's agents' admin token.
const adminToken = "bench-admin-token"

// features says what a stickyd under test has on: with on, every call
// carries a created key under a tenant, reserves its worst case against
// four budgets and settles at its true cost, passes the key's and the
// tenant's rate, token and concurrency limits and their model lists, and
// is priced and counted; off, no key, no budget, a free deployment.
func features(on bool) string {
	if !on {
		return "features off: no API key, no budget, no limit but the model's concurrency (256), a free deployment (usage still counted)"
	}
	return "features on: a created API key (stored hashed) under a tenant; budgets reserved and settled on every call " +
		"(key $1,000/day, tenant $100,000/month, day $1,000,000, session $1,000,000); key and tenant RPM, TPM, concurrency " +
		"limits and model lists (set high: nothing refused); the model's concurrency 256, max_output_tokens 4096; " +
		"a price block (cost and usage counted per key, tenant, session, day and model)"
}

// stickydCluster is n running server agents.
type stickydCluster struct {
	procs    []*process
	names    []string
	admins   []string // admin API addresses, by server
	gateways []string // gateway listeners, by server
	header   http.Header
	dir      string
}

// startStickyd starts n servers whose gateway serves model "small" on the
// provider, waits for them to elect a leader and, with featuresOn,
// creates the tenant and key the calls use; it returns once a call
// through every server's gateway has been answered.
func startStickyd(ctx context.Context, n int, providerURL string, featuresOn bool, logLevel string, stderr io.Writer) (_ *stickydCluster, err error) {
	dir, err := os.MkdirTemp("", "stickyd-bench-gateway-")
	if err != nil {
		return nil, err
	}
	c := &stickydCluster{dir: dir, header: http.Header{}}
	defer func() {
		if err != nil {
			c.stop()
		}
	}()
	raft, rpc := make([]string, n), make([]string, n)
	c.admins, c.names = make([]string, n), make([]string, n)
	for i := range n {
		if c.admins[i], err = freePort(); err != nil {
			return nil, err
		}
		if raft[i], err = freePort(); err != nil {
			return nil, err
		}
		if rpc[i], err = freePort(); err != nil {
			return nil, err
		}
		c.names[i] = fmt.Sprintf("s%d", i+1)
	}
	configs := make([]string, n)
	for i := range n {
		var join []string
		for j := range n {
			if j != i {
				join = append(join, fmt.Sprintf("%q", c.admins[j]))
			}
		}
		cfg := serverConfig(c.names[i], filepath.Join(dir, c.names[i]), n, raft[i], rpc[i], join, c.admins[i], providerURL, featuresOn)
		configs[i] = filepath.Join(dir, c.names[i]+".hcl")
		if err := os.WriteFile(configs[i], []byte(cfg), 0o600); err != nil {
			return nil, err
		}
	}
	// All at once: a server of a cluster may wait for the others before
	// it is ready.
	c.procs = make([]*process, n)
	c.gateways = make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.procs[i], errs[i] = spawn("agent", stderr, configEnv+"="+configs[i], logEnv+"="+logLevel)
			if errs[i] == nil {
				c.gateways[i] = c.procs[i].addr
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	admin, err := c.leaderAdmin(ctx)
	if err != nil {
		return nil, err
	}
	if featuresOn {
		secret, err := createKey(ctx, admin)
		if err != nil {
			return nil, err
		}
		c.header.Set("Authorization", "Bearer "+secret)
	}
	// The key reaches every server's replica; its first call proves it.
	for _, gw := range c.gateways {
		if err := waitAnswered(ctx, "http://"+gw+"/v1/chat/completions", "small", c.header); err != nil {
			return nil, fmt.Errorf("stickyd server at %s: %w", gw, err)
		}
	}
	return c, nil
}

// serverConfig is server name's HCL: one of n servers, in data dir dir.
func serverConfig(name, dir string, n int, raft, rpc string, join []string, admin, providerURL string, featuresOn bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name     = %q\ndata_dir = %q\n", name, dir)
	fmt.Fprintf(&b, "server {\n  bootstrap_expect = %d\n  raft_addr = %q\n", n, raft)
	if n > 1 {
		fmt.Fprintf(&b, "  rpc_addr = %q\n  retry_join = [%s]\n", rpc, strings.Join(join, ", "))
	}
	b.WriteString("}\n")
	b.WriteString("front {\n  address = \"127.0.0.1:0\"\n}\n")
	fmt.Fprintf(&b, "admin {\n  address = %q\n  token = %q\n}\n", admin, adminToken)
	b.WriteString("group \"web\" {\n  workers = 1\n  builtin = \"counter\"\n}\n")
	b.WriteString("gateway {\n  address = \"127.0.0.1:0\"\n  grpc_address = \"127.0.0.1:0\"\n  queue_timeout = \"30s\"\n")
	if featuresOn {
		b.WriteString("  day_budget = 1000000\n  session_budget = 1000000\n")
	}
	b.WriteString("  model \"small\" {\n    concurrency = 256\n    queue_max = 100000\n")
	if featuresOn {
		b.WriteString("    max_output_tokens = 4096\n")
	}
	fmt.Fprintf(&b, "    deployment \"local\" {\n      provider = \"openai\"\n      base_url = %q\n      model = %q\n", providerURL, providerModel)
	if featuresOn {
		b.WriteString("      price {\n        input = 1\n        output = 4\n      }\n")
	} else {
		b.WriteString("      price {\n        free = true\n      }\n")
	}
	b.WriteString("    }\n  }\n}\n")
	return b.String()
}

// createKey creates tenant "bench" and its key "bench" through the
// admin API at admin, and returns the key.
func createKey(ctx context.Context, admin string) (string, error) {
	api, err := client.New(client.Config{Address: admin, Token: adminToken})
	if err != nil {
		return "", err
	}
	const rpm, tpm, conc = 10_000_000, 1_000_000_000, 100_000
	if _, err := api.CreateGatewayTenant(ctx, client.GatewayTenant{Name: "bench", BudgetMicros: 100_000 * 1_000_000, Period: "month",
		RPM: rpm, TPM: tpm, Concurrency: conc, Models: []string{"small"}}); err != nil {
		return "", fmt.Errorf("creating the tenant: %w", err)
	}
	k, err := api.CreateGatewayKey(ctx, client.GatewayKeyRequest{Name: "bench", Tenant: "bench", BudgetMicros: 1_000 * 1_000_000, Period: "day",
		RPM: rpm, TPM: tpm, Concurrency: conc, Models: []string{"small"}})
	if err != nil {
		return "", fmt.Errorf("creating the key: %w", err)
	}
	return k.Secret, nil
}

// leaderAdmin waits until the servers have a leader that counts every
// server a member, and returns its admin API's address.
func (c *stickydCluster) leaderAdmin(ctx context.Context) (string, error) {
	api, err := client.New(client.Config{Address: c.admins[0], Token: adminToken})
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := api.Status(ctx)
		if err == nil && len(st.Members) == len(c.names) {
			for i, name := range c.names {
				if st.Leader == name {
					return c.admins[i], nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no leader of %d servers within a minute (last status %+v, %v)", len(c.names), st, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// usage is what the cluster counted: calls and their cost.
func (c *stickydCluster) usage(ctx context.Context) (client.GatewayTally, error) {
	api, err := client.New(client.Config{Address: c.admins[0], Token: adminToken})
	if err != nil {
		return client.GatewayTally{}, err
	}
	u, err := api.GatewayUsage(ctx, "")
	return u.Total, err
}

// trips sums what every server's stickyd_gateway_leader_trips_total says
// (-1 if one cannot be read).
func (c *stickydCluster) trips(ctx context.Context) float64 {
	var sum float64
	for _, admin := range c.admins {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+admin+"/v1/metrics", nil)
		if err != nil {
			return -1
		}
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return -1
		}
		found := false
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(line, "stickyd_gateway_leader_trips_total "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return -1
				}
				sum += f
				found = true
			}
		}
		if !found {
			return -1
		}
	}
	return sum
}

func (c *stickydCluster) pids() []int {
	var out []int
	for _, p := range c.procs {
		if p != nil {
			out = append(out, p.pid)
		}
	}
	return out
}

// stop stops every server at once and removes their data.
func (c *stickydCluster) stop() {
	var wg sync.WaitGroup
	for _, p := range c.procs {
		if p != nil {
			wg.Add(1)
			go func() { defer wg.Done(); p.stop() }()
		}
	}
	wg.Wait()
	os.RemoveAll(c.dir)
}

// waitAnswered sends a call to url until one is answered 200, for at most
// 30 seconds.
func waitAnswered(ctx context.Context, url, model string, header http.Header) error {
	hc := &http.Client{Timeout: 5 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := callOnce(ctx, hc, url, model, header, false)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freePort is a free loopback address (host:port) the OS picked.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
