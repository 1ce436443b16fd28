// Package agent wires the roles of one stickyd process from its
// configuration: the raft member and supervisor (server), the worker pool
// (host) and the front. `stickyd agent` and `stickyd dev` both run an Agent;
// dev only fills the configuration with embedded defaults.
package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/api/client"
	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/front"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway/cluster"
	"github.com/stickyd/stickyd/internal/governance"
	"github.com/stickyd/stickyd/internal/groups"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/keyring"
	"github.com/stickyd/stickyd/internal/lifecycle"
	"github.com/stickyd/stickyd/internal/maintenance"
	"github.com/stickyd/stickyd/internal/monitor"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/nomad"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/raftnode"
	"github.com/stickyd/stickyd/internal/server"
	"github.com/stickyd/stickyd/internal/supervisor"
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// Builtin is an application compiled into stickyd, runnable in-process
// (groups.Builtin).
type Builtin = groups.Builtin

// Agent is one running stickyd process.
type Agent struct {
	cfg  *Config
	log  hclog.Logger
	fsm  *fsm.FSM
	raft *raftnode.Node
	// leadership owns raft's leadership notifications and runs the
	// leader-only tasks while this server leads.
	leadership *server.Leadership
	pool       *host.Pool
	park       park.Store
	held       *park.Tiered // a.park, with data on disk
	// checkpointed is how many people the crash checkpoint journal held
	// at start, once it is loaded (behind the start).
	checkpointed atomic.Int64
	mover        *move.Mover
	sup          *supervisor.Supervisor
	restart      RestartReport
	// life parks everyone on the way down and finds them on the way up.
	life     *lifecycle.Parker
	front    *front.Front
	server   *http.Server
	listener net.Listener
	served   chan error
	admin    *http.Server
	adminLn  net.Listener
	// shutdownOnce guards parking on the way down.
	shutdownOnce sync.Once
	// started is set once Start succeeded (Start's and Shutdown's
	// goroutine only); up is whether the agent serves, for health checks
	// on other goroutines: set with started, cleared when Shutdown begins.
	started bool
	up      atomic.Bool
	// draining is set when the agent starts moving its people off on
	// its way down; register publishes it.
	draining atomic.Bool
	token    string
	registry *prometheus.Registry
	// tls is mutual TLS on the raft and peer-link ports; nil without a
	// tls block.
	tls *tlsutil.Manager
	// remote calls the other agents' admin APIs; cluster is this agent's
	// membership and the log it writes through (set once raft is up;
	// clusterSet for the admin handlers that may run before).
	remote     *server.Remote
	cluster    *server.Cluster
	clusterSet atomic.Pointer[server.Cluster]
	// mu guards restart.
	mu sync.Mutex
	// registerMu orders the agent's registrations of its workers.
	registerMu sync.Mutex
	// api is the full admin API (an http.Handler), stored once ready.
	api atomic.Value
	// parts are the running subsystems, in the order they started.
	parts      parts
	router     *host.Router
	links      *host.LinkServer // the peer links served; nil without rpc_addr
	govern     *governance.Executor
	stopGovern chan struct{}
	// idle parks idle people (lifecycle.idle_park) if it is on.
	idle *lifecycle.IdleParker
	// forget stamps who the front saw and forgets who nobody saw
	// (lifecycle.forget_after); activity is the front's record of it.
	forget *lifecycle.Forgetter
	// disk watches the data directory's free space (nil without one).
	disk     *server.DiskGuard
	stopDisk chan struct{}
	activity *front.Activity
	// calls serve what workers send unasked: tables, the store, gateway
	// calls and logouts.
	calls *host.WorkerCalls
	// monitor composes the monitor's reading of the whole pool.
	monitor *monitor.Cluster
	// launchers builds the groups' launchers; groups keeps the pool in
	// step with the catalog's groups (from Start on).
	launchers *groups.Launchers
	groups    *groups.Keeper
	// frontAddr and rpcAddr are the listeners' addresses, published once
	// they listen: the admin API answers before the front opens.
	frontAddr, rpcAddr atomic.Pointer[string]
	// consul is the client of the consul block, made once.
	consulOnce sync.Once
	consul     *consul.Client
	// nomad keeps the groups' Nomad jobs (a leader task) and serves the
	// operator's tear-down.
	nomad *nomad.Keeper
	// gw is the AI gateway, with a gateway block (its listeners, and
	// the ledger's last charges, are its own).
	gw *cluster.Gateway
	// maint tells the workers the maintenance windows and serves them.
	maint *maintenance.Keeper
	// keyring is this agent's side of the cookie key ring.
	keyring *keyring.Keeper
}

