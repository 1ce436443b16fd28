package agent

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/governance"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/telemetry"
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// Config is the agent's configuration file (HCL).
type Config struct {
	// Name names this agent (its raft id); defaults to the host name.
	Name string `hcl:"name,optional"`
	// DataDir holds the raft log, snapshots and the cookie key. Empty
	// means in memory (dev only).
	DataDir string `hcl:"data_dir,optional"`
	// LogLevel is trace, debug, info, warn or error.
	LogLevel string `hcl:"log_level,optional"`
	// ShutdownTimeout bounds a stop, parking everyone included ("2m"); who
	// is not parked by then restarts clean. Keep Nomad's kill_timeout above.
	ShutdownTimeout string `hcl:"shutdown_timeout,optional"`
	// KillTimeout is what the process manager gives between SIGTERM and
	// SIGKILL (Nomad's kill_timeout, as capped by the client's
	// max_kill_timeout). When set, shutdown_timeout defaults to it less a
	// margin (a tenth, at least 2 s), and a longer shutdown_timeout is
	// refused: a stop must finish before it is killed.
	KillTimeout string `hcl:"kill_timeout,optional"`

	Server *ServerConfig `hcl:"server,block"`
	Host   *HostConfig   `hcl:"host,block"`
	Front  *FrontConfig  `hcl:"front,block"`
	Admin  *AdminConfig  `hcl:"admin,block"`
	Move   *MoveConfig   `hcl:"move,block"`
	Probe  *ProbeConfig  `hcl:"probe,block"`
	// Lifecycle bounds how long idle people stay in a worker's memory.
	Lifecycle *LifecycleConfig `hcl:"lifecycle,block"`
	// Bundles is where groups' application bundles come from.
	Bundles *BundlesConfig `hcl:"bundles,block"`
	Groups  []*GroupConfig `hcl:"group,block"`
	// Consul is service discovery and the published placement registry
	// (docs/deploy-nomad.md).
	Consul *ConsulConfig `hcl:"consul,block"`
	// Nomad makes the leader run each catalog group as a Nomad job.
	Nomad *NomadConfig `hcl:"nomad,block"`
	// Gateway is the AI model gateway (docs/gateway.md).
	Gateway *GatewayConfig `hcl:"gateway,block"`
	// TLS is mutual TLS on the raft and peer-link ports (docs/security.md).
	TLS       *TLSConfig        `hcl:"tls,block"`
	Telemetry *telemetry.Config `hcl:"telemetry,block"` // OpenTelemetry traces of the gateway's calls, checked at start (docs/gateway.md)
	// PythonSDK is the directory holding the stickyd Python package
	// (plugins/python in a checkout): python3 groups' workers find it on
	// their PYTHONPATH (docs/python.md). Empty: the package must be
	// importable already (installed, or in the group's PYTHONPATH).
	PythonSDK string `hcl:"python_sdk,optional"`
}

// HostConfig is the host role: the catalog groups this agent runs and, on
// an agent that is not a server, how it joins the servers. Such an agent is
// a non-voting raft member: it holds a replica of the maps, never votes.
type HostConfig struct {
	// Enabled runs catalog groups here (default true). Servers deployed
	// beside Nomad-run hosts set it to false.
	Enabled *bool `hcl:"enabled,optional"`
	// Groups limits the catalog groups run here (default: all of them).
	Groups []string `hcl:"groups,optional"`
	// Join lists servers' admin API addresses (a host only; with a consul
	// block, the servers found in Consul are added).
	Join []string `hcl:"join,optional"`
	// RaftAddr and RPCAddr are the host's raft and peer-link addresses
	// (defaults 127.0.0.1:4647 and 127.0.0.1:4648).
	RaftAddr string `hcl:"raft_addr,optional"`
	RPCAddr  string `hcl:"rpc_addr,optional"`
	// RehomeOnStop makes a stop move this agent's people to the same
	// groups' workers on other agents (hot, by the one road) before it
	// parks whoever is left, so that a drained or replaced host strands
	// nobody. Default true on an agent that is not a server (a group's
	// Nomad host), false on a server.
	RehomeOnStop *bool `hcl:"rehome_on_stop,optional"`
}

// TLSConfig is mutual TLS between stickyd processes, as Consul's and
// Nomad's tls blocks: the raft port takes only servers of the cluster, the
// peer-link port servers and hosts, each proven by a certificate of the
// cluster's CA naming its role (server.<cluster>.stickyd,
// host.<cluster>.stickyd; `stickyd tls cert create`). The files are read
// again on SIGHUP.
type TLSConfig struct {
	CAFile   string `hcl:"ca_file"`
	CertFile string `hcl:"cert_file"`
	KeyFile  string `hcl:"key_file"`
	// Cluster is the cluster's name in the role names (default "global").
	Cluster string `hcl:"cluster,optional"`
	// VerifyIncoming (default true) requires a certificate of the right
	// role from every peer connecting; VerifyOutgoing (default true)
	// checks the chain of every peer dialed, VerifyServerHostname (default
	// true) its role too.
	VerifyIncoming       *bool `hcl:"verify_incoming,optional"`
	VerifyOutgoing       *bool `hcl:"verify_outgoing,optional"`
	VerifyServerHostname *bool `hcl:"verify_server_hostname,optional"`
	// HTTPS serves the admin API over TLS with this certificate (default
	// false), and has the agent call the others' over HTTPS, checking
	// their certificate as on the peer links: the admin token never
	// crosses the network in clear. Every agent of a cluster sets it
	// alike. The CLI then takes -ca-file (or $STICKYD_CACERT).
	HTTPS bool `hcl:"https,optional"`
}

// tlsutil is the block as tlsutil takes it, defaults applied.
func (t *TLSConfig) tlsutil() tlsutil.Config {
	on := func(b *bool) bool { return b == nil || *b }
	return tlsutil.Config{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, Cluster: t.Cluster,
		VerifyIncoming: on(t.VerifyIncoming), VerifyOutgoing: on(t.VerifyOutgoing), VerifyServerHostname: on(t.VerifyServerHostname)}
}

