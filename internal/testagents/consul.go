package testagents

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hashicorp/consul/api"
)

// Consul is a running Consul dev agent (a single server that is its own
// leader) owned by one test.
type Consul struct {
	// HTTPAddr is the HTTP API address, "127.0.0.1:port".
	HTTPAddr string
	// DNSAddr is the DNS address (TCP and UDP), "127.0.0.1:port".
	DNSAddr string
	// Token is the initial management token when the agent was started by
	// StartConsulACL, and empty otherwise.
	Token string
	// NodeName is the agent's node name, unique per agent.
	NodeName string
	// Dir holds the agent's config, data and log.
	Dir string
	// SerfLANAddr is the agent's LAN gossip address, which client agents
	// join.
	SerfLANAddr string

	bin  string
	args []string
	proc *process
}

// StartConsul starts a Consul dev agent on 127.0.0.1 with every port picked
// free, and waits until its HTTP API answers and it has elected itself
// leader. The agent is stopped when the test ends, and its log tail printed
// if the test failed. The test is skipped when the binary is missing (see
// Require).
func StartConsul(t testing.TB) *Consul {
	t.Helper()
	return startConsul(t, "")
}

// StartConsulACL is StartConsul with ACLs enabled, default policy deny, and
// token as the initial management token (also the agent's own token). It
// returns once a request carrying token is authorized. Requests without a
// token are denied.
func StartConsulACL(t testing.TB, token string) *Consul {
	t.Helper()
	if token == "" {
		t.Fatal("testagents: StartConsulACL needs a token")
	}
	return startConsul(t, token)
}

func startConsul(t testing.TB, token string) *Consul {
	t.Helper()
	bin := Require(t, "consul")
	var lastErr error
	for try := 1; try <= startTries; try++ {
		c, retry, err := tryStartConsul(t, bin, token)
		if err == nil {
			return c
		}
		lastErr = err
		if !retry {
			break
		}
		t.Logf("testagents: consul start %d/%d: %v; retrying on fresh ports", try, startTries, err)
	}
	t.Fatalf("testagents: starting consul: %v", lastErr)
	return nil
}

// tryStartConsul makes one attempt. retry is true when the failure was a
// port another process took between picking and binding.
func tryStartConsul(t testing.TB, bin, token string) (c *Consul, retry bool, err error) {
	t.Helper()
	dir := t.TempDir()
	ports, err := freePorts(5)
	if err != nil {
		return nil, false, err
	}
	http, dns, server, serfLAN, serfWAN := ports[0], ports[1], ports[2], ports[3], ports[4]
	grpc, err := freePorts(1)
	if err != nil {
		return nil, false, err
	}

	c = &Consul{
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(http)),
		DNSAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(dns)),
		Token:    token,
		NodeName: uniqueName("consul"),
		Dir:      dir,
		bin:      bin,

		SerfLANAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(serfLAN)),
	}

	cfg := fmt.Sprintf(`node_name = %q
data_dir = %q
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
disable_update_check = true
log_level = "DEBUG"
ports {
  http     = %d
  https    = -1
  dns      = %d
  server   = %d
  serf_lan = %d
  serf_wan = %d
  grpc     = %d
  grpc_tls = -1
}
`, c.NodeName, filepath.Join(dir, "data"), http, dns, server, serfLAN, serfWAN, grpc[0])
	if token != "" {
		cfg += fmt.Sprintf(`acl {
  enabled                  = true
  default_policy           = "deny"
  down_policy              = "extend-cache"
  enable_token_persistence = true
  tokens {
    initial_management = %q
    agent              = %q
  }
}
`, token, token)
	}
	cfgPath := filepath.Join(dir, "consul.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, false, fmt.Errorf("writing consul config: %w", err)
	}

	c.args = []string{"agent", "-dev", "-config-file", cfgPath}
	if err := c.start(); err != nil {
		p := c.proc
		inUse := p != nil && p.addrInUse()
		if p != nil {
			p.stop(t)
			t.Logf("testagents: consul log tail (%s):\n%s", p.logPath, p.logTail(logTailLines))
		}
		return nil, inUse, err
	}

	t.Cleanup(func() {
		c.proc.stop(t)
		logTailOnFailure(t, c.proc)
	})
	return c, false, nil
}