// New checks the configuration and prepares an agent; Start runs it.
// builtins are the in-process applications groups may name.
func New(cfg *Config, builtins map[string]Builtin, log hclog.Logger) (*Agent, error) {
	if log == nil {
		log = hclog.NewNullLogger()
	}
	if err := cfg.Finish(); err != nil {
		return nil, fmt.Errorf("checking configuration: %w", err)
	}
	a := &Agent{cfg: cfg, log: log}
	var err error
	if a.launchers, err = a.newLaunchers(builtins); err != nil {
		return nil, err
	}
	specs, err := a.configuredSpecs()
	if err != nil {
		return nil, err
	}
	a.pool = host.New(log.Named("host"), specs)
	return a, nil
}

// Start brings the roles up in order: raft, workers, front. On error,
// whatever started is stopped again.
func (a *Agent) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			a.Shutdown(context.Background())
		}
	}()
	a.fsm = fsm.New()
	a.registry = prometheus.NewRegistry()
	// What every Go exporter has: the runtime's and the process's own.
	a.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if a.cfg.DataDir == "" {
		a.park = park.NewMemStore()
	} else {
		files, err := park.NewFileStore(filepath.Join(a.cfg.DataDir, "park"))
		if err != nil {
			return err
		}
		// Moved people's packages wait in memory for their next frame;
		// after heldFlush on disk, as a crash checkpoint would be.
		if a.held, err = park.NewTiered(files, a.cfg.Move.Held(), heldFlush); err != nil {
			return err
		}
		for _, p := range a.held.SetAside() {
			a.log.Warn("a damaged pack of parked packages was set aside; its people wake from their checkpoints", "pack", p)
		}
		a.park = a.held
		a.parts.add("parked packages held in memory", nil, func(context.Context) error { return a.held.Close() })
	}
	if a.cfg.TLS != nil {
		if err := a.startTLS(); err != nil {
			return err
		}
	}
	// The admin token is the cluster's: this agent's API asks for it, and
	// its calls to the others (remote) send it.
	if a.token, err = server.AdminToken(server.TokenSource{Token: a.cfg.Admin.Token, File: a.cfg.Admin.TokenFile, DataDir: a.cfg.DataDir}, a.log); err != nil {
		return err
	}
	a.remote = server.NewRemote(a.token, a.adminHTTPS(), a.adminTransport())
	// The admin API and the peer links listen first: servers find each
	// other through them.
	a.router = host.NewRouter(host.RouterConfig{Name: a.cfg.Name, Pool: a.pool, Maps: a.fsm, TLS: a.tls, Fetch: a.remote.Fetch})
	a.parts.add("peer links dialled", nil, func(context.Context) error { a.router.Close(); return nil })
	if err := a.startAdmin(); err != nil {
		return err
	}
	a.parts.add("admin API", nil, func(context.Context) error { return a.admin.Close() })
	if a.cfg.Server.RPCAddr != "" {
		if a.links, err = host.ServeLinks(host.LinkServerConfig{Addr: a.cfg.Server.RPCAddr, Pool: a.pool, TLS: a.tls}); err != nil {
			return err
		}
		addr := a.links.Addr()
		a.rpcAddr.Store(&addr)
		a.parts.add("peer links served", nil, func(context.Context) error { a.links.Stop(); return nil })
	}
	alone := a.cfg.IsServer() && a.cfg.Server.BootstrapExpect == 1
	rcfg := raftnode.Config{ID: a.cfg.Name, Bootstrap: alone, Solo: alone, Logger: a.log,
		SnapshotThreshold: a.cfg.Server.SnapshotThreshold, TrailingLogs: a.cfg.Server.TrailingLogs, TLS: a.tls,
		SnapshotOnStop: true}
	if a.cfg.DataDir != "" {
		rcfg.DataDir, rcfg.BindAddr, rcfg.Advertise = a.cfg.DataDir, a.cfg.Server.RaftAddr, a.cfg.Server.RaftAdvertise
	}
	// The cookie keys are read before raft opens: a missing key file
	// stops the start before anything else does.
	mine, err := keyring.Read(keyring.Files{Ring: a.cfg.Front.CookieKeyFiles, File: a.cfg.Front.CookieKeyFile,
		DataDir: a.cfg.DataDir, RanBefore: ranBefore(a.cfg.DataDir)})
	if err != nil {
		return err
	}
	notify := make(chan bool, 16)
	rcfg.Notify = notify
	a.raft, err = raftnode.New(rcfg, a.fsm)
	if err != nil {
		return err
	}
	a.parts.add("raft", nil, func(context.Context) error { return a.raft.Shutdown() })
	a.cluster = server.NewCluster(server.Config{Name: a.cfg.Name, Server: a.cfg.IsServer(),
		BootstrapExpect: a.cfg.Server.BootstrapExpect, DeadServerCleanup: a.cfg.DeadServerCleanupAfter(),
		RetryJoin: a.cfg.Server.RetryJoin, Discover: a.discoverServers, Raft: a.raft, Maps: a.fsm, Remote: a.remote,
		Self: a.self, Started: a.isStarted, Logger: a.log})
	a.clusterSet.Store(a.cluster)
	a.keyring = keyring.New(keyring.Config{Mine: mine, Maps: a.fsm, Log: a.raft, Leader: a.raft,
		Forward: a.cluster.Forward, Registry: a.registry, Logger: a.log})
	// The leader's tasks are added as their parts start; the owner of the
	// notifications starts last (they wait in the channel meanwhile).
	a.leadership = server.New(a.log.Named("leadership"), notify, a.raft.Barrier)
	if a.cfg.Server.BootstrapExpect > 1 || !a.cfg.IsServer() {
		jctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		join := a.cluster.Join
		if !a.cfg.IsServer() {
			join = a.cluster.JoinAsHost
		}
		err := join(jctx)
		cancel()
		if err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := a.raft.WaitLeader(wctx); err != nil {
		return err
	}
	log := a.cluster
	a.fsm.SetEntryGate(a.cluster.AllowEntry)
	freezeWait, requestWait := a.cfg.Move.Waits()
	a.mover = move.New(move.Config{FreezeTimeout: freezeWait, RequestWait: requestWait, Logger: a.log.Named("move"), Registry: a.registry, Encode: a.fsm.EncodeEntry},
		a.fsm, log, a.router, a.park)
	a.sup = supervisor.New(a.fsm, log, a.router, a.mover)
	a.sup.SetBatchGate(func() bool { return a.cluster.AllowEntry(fsm.ConnectBatchRequestType) })
	a.idle = lifecycle.NewIdleParker(lifecycle.IdleConfig{Idle: a.cfg.Lifecycle.Idle(), Groups: a.cfg.idleParks(),
		Pool: a.pool, Supervisor: a.sup, Mover: a.mover, Park: a.park, DiskFull: func() bool { return a.disk.Full() }, Logger: a.log})
	a.life = lifecycle.New(lifecycle.Config{Name: a.cfg.Name, DataDir: a.cfg.DataDir, StopTimeout: a.cfg.StopTimeout(),
		FreezeTimeout: duration(a.cfg.Move.FreezeTimeout), RehomeOnStop: a.cfg.RehomesOnStop(),
		Maps: a.fsm, Supervisor: a.sup, Pool: a.pool, Park: a.park, Mover: a.mover, Log: log, Leader: a.raft, Router: a.router,
		Idle: a.idle, Checkpoints: a.startCheckpoints, Logger: a.log,
		Drain: func(ctx context.Context) error { a.draining.Store(true); return a.register(ctx) }})
	rep, err := a.life.Recover(ctx)
	if err != nil {
		return err
	}
	if a.raft.IsLeader() {
		if rep.AbortedMoves, err = a.abortStuckMoves(wctx); err != nil {
			return err
		}
	}
	a.mu.Lock()
	a.restart = rep
	a.mu.Unlock()
	a.leadership.Add("roll back interrupted moves, seed the cookie key ring", a.establishLeadership)
	if a.cfg.IsServer() && a.cfg.Server.BootstrapExpect > 1 {
		a.startLoop("membership", a.cluster.Membership)
		a.leadership.Add("autopilot", a.cluster.Autopilot)
	}
	a.pool.Parcels = host.NewClusterParcels(host.ClusterParcelsConfig{Name: a.cfg.Name, Store: a.park, Maps: a.fsm,
		Fetch: a.remote.Fetch, Hold: a.hold})
	a.pool.ProbeInterval, a.pool.ProbeMisses = duration(a.cfg.Probe.Interval), a.cfg.Probe.Misses
	a.pool.BusyTimeout = duration(a.cfg.Probe.BusyTimeout)
	a.pool.Woken = a.life.Woken
	a.pool.Offline = a.life.Offline()
	if a.calls, err = host.NewWorkerCalls(host.WorkerCallsConfig{Maps: a.fsm, Log: log, Router: a.router,
		Gateway: a.gatewayFromWorker, Forget: func(worker, user string) { lifecycle.ForgetLoggedOut(a.sup, a.log, worker, user) },
		Logger: a.log, Registry: a.registry}); err != nil {
		return err
	}
	if a.monitor, err = a.newMonitor(); err != nil {
		return err
	}
	a.calls.Start()
	a.maint = maintenance.New(maintenance.Config{Maps: a.fsm, Log: log, Pool: a.pool, KV: a.consulKV,
		View: a.monitor.View, Logger: a.log})
	told := make(chan struct{})
	go func() {
		defer close(told)
		a.maint.Tell(a.calls.Stopping())
	}()
	a.parts.add("tables, the store and maintenance telling", nil, func(context.Context) error {
		a.calls.Stop() // no table work may reach raft once it stops
		<-told
		return nil
	})
	a.leadership.Add("expire the store's grants", a.calls.ExpireGrants)
	a.pool.FromWorker, a.pool.Ended, a.pool.Greeting = a.calls.FromWorker, a.calls.Ended, a.maint.Greeting
	// The gateway is up before any worker may call it.
	if err := a.startGateway(ctx); err != nil {
		return err
	}
	a.log.Info("starting workers", "workers", len(a.pool.Workers()))
	// The pool's part is added first: a pool that started some workers
	// and failed stops them.
	a.parts.add("workers", func(context.Context) { a.pool.Stopping() }, a.stopWorkers)
	if err := a.pool.Start(ctx); err != nil {
		return fmt.Errorf("starting workers: %w", err)
	}
	a.sup.SetLogger(a.log.Named("supervisor"))
	if len(a.cfg.Groups) > 0 {
		a.sup.SetFallbackDefault(a.cfg.Groups[0].Name)
	}
	if a.govern, err = a.newGovernance(); err != nil {
		return fmt.Errorf("configuring governance: %w", err)
	}
	// The catalog's groups (replicated) start before anyone is routed: a
	// parked person may wake on one of them.
	a.groups = groups.New(groups.Config{Agent: a.cfg.Name, Configured: configuredGroups(a.cfg), Launchers: a.launchers,
		Pool: a.pool, Maps: a.fsm, Directory: a.sup, Ready: a.router.Ready, Runs: a.cfg.runsCatalogGroup,
		Register: a.register, Governor: a.govern, Logger: a.log})
	a.groups.Sync(ctx)
	a.startLoop("catalog groups", a.groups.Run)
	if err := a.register(wctx); err != nil {
		return fmt.Errorf("registering this agent's workers: %w", err)
	}
	a.served = make(chan error, 1)
	if a.cfg.DataDir != "" {
		g, err := server.NewDiskGuard(server.DiskConfig{Dir: a.cfg.DataDir, Pause: a.pool.PauseCheckpoints,
			Resume: a.pool.ResumeCheckpoints, Registry: a.registry, Logger: a.log})
		if err != nil {
			return fmt.Errorf("disk metrics: %w", err)
		}
		g.Check()
		a.disk, a.stopDisk = g, make(chan struct{})
		a.sup.SetAdmission(g.Admit)
		go g.Run(a.stopDisk)
		a.parts.add("disk guard", func(context.Context) { g.Stop() }, func(context.Context) error { close(a.stopDisk); return nil })
	}
	if a.cfg.FrontEnabled() {
		a.activity = front.NewActivity()
	}
	if a.activity != nil || (a.pool != nil && a.cfg.Lifecycle.Forget() > 0) {
		if a.forget, err = lifecycle.NewForgetter(lifecycle.ForgetConfig{After: a.cfg.Lifecycle.Forget(), Activity: a.activity,
			Supervisor: a.sup, Pool: a.pool, Mover: a.mover, DiskFull: func() bool { return a.disk.Full() }, Registry: a.registry, Logger: a.log}); err != nil {
			return fmt.Errorf("lifecycle metrics: %w", err)
		}
		a.startLoop("forgetting", a.forget.Run)
	}
	// The admin API is whole before the front answers its health.
	a.nomad = nomad.New(a.nomadConfig())
	a.api.Store(api.Handler(api.Config{Token: a.token, ReadToken: a.cfg.Admin.ReadToken, Supervisor: people{sup: a.sup, maps: a.fsm, gw: a.gw}, Gatherer: a.registry, Logger: a.log.Named("api"),
		Workers: a.monitor.Workers, Status: a.status,
		Events: func() any { return a.govern.Events() },
		Groups: a.sup, GroupsView: a.groupsView, CheckGovernance: governance.CheckGroup, CheckBundle: a.launchers.CheckBundle,
		Monitor:      func(ctx context.Context, q fsm.UserQuery) (any, error) { return a.monitor.Page(ctx, q) },
		MonitorLocal: func(q api.LocalQuery) any { return a.monitor.Local(q) },
		Maintenance:  a.maint, Extra: a.extraRoutes, JobLog: a.cluster.Jobs(), AgentName: a.cfg.Name}))
	if a.cfg.FrontEnabled() {
		if err := a.startFront(ctx); err != nil {
			return err
		}
	}
	if a.govern != nil {
		a.stopGovern = make(chan struct{})
		go a.govern.Run(duration(a.cfg.Probe.Interval), a.stopGovern)
		// No governance move may race the parking.
		a.parts.add("governance", nil, func(context.Context) error { close(a.stopGovern); a.govern.Wait(); return nil })
	}
	if a.idle.On() {
		a.startLoop("idle parking", a.idle.Run)
	}
	// The leader's publishing loops the configuration asks for.
	if k := a.cfg.Consul; k != nil && a.cfg.IsServer() && (k.Mirror == nil || *k.Mirror) {
		mirror := consul.NewPublisher(consul.PublisherConfig{Maps: a.fsm, Client: a.consulClient, GroupOf: a.router.GroupOf,
			LocalGroupOf: a.pool.GroupOf, Name: a.cfg.Name, GroupsView: a.groupsView, Logger: a.log})
		a.leadership.Add("publish the placement registry to Consul", mirror.Run)
	}
	if a.cfg.Nomad != nil {
		a.leadership.Add("keep the groups' Nomad jobs", a.nomad.Run)
	}
	if a.cfg.Consul != nil && a.cfg.IsServer() {
		a.leadership.Add("copy the maintenance windows from Consul", a.maint.CopyFromConsul)
	}
	// Every leader task is added: the owner of raft's notifications
	// starts, and stops first (no leader task races the parking).
	a.leadership.Start()
	a.parts.add("leader tasks", nil, func(context.Context) error { a.leadership.Stop(); return nil })
	a.started = true
	a.up.Store(true)
	return nil
}