// ConsulConfig connects the agent to Consul.
type ConsulConfig struct {
	// Address of the Consul HTTP API (default $CONSUL_HTTP_ADDR, else
	// 127.0.0.1:8500) and the ACL token (default: the content of
	// TokenFile, else $CONSUL_HTTP_TOKEN).
	Address string `hcl:"address,optional"`
	Token   string `hcl:"token,optional"`
	// TokenFile holds the token instead (surrounding white space ignored;
	// empty: none), such as one a Nomad template renders from a Nomad
	// variable. It must exist.
	TokenFile  string `hcl:"token_file,optional"`
	Datacenter string `hcl:"datacenter,optional"`
	// Prefix of the KV tree the leader publishes (default "stickyd/").
	Prefix string `hcl:"prefix,optional"`
	// ServerService is the Consul service of the servers' admin API
	// (default "stickyd-server"): agents join the servers it lists.
	ServerService string `hcl:"server_service,optional"`
	// Mirror makes the leader publish the placement registry under
	// <prefix>placement/ and <prefix>groups/ (default true).
	Mirror *bool `hcl:"mirror,optional"`
}

// NomadConfig makes the leader register one Nomad job per catalog group
// whose tasks run stickyd in the host role (docs/deploy-nomad.md).
type NomadConfig struct {
	// Address (default $NOMAD_ADDR, else http://127.0.0.1:4646), Token
	// (default: the content of TokenFile, else $NOMAD_TOKEN), Region,
	// Namespace and Datacenters (["dc1"]) of the jobs.
	Address     string   `hcl:"address,optional"`
	Token       string   `hcl:"token,optional"`
	TokenFile   string   `hcl:"token_file,optional"`
	Region      string   `hcl:"region,optional"`
	Namespace   string   `hcl:"namespace,optional"`
	Datacenters []string `hcl:"datacenters,optional"`
	// Driver runs the host tasks: "exec" (default) or "raw_exec".
	Driver string `hcl:"driver,optional"`
	// StickydArtifact is a tarball holding the stickyd binary (with
	// StickydChecksum, "sha256:…"); or StickydCommand is its path on every
	// client (raw_exec).
	StickydArtifact string `hcl:"stickyd_artifact,optional"`
	StickydChecksum string `hcl:"stickyd_checksum,optional"`
	StickydCommand  string `hcl:"stickyd_command,optional"`
	// HostCertFile and HostKeyFile are a host certificate of the
	// cluster's CA (stickyd tls cert create -host) for the group jobs'
	// hosts, needed with a tls block: the leader writes them, with the
	// CA, to each group job's Nomad variable, and the hosts render them
	// into their secrets directory. Read at each registration, so a
	// renewed certificate reaches the next one.
	HostCertFile string `hcl:"host_cert_file,optional"`
	HostKeyFile  string `hcl:"host_key_file,optional"`
	// Archive is the bundle archive's URL as the Nomad clients reach it
	// (default the bundles block's archive, when it is an http(s) URL).
	Archive string `hcl:"archive,optional"`
	// Hosts is the number of host allocations per group (default 2: a
	// drained host moves its people to the other); MaxHosts bounds
	// scaling (default Hosts).
	Hosts    int `hcl:"hosts,optional"`
	MaxHosts int `hcl:"max_hosts,optional"`
	// CPU (MHz), MemoryMB and DiskMB (the ephemeral disk holding the park
	// store) of a host task (defaults 500, 512 and 1024).
	CPU      int `hcl:"cpu,optional"`
	MemoryMB int `hcl:"memory_mb,optional"`
	DiskMB   int `hcl:"disk_mb,optional"`
	// NodePool is the Nomad node pool of the group jobs (default: the
	// default pool); DistinctHosts puts each host of a group on its own
	// node (otherwise they are spread over nodes when there are several).
	NodePool      string `hcl:"node_pool,optional"`
	DistinctHosts bool   `hcl:"distinct_hosts,optional"`
}

// BundlesConfig is the bundle archive this agent runs groups from
// (docs/bundles.md). The agent only reads it.
type BundlesConfig struct {
	// Archive is a directory, a file:// URL or an http(s):// URL (an archive
	// served by "stickyd bundle serve", or any static server).
	Archive string `hcl:"archive"`
	// Token is sent to an HTTP archive (default $STICKYD_BUNDLE_TOKEN).
	Token string `hcl:"token,optional"`
	// CacheDir holds the verified, unpacked bundles the workers run from
	// (default <data_dir>/bundles; without a data dir, a directory under
	// the system's temporary directory).
	CacheDir string `hcl:"cache_dir,optional"`
}

// AdminConfig is the admin HTTP API (/v1/...).
type AdminConfig struct {
	// Address is where the API listens; default 127.0.0.1:4650.
	Address string `hcl:"address,optional"`
	// Token is the admin token. Default: the content of TokenFile, else
	// $STICKYD_TOKEN, else the content of <data_dir>/admin.token, created
	// on first start (dev: random).
	Token string `hcl:"token,optional"`
	// TokenFile is a file holding the admin token (surrounding white
	// space ignored), such as one a Nomad template renders from a Nomad
	// variable into the secrets directory. It must exist.
	TokenFile string `hcl:"token_file,optional"`
	// ReadToken (or the content of ReadTokenFile) may only read: the
	// admin API's GET calls (not a raft snapshot, which holds the cookie
	// keys), the monitor page and the health check's details. For
	// dashboards and people who watch but do not act.
	ReadToken     string `hcl:"read_token,optional"`
	ReadTokenFile string `hcl:"read_token_file,optional"`
}

// ProbeConfig is the workers' probe: their numbers and proof of life.
type ProbeConfig struct {
	// Interval between probes ("2s"); "0s" turns probing off.
	Interval string `hcl:"interval,optional"`
	// Misses is how many probes in a row a worker may miss before it is
	// killed and relaunched (default 3). A probe left unanswered while the
	// worker's process computes is not a miss: the worker is busy.
	Misses int `hcl:"misses,optional"`
	// BusyTimeout bounds how long a worker may stay busy without
	// answering a probe before it is killed all the same ("10m").
	BusyTimeout string `hcl:"busy_timeout,optional"`
}

