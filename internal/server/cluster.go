package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// A cluster of servers: each knows the others by their admin API address
// (retry_join, or the servers' service in Consul). A server with no raft
// state asks each of them who they are (GET /v1/agent/self) until it knows
// bootstrap_expect servers, then every one bootstraps raft with that same
// set. Hosts join the servers as non-voting members. The leader is the
// only writer: a write reaching a follower is forwarded to the leader's
// admin API (POST /v1/internal/apply) and waits, through an election too,
// within its context's deadline.

// Self is what an agent says of itself to the others.
type Self struct {
	Name      string `json:"name"`
	RaftAddr  string `json:"raft_addr"`
	RPCAddr   string `json:"rpc_addr"`
	AdminAddr string `json:"admin_addr"`
	FrontAddr string `json:"front_addr"`
	// Leader is the raft leader this agent knows ("" for none), and
	// Established whether it is part of a cluster already: a joining
	// server that finds either joins instead of bootstrapping.
	Leader      string `json:"leader,omitempty"`
	Established bool   `json:"established,omitempty"`
	// NewestEntry is the newest raft entry type this server applies
	// (fsm.NewestEntryType); 0 from versions before it was said.
	NewestEntry int `json:"newest_entry,omitempty"`
}

// Config is what a Cluster is made of.
type Config struct {
	// Name is this agent's name (its raft ID); Server whether it is a
	// server (a voter) or a host.
	Name   string
	Server bool
	// BootstrapExpect is how many servers form the cluster;
	// DeadServerCleanup how long autopilot waits before it removes a
	// member it does not reach (0: never).
	BootstrapExpect   int
	DeadServerCleanup time.Duration
	// RetryJoin are servers' admin addresses from the configuration;
	// Discover, when set, finds more (the servers' service in Consul).
	RetryJoin []string
	Discover  func(ctx context.Context) ([]string, error)
	Raft      *raftnode.Node
	Maps      *fsm.FSM
	Remote    *Remote
	// Self is what this agent says of itself; Started whether it serves.
	Self    func() Self
	Started func() bool
	Logger  hclog.Logger
}

// Cluster is this agent's membership of the cluster: joining it, staying a
// voter, writes forwarded to the leader, the leader's side of membership,
// autopilot, and health as Consul checks it. It is the raft log every
// other part writes through (Apply, IsLeader).
type Cluster struct {
	cfg   Config
	log   hclog.Logger
	peers Peers

	gateMu     sync.Mutex // guards the entry gate's state
	gateNewest fsm.MessageType
	gateAsked  time.Time
	gateAsking bool
}

// NewCluster is the membership of an agent whose raft member is up.
func NewCluster(cfg Config) *Cluster {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Cluster{cfg: cfg, log: cfg.Logger}
}

// Name is this agent's name.
func (c *Cluster) Name() string { return c.cfg.Name }

// Raft is this agent's raft member.
func (c *Cluster) Raft() *raftnode.Node { return c.cfg.Raft }

// Remote is the caller of the other agents' admin APIs.
func (c *Cluster) Remote() *Remote { return c.cfg.Remote }

// Call calls another agent's admin API (Remote.Call).
func (c *Cluster) Call(ctx context.Context, method, addr, path string, body []byte, out any) error {
	return c.cfg.Remote.Call(ctx, method, addr, path, body, out)
}