// frontDrain is how long a stop lets the front's answers to the requests it
// held go out before it closes the connections that remain (a long pull).
const frontDrain = 2 * time.Second

// startLoop runs loop until the agent stops, as a part of its own.
func (a *Agent) startLoop(name string, loop func(stop <-chan struct{})) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		loop(stop)
	}()
	a.parts.add(name, nil, func(context.Context) error { close(stop); <-done; return nil })
}

// startFront serves the HTTP and WebSocket front.
func (a *Agent) startFront(ctx context.Context) error {
	keys, err := a.keyring.Settle(ctx)
	if err != nil {
		return err
	}
	a.front, err = front.New(front.Config{
		Directory:       a.sup,
		Dispatcher:      a.router,
		Activity:        a.activity,
		CookieKeys:      keys,
		SecureCookie:    a.cfg.Front.SecureCookie,
		CookieTTL:       duration(a.cfg.Front.CookieTTL),
		BodyTimeout:     a.cfg.Front.bodyTimeout(),
		NewcomerRate:    a.cfg.Front.newcomerRate(),
		NewcomerBurst:   a.cfg.Front.NewcomerBurst,
		FrameRate:       a.cfg.Front.FrameRate,
		FrameBurst:      a.cfg.Front.FrameBurst,
		MaxMessageBytes: a.cfg.Front.MaxMessageBytes,
		MaxBodyBytes:    a.cfg.Front.MaxBodyBytes,
		BodyBudget:      a.cfg.Front.BodyBudgetBytes,
		FrameTimeout:    a.cfg.Front.frameTimeout(),
		RequestTimeout:  duration(a.cfg.Front.RequestTimeout),
		BarrierWait:     a.barrierWait(),
		MaxHeldPerUser:  a.cfg.Front.MaxHeldPerUser,
		MaxHeld:         a.cfg.Front.MaxHeld,
		Registry:        a.registry,
		Health:          a.health,
		HealthToken:     a.token,
		HealthReadToken: a.cfg.Admin.ReadToken,
		ExtraWait:       a.maint.ExtraWait,
		Monitor:         monitor.WebHandlerWithReadToken(a.token, a.cfg.Admin.ReadToken, a.monitor.Page, a.registry),
		Logger:          a.log.Named("front"),
	})
	if err != nil {
		return err
	}
	a.startLoop("cookie key ring watch", func(stop <-chan struct{}) { a.keyring.Watch(stop, a.front.SetCookieKeys) })
	a.listener, err = net.Listen("tcp", a.cfg.Front.Address)
	if err != nil {
		return fmt.Errorf("front: listening on %s: %w", a.cfg.Front.Address, err)
	}
	maxConns, files := front.Connections(a.cfg.Front.MaxConnections)
	a.listener = a.front.Limit(a.listener, maxConns)
	frontAddr := a.listener.Addr().String()
	a.frontAddr.Store(&frontAddr)
	a.log.Info("front bounds", "max_connections", maxConns, "file_limit", files,
		"idle_timeout", a.cfg.Front.idleTimeout(), "body_timeout", a.cfg.Front.bodyTimeout(), "max_header_bytes", a.cfg.Front.maxHeaderBytes())
	srv := &http.Server{Handler: a.front, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: a.cfg.Front.idleTimeout(), MaxHeaderBytes: a.cfg.Front.maxHeaderBytes()}
	ln := a.listener
	a.server = srv
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		a.served <- err
	}()
	a.parts.add("front", nil, func(ctx context.Context) error {
		// The front answers the site requests it still holds (503 with
		// Retry-After) and closes its WebSockets (1001); the server lets
		// those answers out, for a moment, then closes what is left.
		a.front.Close()
		sctx, cancel := context.WithTimeout(ctx, frontDrain)
		defer cancel()
		_ = srv.Shutdown(sctx)
		return srv.Close()
	})
	a.log.Info("front listening", "address", a.Addr())
	return nil
}

