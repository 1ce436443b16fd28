// Package consul is stickyd's Consul integration: service discovery, the
// placement mirror the Raft leader publishes to the KV store (Mirror, and
// Publisher, the leader task that reads the maps and feeds it), and watches
// of single keys an operator sets.
//
// Consul is a window onto stickyd's state, never its source: the Raft log
// is the truth and this package only copies it out. The mirror writes only
// under <prefix>placement/ and <prefix>groups/ and must never touch any
// other key (operators own the rest of the prefix, e.g.
// <prefix>maintenance/). Every call carries the configured ACL token.
package consul

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"
)

// DefaultPrefix is the KV prefix used when Config.Prefix is empty.
const DefaultPrefix = "stickyd/"

// Config says how to reach Consul.
type Config struct {
	// Address is the Consul HTTP address, "host:port" or a URL such as
	// "https://host:port". Empty means the Consul default
	// ($CONSUL_HTTP_ADDR, else 127.0.0.1:8500).
	Address string
	// Token is the ACL token sent on every call. Empty means the Consul
	// default ($CONSUL_HTTP_TOKEN, else anonymous).
	Token string
	// Datacenter is the datacenter to query. Empty means the agent's own.
	Datacenter string
	// Prefix is the KV prefix stickyd owns. Empty means DefaultPrefix. A
	// trailing "/" is added when missing.
	Prefix string
	// Logger receives warnings from watches. Nil means no logging.
	Logger hclog.Logger
}

// Client is a handle on Consul for stickyd. It is safe for concurrent use.
type Client struct {
	api    *api.Client
	prefix string
	addr   string
	logger hclog.Logger
}

// New returns a Client for cfg. It does not contact Consul.
func New(cfg Config) (*Client, error) {
	acfg := api.DefaultConfig()
	if cfg.Address != "" {
		acfg.Address = cfg.Address
	}
	if cfg.Token != "" {
		acfg.Token = cfg.Token
		acfg.TokenFile = "" // a token file would win over Token
	}
	if cfg.Datacenter != "" {
		acfg.Datacenter = cfg.Datacenter
	}
	client, err := api.NewClient(acfg)
	if err != nil {
		return nil, fmt.Errorf("creating consul client for %s: %w", acfg.Address, err)
	}
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Client{api: client, prefix: prefix, addr: acfg.Address, logger: logger}, nil
}

// Prefix returns the KV prefix, always ending in "/".
func (c *Client) Prefix() string { return c.prefix }

// Key returns the full KV key of name under the prefix.
func (c *Client) Key(name string) string { return c.prefix + name }

// Services returns "host:port" of every instance of the service name in the
// catalog, sorted. The host is the service's address, or its node's address
// when the service has none. An empty slice means the service has no
// instances.
func (c *Client) Services(ctx context.Context, name string) ([]string, error) {
	if name == "" {
		return nil, errors.New("listing service instances: empty service name")
	}
	q := (&api.QueryOptions{}).WithContext(ctx)
	entries, _, err := c.api.Catalog().Service(name, "", q)
	if err != nil {
		return nil, fmt.Errorf("listing instances of service %q from consul at %s: %w", name, c.addr, err)
	}
	addrs := make([]string, 0, len(entries))
	for _, e := range entries {
		host := e.ServiceAddress
		if host == "" {
			host = e.Address
		}
		addrs = append(addrs, net.JoinHostPort(host, strconv.Itoa(e.ServicePort)))
	}
	sort.Strings(addrs)
	return addrs, nil
}

// Put writes the KV key name (under the prefix).
func (c *Client) Put(ctx context.Context, name string, value []byte) error {
	q := (&api.WriteOptions{}).WithContext(ctx)
	if _, err := c.api.KV().Put(&api.KVPair{Key: c.Key(name), Value: value}, q); err != nil {
		return fmt.Errorf("writing %s to consul at %s: %w", c.Key(name), c.addr, err)
	}
	return nil
}

// Delete removes the KV key name (under the prefix); a missing key is no
// error.
func (c *Client) Delete(ctx context.Context, name string) error {
	q := (&api.WriteOptions{}).WithContext(ctx)
	if _, err := c.api.KV().Delete(c.Key(name), q); err != nil {
		return fmt.Errorf("deleting %s from consul at %s: %w", c.Key(name), c.addr, err)
	}
	return nil
}

// DeleteAll removes every key under the prefix (the placement registry,
// the maintenance keys, operators' keys): a tear-down's last step.
func (c *Client) DeleteAll(ctx context.Context) error {
	q := (&api.WriteOptions{}).WithContext(ctx)
	if _, err := c.api.KV().DeleteTree(c.prefix, q); err != nil {
		return fmt.Errorf("deleting %s from consul at %s: %w", c.prefix, c.addr, err)
	}
	return nil
}