// start runs the agent and waits until it is ready.
func (c *Consul) start() error {
	p, err := startProcess("consul", c.bin, c.args, c.Dir, filepath.Join(c.Dir, "consul.log"))
	if err != nil {
		return err
	}
	c.proc = p
	client := c.Client()
	return waitFor(p, startTimeout, func() error {
		leader, err := client.Status().Leader()
		if err != nil {
			return err
		}
		if leader == "" {
			return fmt.Errorf("no leader yet")
		}
		if c.Token != "" {
			// ACL bootstrap of the management token happens after the
			// leader is elected; wait until it is honoured.
			if _, _, err := client.ACL().TokenReadSelf(nil); err != nil {
				return fmt.Errorf("reading own token: %w", err)
			}
		}
		return nil
	})
}

// Client returns a Consul API client for the agent, carrying Token.
func (c *Consul) Client() *api.Client {
	cfg := api.DefaultNonPooledConfig()
	cfg.Address = c.HTTPAddr
	cfg.Scheme = "http"
	cfg.Token = c.Token
	client, err := api.NewClient(cfg)
	if err != nil {
		// NewClient fails only on bad TLS settings, which are never set here.
		panic(fmt.Sprintf("testagents: consul client: %v", err))
	}
	return client
}

// Stop stops the agent now instead of at the end of the test (to test what
// happens when Consul goes away). It is idempotent.
func (c *Consul) Stop(t testing.TB) {
	t.Helper()
	c.proc.stop(t)
}

// Restart stops the agent if it runs and starts it again on the same
// addresses. A dev agent keeps nothing: the restarted one has an empty KV
// store and Raft indexes that start over, as after losing a cluster.
func (c *Consul) Restart(t testing.TB) {
	t.Helper()
	c.proc.stop(t)
	if err := c.start(); err != nil {
		c.proc.stop(t)
		t.Fatalf("testagents: restarting consul: %v", err)
	}
}

// Env returns the environment for running the consul CLI against the
// agent: the test's environment without any CONSUL_ variable, plus
// CONSUL_HTTP_ADDR and, with ACLs, CONSUL_HTTP_TOKEN.
func (c *Consul) Env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONSUL_") {
			env = append(env, kv)
		}
	}
	env = append(env, "CONSUL_HTTP_ADDR="+c.HTTPAddr)
	if c.Token != "" {
		env = append(env, "CONSUL_HTTP_TOKEN="+c.Token)
	}
	return env
}

// StartConsulClient starts a Consul client agent that joins server's LAN
// pool: the local Consul agent of a second node (each Nomad client syncs
// the services of its own allocations with its own agent, and removes
// from it those it does not know). It is stopped when the test ends.
func StartConsulClient(t testing.TB, server *Consul) *Consul {
	t.Helper()
	bin := Require(t, "consul")
	var lastErr error
	for try := 1; try <= startTries; try++ {
		dir := t.TempDir()
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		c := &Consul{HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), NodeName: uniqueName("consul-client"),
			Dir: dir, bin: bin, SerfLANAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))}
		cfg := fmt.Sprintf(`node_name = %q
data_dir = %q
bind_addr = "127.0.0.1"
client_addr = "127.0.0.1"
advertise_addr = "127.0.0.1"
disable_update_check = true
log_level = "DEBUG"
server = false
retry_join = [%q]
ports {
  http     = %d
  https    = -1
  dns      = -1
  serf_lan = %d
  serf_wan = -1
  grpc     = -1
  grpc_tls = -1
}
`, c.NodeName, filepath.Join(dir, "data"), server.SerfLANAddr, ports[0], ports[1])
		cfgPath := filepath.Join(dir, "consul.hcl")
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		c.args = []string{"agent", "-config-file", cfgPath}
		if err := c.start(); err != nil {
			lastErr = err
			inUse := c.proc != nil && c.proc.addrInUse()
			if c.proc != nil {
				c.proc.stop(t)
				t.Logf("testagents: consul client log tail (%s):\n%s", c.proc.logPath, c.proc.logTail(logTailLines))
			}
			if !inUse {
				break
			}
			continue
		}
		t.Cleanup(func() {
			c.proc.stop(t)
			logTailOnFailure(t, c.proc)
		})
		return c
	}
	t.Fatalf("testagents: starting a consul client: %v", lastErr)
	return nil
}