// startAdmin serves the admin API.
func (a *Agent) startAdmin() error {
	h := api.Cluster(api.ClusterConfig{Token: a.token, Logger: a.log.Named("api"),
		Self: func() any { return a.self() },
		Apply: func(ctx context.Context, entry []byte) (any, uint64, int, error) {
			c := a.clusterSet.Load()
			if c == nil {
				return nil, 0, http.StatusServiceUnavailable, errors.New("raft is not up yet")
			}
			return c.ServeApply(ctx, entry)
		},
		Park: func(digest string) ([]byte, error) {
			return a.park.Get(digest)
		},
		PutPark: func(digest string, b []byte) error {
			if park.Digest(b) != digest {
				return fmt.Errorf("the package's digest is %s, not %s", park.Digest(b), digest)
			}
			_, err := a.hold(b)
			return err
		},
		Member: func(ctx context.Context, req api.MemberRequest) (int, error) {
			c := a.clusterSet.Load()
			if c == nil {
				return http.StatusServiceUnavailable, errors.New("raft is not up yet")
			}
			return c.ServeMember(ctx, req)
		},
		Health: func() (bool, any) {
			c := a.clusterSet.Load()
			if c == nil {
				return false, map[string]string{"status": "starting", "error": "raft is not up yet"}
			}
			return c.Health()
		},
		Rest: func() http.Handler {
			h, _ := a.api.Load().(http.Handler)
			return h
		},
	})
	var err error
	a.adminLn, err = net.Listen("tcp", a.cfg.Admin.Address)
	if err != nil {
		return fmt.Errorf("admin API: listening on %s: %w", a.cfg.Admin.Address, err)
	}
	if a.adminHTTPS() {
		a.adminLn = tls.NewListener(a.adminLn, a.tls.HTTPSServerTLS())
	}
	srv, ln := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}, a.adminLn
	a.admin = srv
	go func() { _ = srv.Serve(ln) }()
	a.log.Info("admin API listening", "address", a.AdminAddr(), "https", a.adminHTTPS())
	return nil
}