// MoveConfig tunes the road people take between workers.
// LifecycleConfig is the life of a session (docs/operations.md).
type LifecycleConfig struct {
	// IdlePark parks a person who sent no frame for that long (by the one
	// road, to their own worker, which frees their memory); their next
	// frame wakes them. Default "15m"; "off" turns it off.
	IdlePark string `hcl:"idle_park,optional"`
	// ForgetAfter forgets a person no front saw for that long (no
	// request, no WebSocket open): their connections and place in the
	// maps, what their worker holds and their parked package. Default
	// "24h" (the cookie's life: their cookie is dead by then); "off"
	// keeps everyone.
	ForgetAfter string `hcl:"forget_after,optional"`
}

// DefaultForgetAfter is lifecycle.forget_after unless set.
const DefaultForgetAfter = 24 * time.Hour

// Forget is lifecycle.forget_after with its default, 0 when off.
func (l *LifecycleConfig) Forget() time.Duration {
	switch {
	case l == nil || l.ForgetAfter == "":
		return DefaultForgetAfter
	case l.ForgetAfter == "off":
		return 0
	}
	d, _ := time.ParseDuration(l.ForgetAfter)
	return d
}

// DefaultIdlePark is lifecycle.idle_park unless set.
const DefaultIdlePark = 15 * time.Minute

// Idle is lifecycle.idle_park with its default, 0 when off.
func (l *LifecycleConfig) Idle() time.Duration {
	switch {
	case l == nil || l.IdlePark == "":
		return DefaultIdlePark
	case l.IdlePark == "off":
		return 0
	}
	d, _ := time.ParseDuration(l.IdlePark)
	return d
}

// idleParks is the idle_park of each group that sets its own (0: off for
// that group), nil if none does.
func (c *Config) idleParks() map[string]time.Duration {
	var out map[string]time.Duration
	for _, g := range c.Groups {
		if g.IdlePark != "" {
			if out == nil {
				out = map[string]time.Duration{}
			}
			out[g.Name] = (&LifecycleConfig{IdlePark: g.IdlePark}).Idle()
		}
	}
	return out
}

type MoveConfig struct {
	// FreezeTimeout bounds the freeze; past it the move rolls back ("5s").
	FreezeTimeout string `hcl:"freeze_timeout,optional"`
	// RequestWait bounds the freeze instead while the person's site request
	// runs in the app (a slow report, an upload): the move waits for it
	// rather than roll back ("30s"; at least freeze_timeout).
	RequestWait string `hcl:"request_wait,optional"`
	// HeldBytes bounds the moved people's packages held in memory until
	// their next frame wakes them (or for 5 s, then they go to disk);
	// past it a package is written to disk at once. Default 1 GiB; 0
	// writes every package to disk.
	HeldBytes *int64 `hcl:"held_bytes,optional"`
}

// DefaultHeldBytes is move.held_bytes unless set.
const DefaultHeldBytes = 1 << 30

// Held is move.held_bytes with its default.
// DefaultRequestWait is move.request_wait's default.
const DefaultRequestWait = 30 * time.Second

// Waits are the freeze's bounds (freeze_timeout, request_wait), defaults
// taken; 0 for freeze_timeout leaves the mover's own.
func (m MoveConfig) Waits() (freeze, request time.Duration) {
	freeze, request = duration(m.FreezeTimeout), duration(m.RequestWait)
	if request <= 0 {
		request = DefaultRequestWait
	}
	return freeze, max(request, freeze)
}

func (m MoveConfig) Held() int64 {
	if m.HeldBytes == nil {
		return DefaultHeldBytes
	}
	return *m.HeldBytes
}

// ServerConfig is the server role: a raft member.
type ServerConfig struct {
	// Enabled makes the agent a raft voter and supervisor (default true);
	// false makes it a host only (see HostConfig).
	Enabled *bool `hcl:"enabled,optional"`
	// BootstrapExpect is the number of servers to wait for before
	// bootstrapping; 1 bootstraps alone.
	BootstrapExpect int `hcl:"bootstrap_expect,optional"`
	// RaftAddr is the raft TCP address; default 127.0.0.1:4647.
	RaftAddr string `hcl:"raft_addr,optional"`
	// RaftAdvertise is the raft address the other members dial, when it
	// is not RaftAddr (behind NAT or a port mapping); default RaftAddr.
	RaftAdvertise string `hcl:"raft_advertise,optional"`
	// RetryJoin lists the other servers' admin API addresses.
	RetryJoin []string `hcl:"retry_join,optional"`
	// RPCAddr is where other agents open peer links to this agent's
	// workers; default 127.0.0.1:4648 in a cluster, none alone.
	RPCAddr string `hcl:"rpc_addr,optional"`
	// SnapshotThreshold (entries between snapshots, default 8192) and
	// TrailingLogs (entries kept after one, default 10240) tune log
	// compaction; a server further behind catches up from a snapshot.
	SnapshotThreshold uint64 `hcl:"snapshot_threshold,optional"`
	TrailingLogs      uint64 `hcl:"trailing_logs,optional"`
	// DeadServerCleanup is how long the leader keeps a member it cannot
	// reach before it removes it from the raft configuration (Nomad's
	// autopilot): a host always, a voter only while the voters it still
	// reaches number at least bootstrap_expect (a replacement under
	// another name is healthy), so the quorum never shrinks below what
	// the operator asked for. Default "2m"; "0s" turns it off.
	DeadServerCleanup string `hcl:"dead_server_cleanup,optional"`
}

