package testagents

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/stickyd/stickyd/internal/freeport"
)

// NomadOptions configures StartNomad. The zero value is a Nomad with no
// Consul.
type NomadOptions struct {
	// ConsulAddr is the Consul HTTP address ("127.0.0.1:port") Nomad
	// registers services with. Empty points Nomad's Consul integration at
	// a closed port, so it never talks to a Consul it was not given (such
	// as one on 127.0.0.1:8500).
	ConsulAddr string
	// ConsulToken is the Consul ACL token Nomad uses, if any.
	ConsulToken string
}

// Nomad is a running Nomad dev agent (server and client in one process,
// raw_exec enabled) owned by one test.
type Nomad struct {
	// Addr is the HTTP API address, "http://127.0.0.1:port".
	Addr string
	// NodeName is the client node's name, unique per agent.
	NodeName string
	// Dir holds the agent's config, data (allocations) and log.
	Dir string
	// RPCAddr is the server's RPC address, which client agents join.
	RPCAddr string

	proc *process
}

// Dynamic port ranges: the dev agent's, then one per client agent, so
// that allocations on the different nodes of one machine never pick the
// same port.
const (
	devMinPort    = 20000
	devMaxPort    = 23999
	clientPorts   = 2000
	clientMinPort = 24000
	maxClients    = 4
)

// The test Nomad agents' dynamic ports lie above every port freeport hands
// out (this fails to compile otherwise): Nomad does not check the host, and
// another test binary's agent may hold a port freeport handed it.
const _ = uint(devMinPort - freeport.Limit)

// clientSeq numbers the client agents of this test binary.
var clientSeq atomic.Int64

// StartNomad starts a Nomad dev agent on 127.0.0.1 with its http, rpc and
// serf ports picked free, its data in a temporary directory, the client and
// the raw_exec driver enabled, and waits until the API answers, a leader is
// elected and the local node is ready with raw_exec healthy. When the test
// ends every job is stopped and purged, running allocations are waited for
// (bounded), and then the agent is stopped; any process left under its data
// directory is killed. The test is skipped when the binary is missing (see
// Require).
func StartNomad(t testing.TB, opts NomadOptions) *Nomad {
	t.Helper()
	bin := Require(t, "nomad")
	var lastErr error
	for try := 1; try <= startTries; try++ {
		n, retry, err := tryStartNomad(t, bin, opts)
		if err == nil {
			return n
		}
		lastErr = err
		if !retry {
			break
		}
		t.Logf("testagents: nomad start %d/%d: %v; retrying on fresh ports", try, startTries, err)
	}
	t.Fatalf("testagents: starting nomad: %v", lastErr)
	return nil
}

func tryStartNomad(t testing.TB, bin string, opts NomadOptions) (n *Nomad, retry bool, err error) {
	t.Helper()
	dir := t.TempDir()
	ports, err := freePorts(3)
	if err != nil {
		return nil, false, err
	}
	http, rpc, serf := ports[0], ports[1], ports[2]
	consulAddr := opts.ConsulAddr
	if consulAddr == "" {
		if consulAddr, err = closedAddr(); err != nil {
			return nil, false, err
		}
	}

	n = &Nomad{
		Addr:     "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(http)),
		NodeName: uniqueName("nomad"),
		Dir:      dir,
		RPCAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(rpc)),
	}
	cfg := nomadConfig(n.NodeName, filepath.Join(dir, "data"), [3]int{http, rpc, serf}, `server {
  enabled          = true
  bootstrap_expect = 1
}
client {
  enabled          = true
  min_dynamic_port = `+strconv.Itoa(devMinPort)+`
  max_dynamic_port = `+strconv.Itoa(devMaxPort)+`
}`, consulAddr, opts.ConsulToken, opts.ConsulAddr != "")
	cfgPath := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, false, fmt.Errorf("writing nomad config: %w", err)
	}

	args := []string{"agent", "-dev", "-bind", "127.0.0.1", "-config", cfgPath}
	p, err := startProcess("nomad", bin, args, dir, filepath.Join(dir, "nomad.log"))
	if err != nil {
		return nil, false, err
	}
	n.proc = p

	client := n.Client()
	err = waitFor(p, startTimeout, func() error { return n.ready(client) })
	if err != nil {
		inUse := p.addrInUse()
		n.stop(t, client)
		t.Logf("testagents: nomad log tail (%s):\n%s", p.logPath, p.logTail(logTailLines))
		return nil, inUse, err
	}

	t.Cleanup(func() {
		n.stop(t, client)
		logTailOnFailure(t, p)
	})
	return n, false, nil
}