// adminHTTPS says the admin APIs speak HTTPS (tls.https).
// barrierWait is front.barrier_wait, by default move.request_wait: the
// frames a move holds wait as long as the move may wait for the person's
// slow request.
func (a *Agent) barrierWait() time.Duration {
	if d := duration(a.cfg.Front.BarrierWait); d > 0 {
		return d
	}
	_, request := a.cfg.Move.Waits()
	return request
}

func (a *Agent) adminHTTPS() bool { return a.tls != nil && a.cfg.TLS.HTTPS }

// adminTransport is the transport of the calls to other agents' admin
// APIs: with tls.https, TLS checking that the other side is an agent of
// the cluster (a server or a host) as the peer links do.
func (a *Agent) adminTransport() *http.Transport {
	var tc *tls.Config
	if a.adminHTTPS() {
		tc = a.tls.ClientTLS(tlsutil.RoleServer, tlsutil.RoleHost)
	}
	return client.NewTransport(tc)
}

// ranBefore reports whether dataDir holds raft state from an earlier run.
func ranBefore(dataDir string) bool {
	if dataDir == "" {
		return false
	}
	entries, err := os.ReadDir(filepath.Join(dataDir, "raft"))
	return err == nil && len(entries) > 0
}

// AdminAddr is the admin API's listening address.
func (a *Agent) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Token is the admin token in force.
func (a *Agent) Token() string { return a.token }