// FrontConfig is the HTTP and WebSocket front.
type FrontConfig struct {
	// Enabled serves the front (default true; hosts turn it off).
	Enabled *bool `hcl:"enabled,optional"`
	// Address is where the front listens; default 127.0.0.1:8080.
	Address string `hcl:"address,optional"`
	// CookieKeyFile holds the key signing connection cookies: the file's
	// bytes as they are, at least 32, the same on every server; created
	// (32 random bytes) on a first start when missing. Default none: the
	// cluster's ring, in the maps, made by its first leader
	// (internal/keyring). Either way the ring every front uses is the
	// cluster's.
	CookieKeyFile string `hcl:"cookie_key_file,optional"`
	// CookieKeyFiles is the cookie key ring instead (docs/security.md): the
	// first file's key signs new cookies, every file's key verifies, so a
	// rotation keeps the old key behind the new one and logs nobody out.
	// Every file must exist. Set this or CookieKeyFile, not both.
	CookieKeyFiles []string `hcl:"cookie_key_files,optional"`
	SecureCookie   bool     `hcl:"secure_cookie,optional"`
	// CookieTTL is a connection cookie's life from its issue ("24h", at
	// least "1m"): renewed on the answers past half of it, refused past it
	// (its bearer starts a new session, as with a forged cookie).
	CookieTTL string `hcl:"cookie_ttl,optional"`
	// FrameRate bounds the frames one person sends through this front per
	// second (WebSocket ops, POST /_stickyd/op, site requests with a valid
	// cookie), with bursts of FrameBurst (default 2 × FrameRate). Over it a
	// frame is refused: "rate_limited" (retryable), HTTP 429. 0, the
	// default, is no limit.
	FrameRate       float64 `hcl:"frame_rate,optional"`
	FrameBurst      int     `hcl:"frame_burst,optional"`
	MaxMessageBytes int64   `hcl:"max_message_bytes,optional"`
	MaxBodyBytes    int64   `hcl:"max_body_bytes,optional"`
	// BodyBudgetBytes bounds the request bodies the front holds at once,
	// all requests together (default 256 MiB, at least max_body_bytes);
	// past it a request waits up to 2 s, then gets 503 with Retry-After.
	BodyBudgetBytes int64 `hcl:"body_budget_bytes,optional"`
	// FrameTimeout bounds how long a request waits for its worker ("30s").
	FrameTimeout string `hcl:"frame_timeout,optional"`
	// RequestTimeout bounds how long a site request waits for its answer
	// ("5m"): a site route may run that long (a streamed body, after its
	// headers, as long as it writes).
	RequestTimeout string `hcl:"request_timeout,optional"`
	// BarrierWait bounds how long a request waits for a moving person
	// (default move.request_wait, "30s": a move that waits for the
	// person's slow request holds their new requests that long; one that
	// rolls back releases them at once).
	BarrierWait string `hcl:"barrier_wait,optional"`
	// MaxHeldPerUser and MaxHeld cap the requests held on the barrier.
	MaxHeldPerUser int `hcl:"max_held_per_user,optional"`
	MaxHeld        int `hcl:"max_held,optional"`
	// NewcomerRate bounds the requests without a valid cookie (each may
	// become a new person) per second from one source address (an IPv6
	// address by its /64; loopback is never limited), with bursts of
	// NewcomerBurst (default 10 × the rate); over it, 429. Default 50; 0
	// turns it off (behind a load balancer on another host every newcomer
	// shares its address).
	NewcomerRate  *float64 `hcl:"newcomer_rate,optional"`
	NewcomerBurst int      `hcl:"newcomer_burst,optional"`
	// IdleTimeout closes a keep-alive connection idle that long ("90s").
	IdleTimeout string `hcl:"idle_timeout,optional"`
	// BodyTimeout bounds the reading of a request's body ("60s"); a body
	// slower than that is answered 408.
	BodyTimeout string `hcl:"body_timeout,optional"`
	// MaxHeaderBytes bounds a request's headers (65536, at least 4096);
	// larger ones are answered 431.
	MaxHeaderBytes int `hcl:"max_header_bytes,optional"`
	// MaxConnections bounds the connections the front holds open
	// (keep-alive, WebSockets, requests in flight); past it a new one is
	// answered 503, or its health check. 0, the default, derives it from
	// the process's file limit (raised to its hard limit at start): the
	// limit less a fifth of it, kept for raft, the park store, the workers
	// and the admin API (at least 256, at most 10000).
	MaxConnections int `hcl:"max_connections,optional"`
}

// Front defaults of the bounds above.
const (
	DefaultIdleTimeout    = 90 * time.Second
	DefaultBodyTimeout    = 60 * time.Second
	DefaultMaxHeaderBytes = 64 << 10
)

// idleTimeout, bodyTimeout and maxHeaderBytes are the settings or their
// defaults.
func (f *FrontConfig) idleTimeout() time.Duration {
	if d := duration(f.IdleTimeout); d > 0 {
		return d
	}
	return DefaultIdleTimeout
}

func (f *FrontConfig) bodyTimeout() time.Duration {
	if d := duration(f.BodyTimeout); d > 0 {
		return d
	}
	return DefaultBodyTimeout
}

// newcomerRate is front.Config's NewcomerRate: 0 for the default, negative
// for none.
func (f *FrontConfig) newcomerRate() float64 {
	switch {
	case f.NewcomerRate == nil:
		return 0
	case *f.NewcomerRate == 0:
		return -1
	}
	return *f.NewcomerRate
}

func (f *FrontConfig) maxHeaderBytes() int {
	if f.MaxHeaderBytes > 0 {
		return f.MaxHeaderBytes
	}
	return DefaultMaxHeaderBytes
}