// ServerAddrs lists the servers' admin addresses: retry_join and the
// servers found by Discover; this agent's own address is left out.
func (c *Cluster) ServerAddrs(ctx context.Context) []string {
	addrs := slices.Clone(c.cfg.RetryJoin)
	if c.cfg.Discover != nil {
		found, err := c.cfg.Discover(ctx)
		if err != nil {
			c.log.Debug("finding the servers", "error", err)
		}
		addrs = append(addrs, found...)
	}
	self := c.cfg.Self().AdminAddr
	addrs = slices.DeleteFunc(addrs, func(s string) bool { return s == self })
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

// Join brings a server into its cluster. A cluster that already has a
// leader (any server found says so) is joined: the leader is asked to make
// this server a voter at its raft address, which also updates the address
// of a server that comes back on a new port (a replaced Nomad allocation)
// and lets a server that lost its data in (it is sent a snapshot) instead
// of bootstrapping a second cluster. With no leader anywhere, a server
// with raft state waits for its peers to elect (asking again each round),
// and one without bootstraps a new cluster once bootstrap_expect servers
// without state are known, each with the same set.
func (c *Cluster) Join(ctx context.Context) error {
	r := c.cfg.Raft
	has, err := r.HasState()
	if err != nil {
		return err
	}
	expect := c.cfg.BootstrapExpect
	self := c.cfg.Self()
	c.peers.Learn(self.Name, self.RaftAddr, self.AdminAddr)
	for attempt := 0; ; attempt++ {
		members := map[string]string{self.Name: self.RaftAddr}
		established := ""
		for _, addr := range c.ServerAddrs(ctx) {
			var s Self
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := c.Call(cctx, "GET", addr, "/v1/agent/self", nil, &s)
			cancel()
			if err != nil {
				if attempt%20 == 0 {
					c.log.Info("waiting for a server to join", "address", addr, "error", err)
				}
				continue
			}
			if s.RaftAddr == "" || s.Name == "" {
				continue // that server's raft is not up yet
			}
			c.peers.Learn(s.Name, s.RaftAddr, s.AdminAddr)
			if s.Name == self.Name {
				continue // this server's previous allocation, still answering
			}
			members[s.Name] = s.RaftAddr
			if s.Leader != "" || s.Established {
				established = addr
			}
		}
		switch {
		case established != "":
			// A no-op for a member at the same address.
			err := c.requestVote(ctx, established)
			if err == nil {
				return nil
			}
			if attempt%20 == 0 {
				c.log.Info("asking the cluster to take this server", "via", established, "error", err)
			}
		case has:
			// A member already, and no other server knows a leader yet:
			// an election after the leader went, or a restart of the
			// whole cluster (raft elects by itself among unchanged
			// addresses). Done once this server hears of a leader at its
			// own address; until then keep asking, so that a server back
			// on a new address is taken back as soon as a leader exists.
			if addr, _ := r.Leader(); addr != "" && r.Health().Member {
				return nil
			}
		case len(members) >= expect:
			c.log.Info("bootstrapping the cluster", "servers", len(members))
			return r.Bootstrap(members)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("joining: %d of %d servers found, none leading: %w", len(members), expect, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// requestVote asks the leader, through the server at addr, to make this
// server a voter at its raft address.
func (c *Cluster) requestVote(ctx context.Context, addr string) error {
	body, err := json.Marshal(api.MemberRequest{Op: "join", Name: c.cfg.Name, RaftAddr: c.cfg.Raft.Addr(), Voter: true})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := c.Call(cctx, "POST", addr, "/v1/internal/members", body, nil); err != nil {
		return err
	}
	c.log.Info("joined the cluster as a voter", "via", addr, "raft_addr", c.cfg.Raft.Addr())
	return nil
}

// JoinAsHost asks the servers to add this agent to raft as a non-voting
// member, until one of them (or the leader it forwards to) says yes.
func (c *Cluster) JoinAsHost(ctx context.Context) error {
	body, err := json.Marshal(api.MemberRequest{Op: "join", Name: c.cfg.Name, RaftAddr: c.cfg.Raft.Addr()})
	if err != nil {
		return err
	}
	var last error
	for attempt := 0; ; attempt++ {
		addrs := c.ServerAddrs(ctx)
		for _, addr := range addrs {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := c.Call(cctx, "POST", addr, "/v1/internal/members", body, nil)
			cancel()
			if err == nil {
				c.log.Info("joined the servers as a host", "via", addr)
				c.RefreshPeers(ctx)
				return nil
			}
			last = err
		}
		if attempt%20 == 0 {
			c.log.Info("waiting to join the servers", "servers", addrs, "error", last)
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = errors.New("no server found")
			}
			return fmt.Errorf("joining the servers: %w (last: %v)", ctx.Err(), last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Membership keeps a server a voter at its own address until stop closes:
// a server the leader stopped reaching (its address changed while it was
// away, or an operator removed it by mistake) asks to be taken back. It
// runs on every server; the leader's answer to an unchanged member is a
// no-op.
func (c *Cluster) Membership(stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		h := c.cfg.Raft.Health()
		if h.State == "Leader" || (h.Member && h.Voter && h.Leader != "") {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, addr := range c.ServerAddrs(ctx) {
			err := c.requestVote(ctx, addr)
			if err == nil {
				break
			}
			c.log.Debug("asking to be a voter again", "via", addr, "error", err)
		}
		cancel()
	}
}

// Leave is a host's goodbye, once its people are parked: its workers
// leave the maps (nobody is placed on them any more) and it leaves the
// raft configuration.
func (c *Cluster) Leave(ctx context.Context) {
	entry, err := fsm.Encode(fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: c.cfg.Name, AdminAddr: c.cfg.Self().AdminAddr, Workers: map[string]string{}})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = c.Apply(cctx, entry)
		cancel()
	}
	if err != nil {
		c.log.Warn("taking this host's workers out of the maps", "error", err)
	}
	body, _ := json.Marshal(api.MemberRequest{Op: "leave", Name: c.cfg.Name})
	for _, addr := range c.ServerAddrs(ctx) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.Call(cctx, "POST", addr, "/v1/internal/members", body, nil)
		cancel()
		if err == nil {
			c.log.Info("left the servers")
			return
		}
	}
	c.log.Warn("could not leave the raft configuration; the leader keeps this host as a silent non-voter")
}

// refresh keeps learning the servers' admin addresses (a server that
// restarts may come back with a new one): it asks the servers it is told
// of (retry_join, Consul) who they are, and the servers named, as the
// maps register them (a replacement the others were never told of
// registers there; the maps' other agents, hosts among them, are not
// asked).
func (c *Cluster) refresh(ctx context.Context, named ...string) {
	addrs := c.ServerAddrs(ctx)
	for _, e := range c.cfg.Maps.Agents() {
		if slices.Contains(named, e.Name) && e.AdminAddr != "" && !slices.Contains(addrs, e.AdminAddr) {
			addrs = append(addrs, e.AdminAddr)
		}
	}
	for _, addr := range addrs {
		var s Self
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := c.Call(cctx, "GET", addr, "/v1/agent/self", nil, &s); err == nil {
			c.peers.Learn(s.Name, s.RaftAddr, s.AdminAddr)
		}
		cancel()
	}
}

// AdminOf is the admin API address of the server id at raftAddr as this
// agent knows it, "" when it does not.
func (c *Cluster) AdminOf(id, raftAddr string) string { return c.peers.AdminOf(id, raftAddr) }

// RefreshPeers learns the servers' admin addresses again, the leader's
// among them.
func (c *Cluster) RefreshPeers(ctx context.Context) {
	_, leader := c.cfg.Raft.Leader()
	c.refresh(ctx, leader)
}

// Fetch calls another agent's admin API (Remote.Fetch).
func (c *Cluster) Fetch(ctx context.Context, method, addr, path string, body []byte) ([]byte, error) {
	return c.cfg.Remote.Fetch(ctx, method, addr, path, body)
}

// AdminRequest and StreamClient are Remote's: a call whose answer streams.
func (c *Cluster) AdminRequest(ctx context.Context, method, addr, path string, body io.Reader) (*http.Request, error) {
	return c.cfg.Remote.AdminRequest(ctx, method, addr, path, body)
}

func (c *Cluster) StreamClient() *http.Client { return c.cfg.Remote.StreamClient() }

// IsLeader reports whether this server leads: its replica then has every
// acknowledged write.
func (c *Cluster) IsLeader() bool { return c.cfg.Raft.IsLeader() }

// Apply writes entry through the leader. While there is no leader (an
// election), or the leader cannot be reached, it retries until ctx ends
// (30 s without a deadline): a write waits, it does not fail, within its
// bound. A leader's refusal is final.
func (c *Cluster) Apply(ctx context.Context, entry []byte) (any, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	r := c.cfg.Raft
	for {
		if r.IsLeader() {
			res, err := r.Apply(ctx, entry)
			if !errors.Is(err, raftnode.ErrNotLeader) {
				return res, err
			}
		} else if admin := c.LeaderAdmin(ctx); admin != "" {
			var out struct {
				Result json.RawMessage `json:"result"`
				Index  uint64          `json:"index"`
			}
			err := c.Call(ctx, "POST", admin, "/v1/internal/apply", entry, &out)
			var re *Refusal
			switch {
			case err == nil:
				// Read your writes: the caller reads this replica next.
				c.waitApplied(ctx, out.Index)
				return fsm.DecodeResult(fsm.EntryType(entry), out.Result)
			case errors.As(err, &re) && re.Status != http.StatusServiceUnavailable && re.Status != http.StatusMisdirectedRequest:
				return nil, re.Err // the leader applied it and refused: final
			default:
				c.unreachedLeader(err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a raft leader to take the write: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// LeaderAdmin is the leader's admin API address as this agent knows it
// (learning the servers' addresses again if it does not), "" while no
// leader is known.
func (c *Cluster) LeaderAdmin(ctx context.Context) string {
	leaderAddr, leaderID := c.cfg.Raft.Leader()
	if leaderAddr == "" {
		return ""
	}
	admin := c.peers.AdminOf(leaderID, leaderAddr)
	if admin == "" {
		c.refresh(ctx, leaderID)
		admin = c.peers.AdminOf(leaderID, leaderAddr)
	}
	return admin
}

// unreachedLeader drops what this agent knows of the leader's admin
// address after a call to it failed short of an agent's answer (refused,
// or something else listening there): the next call learns it again.
func (c *Cluster) unreachedLeader(err error) {
	var re *Refusal
	if errors.As(err, &re) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if addr, _ := c.cfg.Raft.Leader(); addr != "" {
		c.peers.Forget(addr)
	}
}

// waitApplied waits (bounded by ctx, at most 5 s) until the local replica
// has applied index.
func (c *Cluster) waitApplied(ctx context.Context, index uint64) {
	deadline := time.Now().Add(5 * time.Second)
	for c.cfg.Maps.Index() < index && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// ServeApply is the leader's side of a forwarded write: the result, the
// index it was applied at, and the HTTP status of the answer.
func (c *Cluster) ServeApply(ctx context.Context, entry []byte) (any, uint64, int, error) {
	r := c.cfg.Raft
	if len(entry) == 0 {
		return nil, 0, http.StatusBadRequest, errors.New("empty entry")
	}
	if !r.IsLeader() {
		return nil, 0, http.StatusMisdirectedRequest, errors.New("not the leader")
	}
	res, index, err := r.ApplyIndex(ctx, entry)
	if errors.Is(err, raftnode.ErrNotLeader) {
		return nil, 0, http.StatusMisdirectedRequest, err
	}
	if err != nil {
		return nil, 0, http.StatusConflict, err
	}
	return res, index, http.StatusOK, nil
}

// ServeMember adds a host to raft or removes a member, on the leader; a
// follower forwards the request to it. It answers with the HTTP status.
func (c *Cluster) ServeMember(ctx context.Context, req api.MemberRequest) (int, error) {
	r := c.cfg.Raft
	if !r.IsLeader() {
		admin := c.LeaderAdmin(ctx)
		if admin == "" {
			return http.StatusServiceUnavailable, errors.New("no leader known yet")
		}
		body, _ := json.Marshal(req)
		if err := c.Call(ctx, "POST", admin, "/v1/internal/members", body, nil); err != nil {
			var re *Refusal
			if errors.As(err, &re) {
				return re.Status, re.Err
			}
			c.unreachedLeader(err)
			return http.StatusServiceUnavailable, err
		}
		return http.StatusOK, nil
	}
	var err error
	switch {
	case req.Op == "join" && req.Voter:
		if !c.cfg.Server {
			return http.StatusBadRequest, errors.New("only a server takes voters")
		}
		c.log.Info("making a server a raft voter", "name", req.Name, "raft_addr", req.RaftAddr)
		err = r.AddVoter(ctx, req.Name, req.RaftAddr)
	case req.Op == "join":
		c.log.Info("adding a host to raft as a non-voter", "name", req.Name, "raft_addr", req.RaftAddr)
		err = r.AddNonvoter(ctx, req.Name, req.RaftAddr)
	case req.Name == c.cfg.Name:
		// The leader removing itself would leave the cluster to elect
		// without it mid-call; the operator transfers leadership first.
		return http.StatusConflict, fmt.Errorf("%s is the leader: transfer leadership first (stickyd operator raft transfer-leader)", req.Name)
	default:
		c.log.Info("removing a member from raft", "name", req.Name)
		err = r.RemoveMember(ctx, req.Name)
	}
	switch {
	case errors.Is(err, raftnode.ErrNotLeader):
		return http.StatusServiceUnavailable, err
	case err != nil:
		return http.StatusInternalServerError, err
	}
	return http.StatusOK, nil
}

// Bounds of a healthy member: the leader heard from within
// healthSilence, the replica within healthLag entries of the commit index.
const (
	healthSilence = 5 * time.Second
	healthLag     = 1000
)

// Health is GET /v1/agent/health: whether this agent is a working member
// of its cluster. A server must be a voter at its own raft address that
// hears from a leader and keeps up with the log; a host a member that
// does. Consul's check of stickyd-server (and stickyd-host) calls it, so a
// server outside raft, or one that cannot reach the leader, drops out of
// the servers Consul hands out.
func (c *Cluster) Health() (bool, any) {
	h := c.cfg.Raft.Health()
	body := map[string]any{"name": c.cfg.Name, "raft": h}
	err := h.Healthy(c.cfg.Server, healthSilence, healthLag)
	if err == nil && !c.cfg.Started() {
		err = errors.New("the agent is starting")
	}
	if err != nil {
		body["status"], body["error"] = "unhealthy", err.Error()
		return false, body
	}
	body["status"] = "ok"
	return true, body
}

// Autopilot removes, while this server leads (a leader task), the members
// it has not reached for server.dead_server_cleanup: a host at once (its
// replacement joins again under its name), a voter only while the voters
// still reached number at least bootstrap_expect, so that a dead server's
// place is freed once its replacement (under another name) is healthy and
// the quorum is never made smaller than the operator asked for.
func (c *Cluster) Autopilot(stop <-chan struct{}) {
	after := c.cfg.DeadServerCleanup
	if after <= 0 {
		return
	}
	r := c.cfg.Raft
	tick := time.NewTicker(min(5*time.Second, after/2))
	defer tick.Stop()
	kept := map[string]bool{} // dead voters already said to be kept
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		dead := r.Unreachable(after)
		if len(dead) == 0 {
			continue
		}
		peers, err := r.Peers()
		if err != nil {
			continue
		}
		voter, voters := map[string]bool{}, 0
		for _, p := range peers {
			if p.Voter {
				voter[p.ID] = true
				voters++
			}
		}
		deadVoters := 0
		for _, id := range dead {
			if voter[id] {
				deadVoters++
			}
		}
		for _, id := range dead {
			if id == c.cfg.Name {
				continue
			}
			if voter[id] && voters-deadVoters < c.cfg.BootstrapExpect {
				if !kept[id] {
					c.log.Warn("a raft voter is unreachable; keeping it until a replacement is healthy", "id", id,
						"voters", voters, "unreachable", deadVoters, "bootstrap_expect", c.cfg.BootstrapExpect)
					kept[id] = true
				}
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := r.RemoveMember(ctx, id)
			cancel()
			if err != nil {
				c.log.Warn("removing an unreachable raft member", "id", id, "error", err)
				continue
			}
			c.log.Info("removed an unreachable raft member", "id", id, "voter", voter[id], "unreachable_for_more_than", after)
			if voter[id] {
				voters--
				deadVoters--
			}
			delete(kept, id)
		}
	}
}

// AllowEntry says whether every server of the raft configuration applies
// entries of type t: a writer holds a new type back while a rolling update
// still runs an older server, which would skip it and drift from the
// others. Once every server does, it stays so (servers are upgraded, not
// downgraded); until then the servers are asked again at most every 10 s.
// It never waits: what it does not know yet it asks in the background,
// and says no meanwhile.
func (c *Cluster) AllowEntry(t fsm.MessageType) bool {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	if c.gateNewest >= t {
		return true
	}
	if !c.gateAsking && time.Since(c.gateAsked) >= 10*time.Second {
		c.gateAsking, c.gateAsked = true, time.Now()
		go func() {
			n := c.newestEntry()
			c.gateMu.Lock()
			c.gateNewest = max(c.gateNewest, n)
			c.gateAsking = false
			c.gateMu.Unlock()
		}()
	}
	return false
}

// newestEntry is the newest entry type all the servers apply, as they say.
func (c *Cluster) newestEntry() fsm.MessageType {
	r := c.cfg.Raft
	peers, err := r.Peers()
	if err != nil || len(peers) == 0 {
		return 0
	}
	newest := fsm.NewestEntryType
	self := r.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range peers {
		if p.Address == self {
			continue
		}
		admin := c.peers.AdminOf(p.ID, p.Address)
		if admin == "" {
			c.refresh(ctx, p.ID)
			if admin = c.peers.AdminOf(p.ID, p.Address); admin == "" {
				return 0
			}
		}
		var s Self
		if err := c.Call(ctx, "GET", admin, "/v1/agent/self", nil, &s); err != nil {
			return 0
		}
		newest = min(newest, fsm.MessageType(s.NewestEntry))
	}
	return newest
}