// Addr is the front's listening address.
func (a *Agent) Addr() string {
	if p := a.frontAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// rpcAddress is the address peer links are served on, or "" before they
// are (or on an agent without them).
func (a *Agent) rpcAddress() string {
	if p := a.rpcAddr.Load(); p != nil {
		return *p
	}
	return ""
}

// Pool is the agent's worker pool.
func (a *Agent) Pool() *host.Pool { return a.pool }

// FSM returns the agent's replica of the maps (tests and benchmarks read it).
func (a *Agent) FSM() *fsm.FSM { return a.fsm }

// Supervisor is the agent's supervisor.
func (a *Agent) Supervisor() *supervisor.Supervisor { return a.sup }

// Park is the agent's store of parked packages.
func (a *Agent) Park() park.Store { return a.park }

// extraRoutes adds the gateway's and the operator's routes to the API.
func (a *Agent) extraRoutes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	a.gw.Routes(mux, wrap) // none without a gateway
	a.govern.Routes(mux, wrap)
	if a.cfg.IsServer() {
		a.cluster.OperatorRoutes(mux, wrap)
		a.nomad.Routes(mux, wrap)
		a.keyring.Routes(mux, wrap)
	}
}

// isStarted reports whether Start has succeeded.
func (a *Agent) isStarted() bool { return a.up.Load() }