// GroupConfig is a group of identical workers.
type GroupConfig struct {
	Name    string `hcl:"name,label"`
	Workers int    `hcl:"workers,optional"`
	// Plugin runs each worker as a go-plugin subprocess.
	Plugin *PluginConfig `hcl:"plugin,block"`
	// Builtin runs an application compiled into stickyd in-process on an
	// in-memory channel ("demo").
	Builtin string `hcl:"builtin,optional"`
	// Bundle runs each worker from an application bundle of the archive
	// ("sha256:…"), as a go-plugin subprocess of its entry point.
	Bundle string `hcl:"bundle,optional"`
	// Env is added to the workers' environment (with a bundle; a plugin
	// block has its own).
	Env map[string]string `hcl:"env,optional"`
	// MemoryMaxMB is the hard ceiling of one worker's memory (RSS): over
	// it, the worker is killed and relaunched. 0 (the default) is none.
	MemoryMaxMB int `hcl:"memory_max_mb,optional"`
	// CheckpointInterval is how often each worker checkpoints the pages
	// changed since its last checkpoint, so that a worker that dies wakes
	// its people from them (docs/checkpoints.md): "5s" (the default),
	// "off" or "0s" for never, at least "100ms".
	CheckpointInterval string `hcl:"checkpoint_interval,optional"`
	// MaxPageBytes and MaxPersonBytes bound a page's state and the sum of
	// a person's pages in a worker of the group; MaxPagesPerConn and
	// MaxPagesPerPerson the pages open at once. Past them a write or an
	// open is refused with a message the page sees. 0 leaves the SDK's
	// defaults (256 MiB, 1 GiB, 100, 500) or the application's options.
	// IdlePark overrides lifecycle.idle_park for the group's people
	// ("off" parks none of them).
	IdlePark          string `hcl:"idle_park,optional"`
	MaxPageBytes      int64  `hcl:"max_page_bytes,optional"`
	MaxPersonBytes    int64  `hcl:"max_person_bytes,optional"`
	MaxPagesPerConn   int32  `hcl:"max_pages_per_conn,optional"`
	MaxPagesPerPerson int32  `hcl:"max_pages_per_person,optional"`
	// Governance balances, replaces and compacts the group's workers.
	Governance *GovernanceConfig `hcl:"governance,block"`
}

// limits is the group's page bounds for its workers, nil if none is set.
func (g *GroupConfig) limits() *fsm.GroupLimits {
	if g.MaxPageBytes == 0 && g.MaxPersonBytes == 0 && g.MaxPagesPerConn == 0 && g.MaxPagesPerPerson == 0 {
		return nil
	}
	return &fsm.GroupLimits{MaxPageBytes: g.MaxPageBytes, MaxPersonBytes: g.MaxPersonBytes,
		MaxPagesPerConn: g.MaxPagesPerConn, MaxPagesPerPerson: g.MaxPagesPerPerson}
}

// GovernanceConfig turns on the governance of a group (docs/governance.md);
// the block is governance's (unset values keep the engine's defaults).
type GovernanceConfig = governance.GroupConfig

// group finds a group's configuration; the bool says if it is governed.
func (c *Config) group(name string) (*GroupConfig, bool) {
	for _, g := range c.Groups {
		if g.Name == name {
			return g, g.Governance != nil && g.Governance.Enabled
		}
	}
	return nil, false
}

// PluginConfig names a worker plugin binary, or with runtime "python3" a
// WSGI application run by stickyd's Python worker (docs/python.md).
type PluginConfig struct {
	// Runtime is "go-plugin" (the default: Command is the worker binary)
	// or "python3" (Command is the app as MODULE:CALLABLE).
	Runtime string            `hcl:"runtime,optional"`
	Command string            `hcl:"command"`
	Args    []string          `hcl:"args,optional"`
	Env     map[string]string `hcl:"env,optional"`
	// Interpreter is the Python that runs a python3 group's workers: a
	// virtualenv's bin/python, or any python3 by path or by name on PATH
	// (default /usr/bin/python3). Each group has its own. It must import
	// the SDK's dependencies (grpcio, protobuf): a virtualenv made with
	// --system-site-packages sees the distribution's.
	Interpreter string `hcl:"interpreter,optional"`
	// PlainChannel turns off go-plugin's AutoMTLS on the workers'
	// channels (default false: the host and each worker trade one-time
	// certificates and no other local process can speak on the channel).
	// For a worker binary built with a go-plugin older than AutoMTLS.
	PlainChannel bool `hcl:"plain_channel,optional"`
	// Template, for a python3 group, builds the app once in a template
	// process and forks every worker from it (docs/templates.md).
	Template *PluginTemplate `hcl:"template,block"`
}

// PluginTemplate is a python3 group's template.
type PluginTemplate struct {
	// Build is the build step, MODULE:FUNCTION, run once in the template
	// after the app is imported (loading data, warming caches).
	Build string `hcl:"build"`
}

// LoadConfig reads and checks an HCL configuration file.
func LoadConfig(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading config: %w", err)
	}
	return ParseConfig(path, src)
}

// ParseConfig parses HCL source; filename is used in error messages.
func ParseConfig(filename string, src []byte) (*Config, error) {
	var c Config
	if err := hclsimple.Decode(filename, src, nil, &c); err != nil {
		return nil, err
	}
	if err := c.Finish(); err != nil {
		return nil, fmt.Errorf("%s: %w", filename, err)
	}
	return &c, nil
}