// ready reports nil once there is a leader and the local node is ready
// with the raw_exec driver healthy.
func (n *Nomad) ready(client *nomadapi.Client) error {
	leader, err := client.Status().Leader()
	if err != nil {
		return err
	}
	if leader == "" {
		return errors.New("no leader yet")
	}
	nodes, _, err := client.Nodes().List(nil)
	if err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for _, node := range nodes {
		if node.Name != n.NodeName {
			continue
		}
		if node.Status != "ready" {
			return fmt.Errorf("node %s is %s", node.Name, node.Status)
		}
		d := node.Drivers["raw_exec"]
		if d == nil || !d.Detected || !d.Healthy {
			return fmt.Errorf("node %s: raw_exec driver not healthy yet", node.Name)
		}
		return nil
	}
	return fmt.Errorf("node %s not registered yet", n.NodeName)
}

// Client returns a Nomad API client for the agent.
func (n *Nomad) Client() *nomadapi.Client {
	cfg := nomadapi.DefaultConfig()
	cfg.Address = n.Addr
	cfg.SecretID = ""
	cfg.Region = ""
	cfg.Namespace = ""
	client, err := nomadapi.NewClient(cfg)
	if err != nil {
		// NewClient fails only on a bad address or TLS settings.
		panic(fmt.Sprintf("testagents: nomad client: %v", err))
	}
	return client
}

// Env returns the environment for running the nomad CLI against the agent:
// the test's environment without any NOMAD_ variable, plus NOMAD_ADDR.
func (n *Nomad) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NOMAD_") {
			env = append(env, kv)
		}
	}
	return append(env, "NOMAD_ADDR="+n.Addr)
}

// Stop stops every job and then the agent now instead of at the end of the
// test. It is idempotent.
func (n *Nomad) Stop(t testing.TB) {
	t.Helper()
	n.stop(t, n.Client())
}

// stop purges every job, waits (bounded) for the allocations to stop, stops
// the agent and kills anything left under its directory. Nomad executors
// outlive their agent by design, so the jobs must go first.
func (n *Nomad) stop(t testing.TB, client *nomadapi.Client) {
	t.Helper()
	if !n.proc.exited() {
		if err := stopJobs(client); err != nil {
			t.Logf("testagents: stopping nomad jobs: %v", err)
		}
	}
	n.proc.stop(t)
	if pids := killUnder(n.Dir); len(pids) > 0 {
		t.Logf("testagents: killed processes nomad left under %s: %v", n.Dir, pids)
	}
	unmountUnder(n.Dir)
}