// raftNode is the raft member once it is up, nil before.
func (a *Agent) raftNode() *raftnode.Node {
	if c := a.clusterSet.Load(); c != nil {
		return c.Raft()
	}
	return nil
}

// Served reports the front's end: nil after Shutdown, the error otherwise.
func (a *Agent) Served() <-chan error { return a.served }

func (a *Agent) health() map[string]any {
	conns, users := a.fsm.Counts()
	return map[string]any{"workers": a.pool.Workers(), "ready": a.pool.Ready(), "ready_workers": a.pool.Ready(), "connections": conns, "users": users,
		"restart": a.Restart(), "disk_full": a.disk != nil && a.disk.Full()}
}

// RestartReport says what the agent found of its last stop.
type RestartReport = lifecycle.RestartReport

// ParkProgress, if set, is told of each person parked while going down.
type ParkProgress = lifecycle.ParkProgress

// restartDir is where park folders live (and the crash checkpoints below).
func (a *Agent) restartDir() string { return lifecycle.Dir(a.cfg.DataDir) }

// Restart reports what the agent found of its last stop.
func (a *Agent) Restart() RestartReport {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.restart
	if n := a.checkpointed.Load(); n > 0 {
		r.Checkpointed = int(n)
	}
	return r
}

// Status is the agent's view of the cluster, for `stickyd status`.
type Status struct {
	Name    string            `json:"name"`
	Leader  string            `json:"leader"`
	Members []raftnode.Peer   `json:"members"`
	Workers []host.WorkerInfo `json:"workers"`
	Users   int               `json:"users"`
	Conns   int               `json:"connections"`
	Index   uint64            `json:"applied_index"`
	// Term is raft's current term: it grows at every election.
	Term uint64 `json:"term"`
}