// Finish applies defaults and checks the configuration; New calls it, so a
// Config built in code gets the same defaults as a parsed one.
func (c *Config) Finish() error {
	if c.Name == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "stickyd"
		}
		c.Name = h
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if c.Server == nil {
		c.Server = &ServerConfig{BootstrapExpect: 1}
	}
	if c.Host == nil {
		c.Host = &HostConfig{}
	}
	if !c.IsServer() {
		if err := c.finishHost(); err != nil {
			return err
		}
	}
	if c.Server.RaftAddr == "" {
		c.Server.RaftAddr = "127.0.0.1:4647"
	}
	if c.Server.BootstrapExpect == 0 {
		c.Server.BootstrapExpect = 1
	}
	if c.Server.BootstrapExpect < 1 {
		return fmt.Errorf("server: bootstrap_expect = %d: want 1 (alone) or the number of servers", c.Server.BootstrapExpect)
	}
	if c.Server.BootstrapExpect > 1 {
		if c.Server.RPCAddr == "" {
			c.Server.RPCAddr = "127.0.0.1:4648"
		}
		if c.DataDir == "" {
			return fmt.Errorf("server: a cluster (bootstrap_expect = %d) needs a data_dir", c.Server.BootstrapExpect)
		}
		if len(c.Server.RetryJoin) < c.Server.BootstrapExpect-1 && c.Consul == nil {
			return fmt.Errorf("server: bootstrap_expect = %d needs the other servers in retry_join (%d given) or a consul block",
				c.Server.BootstrapExpect, len(c.Server.RetryJoin))
		}
	}
	if c.Front == nil {
		c.Front = &FrontConfig{}
	}
	if c.Front.Address == "" {
		c.Front.Address = "127.0.0.1:8080"
	}
	if err := c.Front.finish(); err != nil {
		return err
	}
	if c.Admin == nil {
		c.Admin = &AdminConfig{}
	}
	if c.Admin.Address == "" {
		c.Admin.Address = "127.0.0.1:4650"
	}
	if err := tokenFrom(&c.Admin.ReadToken, &c.Admin.ReadTokenFile, "admin", "read_token"); err != nil {
		return err
	}
	if c.Admin.ReadToken != "" && c.Admin.ReadToken == c.Admin.Token {
		return fmt.Errorf("admin: read_token is the admin token; give it a token of its own")
	}
	if c.Move == nil {
		c.Move = &MoveConfig{}
	}
	if c.Probe == nil {
		c.Probe = &ProbeConfig{}
	}
	if c.Probe.Interval == "" {
		c.Probe.Interval = "2s"
	}
	if d, err := time.ParseDuration(c.Probe.Interval); err != nil || d < 0 {
		return fmt.Errorf("probe: interval %q: want a duration like \"2s\" (\"0s\" for none)", c.Probe.Interval)
	}
	if c.Probe.Misses < 0 {
		return fmt.Errorf("probe: misses must be positive")
	}
	if c.Probe.BusyTimeout == "" {
		c.Probe.BusyTimeout = "10m"
	}
	if d, err := time.ParseDuration(c.Probe.BusyTimeout); err != nil || d <= 0 {
		return fmt.Errorf("probe: busy_timeout %q: want a positive duration like \"10m\"", c.Probe.BusyTimeout)
	}
	if l := c.Lifecycle; l != nil && l.IdlePark != "" && l.IdlePark != "off" {
		if d, err := time.ParseDuration(l.IdlePark); err != nil || d < time.Second {
			return fmt.Errorf("lifecycle: idle_park %q: want a duration of at least 1s like \"15m\", or \"off\"", l.IdlePark)
		}
	}
	if l := c.Lifecycle; l != nil && l.ForgetAfter != "" && l.ForgetAfter != "off" {
		if d, err := time.ParseDuration(l.ForgetAfter); err != nil || d < time.Second {
			return fmt.Errorf("lifecycle: forget_after %q: want a duration of at least 1s like \"24h\", or \"off\"", l.ForgetAfter)
		}
	}
	if c.Move.Held() < 0 {
		return fmt.Errorf("move: held_bytes %d: want a size in bytes, 0 or more", c.Move.Held())
	}
	for name, d := range map[string]string{
		"front: frame_timeout": c.Front.FrameTimeout, "front: request_timeout": c.Front.RequestTimeout, "front: barrier_wait": c.Front.BarrierWait,
		"move: freeze_timeout": c.Move.FreezeTimeout, "move: request_wait": c.Move.RequestWait, "shutdown_timeout": c.ShutdownTimeout,
		"kill_timeout": c.KillTimeout,
	} {
		if d == "" {
			continue
		}
		if v, err := time.ParseDuration(d); err != nil || v <= 0 {
			return fmt.Errorf("%s %q: want a positive duration like \"5s\"", name, d)
		}
	}
	if d := c.Server.DeadServerCleanup; d != "" {
		if v, err := time.ParseDuration(d); err != nil || v < 0 {
			return fmt.Errorf("server: dead_server_cleanup %q: want a duration like \"2m\" (\"0s\" turns it off)", d)
		}
	}
	if c.ShutdownTimeout != "" && c.KillTimeout != "" && duration(c.ShutdownTimeout) >= duration(c.KillTimeout) {
		return fmt.Errorf("shutdown_timeout %s is not below kill_timeout %s: the stop would be killed before it parks everyone (leave shutdown_timeout out to derive it)", c.ShutdownTimeout, c.KillTimeout)
	}
	if c.Bundles != nil && c.Bundles.Archive == "" {
		return fmt.Errorf("bundles: archive is empty: give a directory or an http(s):// URL")
	}
	if c.TLS != nil {
		if c.TLS.CAFile == "" || c.TLS.CertFile == "" || c.TLS.KeyFile == "" {
			return fmt.Errorf("tls: ca_file, cert_file and key_file are all required")
		}
		if c.TLS.Cluster == "" {
			c.TLS.Cluster = tlsutil.DefaultCluster
		}
	}
	if err := c.finishConsulNomad(); err != nil {
		return err
	}
	if err := c.finishGateway(); err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, g := range c.Groups {
		if seen[g.Name] {
			return fmt.Errorf("group %q is configured twice", g.Name)
		}
		seen[g.Name] = true
		if g.Workers == 0 {
			g.Workers = 1
		}
		if g.Workers < 0 {
			return fmt.Errorf("group %q: workers must be positive", g.Name)
		}
		n := 0
		for _, set := range []bool{g.Plugin != nil, g.Builtin != "", g.Bundle != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("group %q: set exactly one of a plugin block, builtin or bundle", g.Name)
		}
		if p := g.Plugin; p != nil {
			switch p.Runtime {
			case "", RuntimeGoPlugin, RuntimePython3:
			default:
				return fmt.Errorf("group %q: plugin runtime %q: want %q or %q", g.Name, p.Runtime, RuntimeGoPlugin, RuntimePython3)
			}
			if p.Interpreter != "" && p.Runtime != RuntimePython3 {
				return fmt.Errorf("group %q: plugin interpreter %q is for runtime %q (a go-plugin worker is its own binary)", g.Name, p.Interpreter, RuntimePython3)
			}
			if t := p.Template; t != nil {
				if p.Runtime != RuntimePython3 {
					return fmt.Errorf("group %q: a plugin template is for runtime %q (a Go worker maps an engine image instead: docs/templates.md)", g.Name, RuntimePython3)
				}
				if mod, fn, ok := strings.Cut(t.Build, ":"); !ok || mod == "" || fn == "" {
					return fmt.Errorf("group %q: template build %q: give the build step as MODULE:FUNCTION", g.Name, t.Build)
				}
			}
		}
		if g.Bundle != "" {
			if _, err := bundle.ParseDigest(g.Bundle); err != nil {
				return fmt.Errorf("group %q: %w", g.Name, err)
			}
			if c.Bundles == nil {
				return fmt.Errorf("group %q runs bundle %s: add a bundles block naming the archive", g.Name, g.Bundle)
			}
		}
		if g.MemoryMaxMB < 0 {
			return fmt.Errorf("group %q: memory_max_mb must not be negative", g.Name)
		}
		if g.IdlePark != "" && g.IdlePark != "off" {
			if d, err := time.ParseDuration(g.IdlePark); err != nil || d < time.Second {
				return fmt.Errorf("group %q: idle_park %q: want a duration of at least 1s like \"15m\", or \"off\"", g.Name, g.IdlePark)
			}
		}
		if g.MaxPageBytes < 0 || g.MaxPersonBytes < 0 || g.MaxPagesPerConn < 0 || g.MaxPagesPerPerson < 0 {
			return fmt.Errorf("group %q: max_page_bytes, max_person_bytes, max_pages_per_conn and max_pages_per_person must not be negative (0 for the defaults)", g.Name)
		}
		if g.MaxPageBytes > 0 && g.MaxPersonBytes > 0 && g.MaxPersonBytes < g.MaxPageBytes {
			return fmt.Errorf("group %q: max_person_bytes (%d) is less than max_page_bytes (%d): one page could never reach its bound", g.Name, g.MaxPersonBytes, g.MaxPageBytes)
		}
		if _, err := host.ParseCheckpointInterval(g.CheckpointInterval); err != nil {
			return fmt.Errorf("group %q: %w", g.Name, err)
		}
		if g.Governance != nil && g.Governance.Enabled {
			if _, err := g.Governance.Policy(g.Workers); err != nil {
				return fmt.Errorf("group %q: governance: %w", g.Name, err)
			}
		}
	}
	return nil
}