// stopJobs deregisters and purges every job in every namespace, then waits
// until no allocation is pending or running.
func stopJobs(client *nomadapi.Client) error {
	all := &nomadapi.QueryOptions{Namespace: "*"}
	jobs, _, err := client.Jobs().List(all)
	if err != nil {
		return fmt.Errorf("listing jobs: %w", err)
	}
	var errs []error
	for _, j := range jobs {
		w := &nomadapi.WriteOptions{Namespace: j.Namespace}
		if _, _, err := client.Jobs().Deregister(j.ID, true, w); err != nil {
			errs = append(errs, fmt.Errorf("purging job %q: %w", j.ID, err))
		}
	}
	deadline := time.Now().Add(stopTimeout)
	for {
		allocs, _, err := client.Allocations().List(all)
		if err != nil {
			return errors.Join(append(errs, fmt.Errorf("listing allocations: %w", err))...)
		}
		var live []string
		for _, a := range allocs {
			if a.ClientStatus == "pending" || a.ClientStatus == "running" {
				live = append(live, a.ID[:8]+" "+a.ClientStatus)
			}
		}
		if len(live) == 0 {
			return errors.Join(errs...)
		}
		if time.Now().After(deadline) {
			return errors.Join(append(errs, fmt.Errorf("allocations still live after %s: %v", stopTimeout, live))...)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ClientOptions configures StartNomadClient.
type ClientOptions struct {
	// ConsulAddr is the Consul the client registers services with (empty:
	// a closed port, as for StartNomad).
	ConsulAddr string
	// NodePool is the client's node pool (empty: "default").
	NodePool string
}

// NomadClient is a client-only Nomad agent joined to a StartNomad server:
// a second node on the same machine, with its own data directory, its own
// cgroup parent and its own range of dynamic ports.
type NomadClient struct {
	// NodeName is the node's name; Dir holds its config, data and log.
	NodeName string
	Dir      string
	proc     *process
}

// StartNomadClient starts a client-only agent that joins server and waits
// until its node is ready with raw_exec healthy. When the test ends every
// job of server is stopped (as StartNomad's cleanup does), then the agent
// is stopped and anything left under its directory is killed.
func StartNomadClient(t testing.TB, server *Nomad, opts ClientOptions) *NomadClient {
	t.Helper()
	bin := Require(t, "nomad")
	slot := clientSeq.Add(1) - 1
	if slot >= maxClients {
		t.Fatalf("testagents: at most %d Nomad clients per test binary", maxClients)
	}
	var lastErr error
	for try := 1; try <= startTries; try++ {
		c, retry, err := tryStartNomadClient(t, bin, server, opts, int(slot))
		if err == nil {
			return c
		}
		lastErr = err
		if !retry {
			break
		}
		t.Logf("testagents: nomad client start %d/%d: %v; retrying on fresh ports", try, startTries, err)
	}
	t.Fatalf("testagents: starting a nomad client: %v", lastErr)
	return nil
}

func tryStartNomadClient(t testing.TB, bin string, server *Nomad, opts ClientOptions, slot int) (*NomadClient, bool, error) {
	t.Helper()
	dir := t.TempDir()
	ports, err := freePorts(3)
	if err != nil {
		return nil, false, err
	}
	consulAddr := opts.ConsulAddr
	if consulAddr == "" {
		if consulAddr, err = closedAddr(); err != nil {
			return nil, false, err
		}
	}
	pool := opts.NodePool
	if pool == "" {
		pool = "default"
	}
	c := &NomadClient{NodeName: uniqueName("nomad-client"), Dir: dir}
	minPort := clientMinPort + slot*clientPorts
	cfg := nomadConfig(c.NodeName, filepath.Join(dir, "data"), [3]int{ports[0], ports[1], ports[2]}, fmt.Sprintf(`server {
  enabled = false
}
client {
  enabled          = true
  servers          = [%q]
  node_pool        = %q
  cgroup_parent    = %q
  # Loopback only: allocations' addresses are 127.0.0.1, as on the dev
  # agent, never the machine's other interfaces.
  network_interface = "lo"
  min_dynamic_port = %d
  max_dynamic_port = %d
}`, server.RPCAddr, pool, fmt.Sprintf("nomad-%s.slice", strings.ReplaceAll(c.NodeName, "-", "")), minPort, minPort+clientPorts-1),
		consulAddr, "", opts.ConsulAddr != "")
	cfgPath := filepath.Join(dir, "nomad.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, false, fmt.Errorf("writing nomad client config: %w", err)
	}
	p, err := startProcess("nomad client", bin, []string{"agent", "-config", cfgPath}, dir, filepath.Join(dir, "nomad.log"))
	if err != nil {
		return nil, false, err
	}
	c.proc = p
	sc := server.Client()
	probe := &Nomad{NodeName: c.NodeName}
	err = waitFor(p, startTimeout, func() error { return probe.ready(sc) })
	if err != nil {
		inUse := p.addrInUse()
		p.stop(t)
		killUnder(dir)
		t.Logf("testagents: nomad client log tail (%s):\n%s", p.logPath, p.logTail(logTailLines))
		return nil, inUse, err
	}
	t.Cleanup(func() {
		if err := stopJobs(sc); err != nil {
			t.Logf("testagents: stopping nomad jobs before a client: %v", err)
		}
		p.stop(t)
		if pids := killUnder(dir); len(pids) > 0 {
			t.Logf("testagents: killed processes the nomad client left under %s: %v", dir, pids)
		}
		unmountUnder(dir)
		logTailOnFailure(t, p)
	})
	return c, false, nil
}

// nomadConfig is an agent's configuration: name, data directory, its
// http, rpc and serf ports on 127.0.0.1, roles (its server and client
// blocks), raw_exec, and Consul at consulAddr.
func nomadConfig(name, dataDir string, ports [3]int, roles, consulAddr, consulToken string, advertise bool) string {
	return fmt.Sprintf(`name = %q
data_dir = %q
bind_addr = "127.0.0.1"
disable_update_check = true
log_level = "DEBUG"
ports {
  http = %d
  rpc  = %d
  serf = %d
}
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
%s
plugin "raw_exec" {
  config {
    enabled = true
  }
}
consul {
  address          = %q
  token            = %q
  auto_advertise   = %t
  server_auto_join = false
  client_auto_join = false
}
`, name, dataDir, ports[0], ports[1], ports[2], roles, consulAddr, consulToken, advertise)
}