func (a *Agent) status() any {
	peers, _ := a.raft.Peers()
	_, leader := a.raft.Leader()
	conns, users := a.fsm.Counts()
	return Status{Name: a.cfg.Name, Leader: leader, Members: peers, Workers: a.pool.Workers(), Users: users, Conns: conns, Index: a.fsm.Index(), Term: a.raft.Raft.CurrentTerm()}
}

// snapshotForStart has this member's raft take a snapshot on the way
// down, once everyone is parked: the next start restores the maps from it
// and has no log to replay (at 100,000 people, the stop's own entries take
// about a second to apply again).
func (a *Agent) snapshotForStart() {
	if a.raft == nil || a.raft.Raft == nil || a.cfg.DataDir == "" || !a.started {
		return
	}
	start := time.Now()
	err := a.raft.Raft.Snapshot().Error()
	switch {
	case errors.Is(err, raft.ErrNothingNewToSnapshot):
	case err != nil:
		a.log.Warn("taking a raft snapshot before stopping; the next start replays the log", "error", err)
	default:
		a.log.Info("raft snapshot taken for the next start", "took", time.Since(start).Round(time.Millisecond))
	}
}

// heldFlush is how long a moved person's package waits in memory for
// their next frame before it is written to disk.
const heldFlush = 5 * time.Second

// hold keeps a moved person's package, in memory if there is room.
func (a *Agent) hold(b []byte) (string, error) {
	if h, ok := a.park.(park.Holder); ok {
		return h.Hold(b, "")
	}
	return a.park.Put(b, false)
}

// Shutdown stops the agent: its parts in the reverse order of their
// start (lifecycle.go). The leader's tasks stop first, then the idle
// parking, governance and the front (WebSockets close); the workers' part
// parks every person (with a data dir) before the workers stop; raft stops
// last but for the listeners it was started on. Idempotent.
func (a *Agent) Shutdown(ctx context.Context) error {
	var errs []error
	a.shutdownOnce.Do(func() {
		a.up.Store(false) // health checks fail from now on
		errs = a.parts.stopAll(ctx)
	})
	return errors.Join(errs...)
}

// stopWorkers is the workers' part's stop: everyone on them is parked
// (with a data dir), raft takes a snapshot for the next start, a host
// leaves the cluster, and the workers stop; their last checkpoints are
// flushed.
func (a *Agent) stopWorkers(ctx context.Context) error {
	var errs []error
	if a.started {
		if err := a.life.ParkAll(ctx); err != nil {
			errs = append(errs, fmt.Errorf("parking: %w", err))
		}
	}
	a.snapshotForStart()
	if a.started && !a.cfg.IsServer() {
		a.cluster.Leave(ctx)
	}
	_ = a.pool.Close()
	if x := a.Checkpoints(); x != nil {
		x.Flush()
	}
	return errors.Join(errs...)
}