// IsServer reports whether the agent is a raft voter (the server role).
// DeadServerCleanupAfter is server.dead_server_cleanup: default 2
// minutes, zero for never.
func (c *Config) DeadServerCleanupAfter() time.Duration {
	if c.Server.DeadServerCleanup == "" {
		return 2 * time.Minute
	}
	return duration(c.Server.DeadServerCleanup)
}

// RehomesOnStop reports whether a stop moves people to other agents first.
func (c *Config) RehomesOnStop() bool {
	if c.Host != nil && c.Host.RehomeOnStop != nil {
		return *c.Host.RehomeOnStop
	}
	return !c.IsServer()
}

func (c *Config) IsServer() bool {
	return c.Server == nil || c.Server.Enabled == nil || *c.Server.Enabled
}

// FrontEnabled reports whether the agent serves the front.
func (c *Config) FrontEnabled() bool {
	return c.Front == nil || c.Front.Enabled == nil || *c.Front.Enabled
}

// clustered reports whether other agents share the maps (worker ids then
// carry the agent's name).
func (c *Config) clustered() bool { return !c.IsServer() || c.Server.BootstrapExpect > 1 }

// runsCatalogGroup reports whether this agent runs a catalog group.
func (c *Config) runsCatalogGroup(name string) bool {
	if c.Host.Enabled != nil && !*c.Host.Enabled {
		return false
	}
	if len(c.Host.Groups) == 0 {
		return true
	}
	return slices.Contains(c.Host.Groups, name)
}

// finishHost checks the host role of an agent that is not a server; the
// server block's raft and peer-link fields then carry the host's.
func (c *Config) finishHost() error {
	if c.DataDir == "" {
		return fmt.Errorf("host: an agent that is not a server needs a data_dir")
	}
	if len(c.Host.Join) == 0 && c.Consul == nil {
		return fmt.Errorf("host: an agent that is not a server needs host.join (servers' admin addresses) or a consul block")
	}
	if c.Server.BootstrapExpect > 1 || len(c.Server.RetryJoin) > 0 {
		return fmt.Errorf("server: bootstrap_expect and retry_join are for servers; a host joins with host.join")
	}
	c.Server.BootstrapExpect = 1
	c.Server.RaftAddr, c.Server.RPCAddr, c.Server.RetryJoin = c.Host.RaftAddr, c.Host.RPCAddr, c.Host.Join
	if c.Server.RPCAddr == "" {
		c.Server.RPCAddr = "127.0.0.1:4648"
	}
	return nil
}

// tokenFrom sets *token from *file (white space around it ignored), if
// a file is given, and clears *file: the configuration is finished once
// more when the agent starts. block and field ("token", "read_token") name
// them for the errors.
func tokenFrom(token, filep *string, block, field string) error {
	file := *filep
	if file == "" {
		return nil
	}
	*filep = ""
	if *token != "" {
		return fmt.Errorf("%s: set %s or %s_file, not both", block, field, field)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: reading %s_file: %w", block, field, err)
	}
	*token = strings.TrimSpace(string(b))
	return nil
}

// finishConsulNomad fills the consul and nomad blocks' defaults.
func (c *Config) finishConsulNomad() error {
	if k := c.Consul; k != nil {
		if k.Address == "" {
			k.Address = cmp.Or(os.Getenv("CONSUL_HTTP_ADDR"), "127.0.0.1:8500")
		}
		if err := tokenFrom(&k.Token, &k.TokenFile, "consul", "token"); err != nil {
			return err
		}
		if k.Token == "" {
			k.Token = os.Getenv("CONSUL_HTTP_TOKEN")
		}
		k.Prefix = cmp.Or(k.Prefix, "stickyd/")
		if !strings.HasSuffix(k.Prefix, "/") {
			k.Prefix += "/"
		}
		k.ServerService = cmp.Or(k.ServerService, "stickyd-server")
	}
	n := c.Nomad
	if n == nil {
		return nil
	}
	if !c.IsServer() {
		return fmt.Errorf("nomad: only servers register group jobs")
	}
	n.Address = cmp.Or(n.Address, os.Getenv("NOMAD_ADDR"), "http://127.0.0.1:4646")
	if err := tokenFrom(&n.Token, &n.TokenFile, "nomad", "token"); err != nil {
		return err
	}
	n.Token = cmp.Or(n.Token, os.Getenv("NOMAD_TOKEN"))
	n.Driver = cmp.Or(n.Driver, "exec")
	if n.Driver != "exec" && n.Driver != "raw_exec" {
		return fmt.Errorf("nomad: driver %q: want \"exec\" or \"raw_exec\"", n.Driver)
	}
	if (n.StickydArtifact == "") == (n.StickydCommand == "") {
		return fmt.Errorf("nomad: set exactly one of stickyd_artifact (a tarball URL) and stickyd_command (a path on the clients)")
	}
	if n.Archive == "" && c.Bundles != nil && (strings.HasPrefix(c.Bundles.Archive, "http://") || strings.HasPrefix(c.Bundles.Archive, "https://")) {
		n.Archive = c.Bundles.Archive
	}
	if n.Archive == "" {
		return fmt.Errorf("nomad: archive is empty: give the bundle archive's http(s) URL as the Nomad clients reach it")
	}
	if c.Consul == nil {
		return fmt.Errorf("nomad: group jobs find the servers through Consul: add a consul block")
	}
	if (n.HostCertFile == "") != (n.HostKeyFile == "") {
		return fmt.Errorf("nomad: set host_cert_file and host_key_file together")
	}
	if c.TLS != nil && n.HostCertFile == "" {
		return fmt.Errorf("nomad: with a tls block the group jobs' hosts need a certificate: set host_cert_file and host_key_file (stickyd tls cert create -host)")
	}
	if n.Hosts < 0 || n.MaxHosts < 0 || n.CPU < 0 || n.MemoryMB < 0 || n.DiskMB < 0 {
		return fmt.Errorf("nomad: hosts, max_hosts, cpu, memory_mb and disk_mb must not be negative (0 for the defaults)")
	}
	n.Hosts = max(n.Hosts, 1)
	n.MaxHosts = max(n.MaxHosts, n.Hosts)
	return nil
}

// duration parses a checked duration ("" is zero: the default).
func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}

func (f *FrontConfig) frameTimeout() time.Duration { return duration(f.FrameTimeout) }

// finish checks the front block's cookie keys and rate limit.
func (f *FrontConfig) finish() error {
	if f.CookieKeyFile != "" && len(f.CookieKeyFiles) > 0 {
		return fmt.Errorf("front: set cookie_key_file or cookie_key_files (the key ring), not both")
	}
	for i, p := range f.CookieKeyFiles {
		if p == "" {
			return fmt.Errorf("front: cookie_key_files[%d] is empty", i)
		}
		if slices.Contains(f.CookieKeyFiles[:i], p) {
			return fmt.Errorf("front: cookie_key_files lists %s twice", p)
		}
	}
	if !(f.FrameRate >= 0) || f.FrameBurst < 0 {
		return fmt.Errorf("front: frame_rate and frame_burst must not be negative (0 is no limit)")
	}
	if f.FrameBurst > 0 && f.FrameRate == 0 {
		return fmt.Errorf("front: frame_burst = %d without a frame_rate limits nothing: set frame_rate too", f.FrameBurst)
	}
	for name, d := range map[string]string{"idle_timeout": f.IdleTimeout, "body_timeout": f.BodyTimeout} {
		if d == "" {
			continue
		}
		if v, err := time.ParseDuration(d); err != nil || v < time.Second {
			return fmt.Errorf("front: %s %q: want a duration of at least \"1s\", like \"90s\"", name, d)
		}
	}
	if f.MaxHeaderBytes != 0 && f.MaxHeaderBytes < 4096 {
		return fmt.Errorf("front: max_header_bytes = %d: want at least 4096 (0 for the default, 65536)", f.MaxHeaderBytes)
	}
	if r := f.NewcomerRate; r != nil && !(*r >= 0) || f.NewcomerBurst < 0 {
		return fmt.Errorf("front: newcomer_rate and newcomer_burst must not be negative (newcomer_rate = 0 turns the limit off)")
	}
	if f.MaxHeldPerUser < 0 || f.MaxHeld < 0 {
		return fmt.Errorf("front: max_held_per_user and max_held must not be negative (0 for the defaults)")
	}
	if f.MaxConnections < 0 {
		return fmt.Errorf("front: max_connections = %d: want a number of connections (0 derives it from the file limit)", f.MaxConnections)
	}
	if f.MaxBodyBytes < 0 || f.MaxMessageBytes < 0 || f.BodyBudgetBytes < 0 {
		return fmt.Errorf("front: max_body_bytes, max_message_bytes and body_budget_bytes must not be negative (0 for the defaults: 10 MiB, 1 MiB and 256 MiB)")
	}
	if b := f.BodyBudgetBytes; b > 0 && (b < f.MaxBodyBytes || b < f.MaxMessageBytes) {
		return fmt.Errorf("front: body_budget_bytes = %d is less than one request may send (max_body_bytes %d, max_message_bytes %d)", b, f.MaxBodyBytes, f.MaxMessageBytes)
	}
	if f.CookieTTL != "" {
		if d, err := time.ParseDuration(f.CookieTTL); err != nil || d < time.Minute {
			return fmt.Errorf("front: cookie_ttl %q: want a duration of at least \"1m\", like \"24h\"", f.CookieTTL)
		}
	}
	return nil
}

// StopTimeout is how long a stop may take; default 2 minutes.
func (c *Config) StopTimeout() time.Duration {
	if d := duration(c.ShutdownTimeout); d > 0 {
		return d
	}
	if k := duration(c.KillTimeout); k > 0 {
		return k - max(k/10, min(2*time.Second, k/2))
	}
	return 2 * time.Minute
}
