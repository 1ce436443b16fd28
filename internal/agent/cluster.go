package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway/cluster"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// A cluster of servers: each knows the others by their admin API address
// (retry_join). A server with no raft state asks each of them who they are
// (GET /v1/agent/self) until it knows bootstrap_expect servers, then every one
// bootstraps raft with that same set. The leader is the only writer: a write
// reaching a follower is forwarded to the leader's admin API
// (POST /v1/internal/apply) and waits — through an election too — within its
// context's deadline.

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

func (a *Agent) self() Self {
	s := Self{Name: a.cfg.Name, AdminAddr: a.AdminAddr(), FrontAddr: a.Addr(), NewestEntry: int(fsm.NewestEntryType)}
	if r := a.raftNode(); r != nil {
		s.RaftAddr = r.Addr()
		_, s.Leader = r.Leader()
		s.Established = s.Leader != "" && r.Health().Member
	}
	s.RPCAddr = a.rpcAddress()
	return s
}

// call calls another agent's admin API and decodes its JSON answer into
// out (when not nil).
func (a *Agent) call(ctx context.Context, method, addr, path string, body []byte, out any) error {
	b, err := a.fetch(ctx, method, addr, path, body)
	if err != nil || out == nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// fetch calls another agent's admin API and returns the answer's bytes; a
// refusal is a *remoteErr carrying the agent's message.
func (a *Agent) fetch(ctx context.Context, method, addr, path string, body []byte) ([]byte, error) {
	addr = a.adminURL(addr)
	req, err := http.NewRequestWithContext(ctx, method, addr+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Stickyd-Token", a.token)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	// A parked package is the largest answer; it fits an envelope.
	b, err := io.ReadAll(io.LimitReader(resp.Body, channel.MaxEnvelopeBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
			Kind  string `json:"kind"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return nil, &remoteErr{status: resp.StatusCode, err: fsm.KindError(e.Kind, e.Error)}
		}
		return nil, &remoteErr{status: resp.StatusCode, err: fmt.Errorf("HTTP %d from %s%s", resp.StatusCode, addr, path)}
	}
	return b, nil
}

// remoteErr is a refusal from another agent.
type remoteErr struct {
	status int
	err    error
}

func (e *remoteErr) Error() string   { return e.err.Error() }
func (e *remoteErr) Unwrap() error   { return e.err }
func (e *remoteErr) StatusCode() int { return e.status }

// The gateway reads a refusal's status (cluster.Server.Fetch).
var _ cluster.Refusal = (*remoteErr)(nil)

// join brings a server into its cluster. A cluster that already has a
// leader (any server found says so) is joined: the leader is asked to make
// this server a voter at its raft address, which also updates the address
// of a server that comes back on a new port (a replaced Nomad allocation)
// and lets a server that lost its data in (it is sent a snapshot) instead
// of bootstrapping a second cluster. With no leader anywhere, a server
// with raft state waits for its peers to elect (asking again each round),
// and one without bootstraps a new cluster once bootstrap_expect servers without state are
// known, each with the same set.
func (a *Agent) join(ctx context.Context) error {
	has, err := a.raft.HasState()
	if err != nil {
		return err
	}
	expect := a.cfg.Server.BootstrapExpect
	self := a.self()
	a.peers.Learn(self.Name, self.RaftAddr, self.AdminAddr)
	for attempt := 0; ; attempt++ {
		members := map[string]string{self.Name: self.RaftAddr}
		established := ""
		for _, addr := range a.serverAddrs(ctx) {
			var s Self
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			err := a.call(cctx, "GET", addr, "/v1/agent/self", nil, &s)
			cancel()
			if err != nil {
				if attempt%20 == 0 {
					a.log.Info("waiting for a server to join", "address", addr, "error", err)
				}
				continue
			}
			if s.RaftAddr == "" || s.Name == "" {
				continue // that server's raft is not up yet
			}
			a.peers.Learn(s.Name, s.RaftAddr, s.AdminAddr)
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
			err := a.requestVote(ctx, established)
			if err == nil {
				return nil
			}
			if attempt%20 == 0 {
				a.log.Info("asking the cluster to take this server", "via", established, "error", err)
			}
		case has:
			// A member already, and no other server knows a leader yet:
			// an election after the leader went, or a restart of the
			// whole cluster (raft elects by itself among unchanged
			// addresses). Done once this server hears of a leader at its
			// own address; until then keep asking, so that a server back
			// on a new address is taken back as soon as a leader exists.
			if addr, _ := a.raft.Leader(); addr != "" && a.raft.Health().Member {
				return nil
			}
		case len(members) >= expect:
			a.log.Info("bootstrapping the cluster", "servers", len(members))
			return a.raft.Bootstrap(members)
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
func (a *Agent) requestVote(ctx context.Context, addr string) error {
	body, err := json.Marshal(api.MemberRequest{Op: "join", Name: a.cfg.Name, RaftAddr: a.raft.Addr(), Voter: true})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := a.call(cctx, "POST", addr, "/v1/internal/members", body, nil); err != nil {
		return err
	}
	a.log.Info("joined the cluster as a voter", "via", addr, "raft_addr", a.raft.Addr())
	return nil
}

// membershipLoop keeps a server a voter at its own address: a server the
// leader stopped reaching (its address changed while it was away, or an
// operator removed it by mistake) asks to be taken back. It runs on every
// server; the leader's answer to an unchanged member is a no-op.
func (a *Agent) membershipLoop(stop <-chan struct{}) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		h := a.raft.Health()
		if h.State == "Leader" || (h.Member && h.Voter && h.Leader != "") {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, addr := range a.serverAddrs(ctx) {
			err := a.requestVote(ctx, addr)
			if err == nil {
				break
			}
			a.log.Debug("asking to be a voter again", "via", addr, "error", err)
		}
		cancel()
	}
}

// register records this agent's workers in the maps, so every server can
// route to them.
func (a *Agent) register(ctx context.Context) error {
	// One at a time: a list read before a retirement must not be applied
	// after the list read after it.
	a.registerMu.Lock()
	defer a.registerMu.Unlock()
	e := fsm.AgentEntry{Name: a.cfg.Name, AdminAddr: a.AdminAddr(), Workers: map[string]string{}, Draining: a.draining.Load()}
	e.RPCAddr = a.rpcAddress()
	for _, w := range a.pool.Workers() {
		e.Workers[w.ID] = w.Group
	}
	entry, err := fsm.Encode(fsm.RegisterAgentRequestType, e)
	if err != nil {
		return err
	}
	_, err = forwardingLog{a}.Apply(ctx, entry)
	return err
}

// refreshPeers keeps learning the servers' admin addresses (a server that
// restarts may come back with a new one): it asks the servers it is told
// of (retry_join, Consul) who they are, and the servers named, as the
// maps register them (a replacement the others were never told of
// registers there; the maps' other agents, hosts among them, are not
// asked).
func (a *Agent) refreshPeers(ctx context.Context, named ...string) {
	addrs := a.serverAddrs(ctx)
	for _, e := range a.fsm.Agents() {
		if slices.Contains(named, e.Name) && e.AdminAddr != "" && !slices.Contains(addrs, e.AdminAddr) {
			addrs = append(addrs, e.AdminAddr)
		}
	}
	for _, addr := range addrs {
		var s Self
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := a.call(cctx, "GET", addr, "/v1/agent/self", nil, &s); err == nil {
			a.peers.Learn(s.Name, s.RaftAddr, s.AdminAddr)
		}
		cancel()
	}
}

// forwardingLog applies entries on the leader, from any server.
type forwardingLog struct{ a *Agent }

// IsLeader reports whether this server leads: its replica then has every
// acknowledged write.
func (l forwardingLog) IsLeader() bool { return l.a.raft.IsLeader() }

// Apply writes entry through the leader. While there is no leader (an
// election), or the leader cannot be reached, it retries until ctx ends: a
// write waits, it does not fail, within its bound.
func (l forwardingLog) Apply(ctx context.Context, entry []byte) (any, error) {
	a := l.a
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	for {
		if a.raft.IsLeader() {
			res, err := a.raft.Apply(ctx, entry)
			if !errors.Is(err, raftnode.ErrNotLeader) {
				return res, err
			}
		} else if admin := a.leaderAdmin(ctx); admin != "" {
			var out struct {
				Result json.RawMessage `json:"result"`
				Index  uint64          `json:"index"`
			}
			err := a.call(ctx, "POST", admin, "/v1/internal/apply", entry, &out)
			var re *remoteErr
			switch {
			case err == nil:
				// Read your writes: the caller reads this replica next.
				a.waitApplied(ctx, out.Index)
				return fsm.DecodeResult(fsm.EntryType(entry), out.Result)
			case errors.As(err, &re) && re.status != http.StatusServiceUnavailable && re.status != http.StatusMisdirectedRequest:
				return nil, re.err // the leader applied it and refused: final
			default:
				a.unreachedLeader(err)
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a raft leader to take the write: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// leaderAdmin is the leader's admin API address as this agent knows it
// (learning the servers' addresses again if it does not), "" while no
// leader is known.
func (a *Agent) leaderAdmin(ctx context.Context) string {
	leaderAddr, leaderID := a.raft.Leader()
	if leaderAddr == "" {
		return ""
	}
	admin := a.peers.AdminOf(leaderID, leaderAddr)
	if admin == "" {
		a.refreshPeers(ctx, leaderID)
		admin = a.peers.AdminOf(leaderID, leaderAddr)
	}
	return admin
}

// unreachedLeader drops what this agent knows of the leader's admin
// address after a call to it failed short of an agent's answer (refused,
// or something else listening there): the next call learns it again.
func (a *Agent) unreachedLeader(err error) {
	var re *remoteErr
	if errors.As(err, &re) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if addr, _ := a.raft.Leader(); addr != "" {
		a.peers.Forget(addr)
	}
}

// waitApplied waits (bounded by ctx, at most 5 s) until the local replica
// has applied index.
func (a *Agent) waitApplied(ctx context.Context, index uint64) {
	deadline := time.Now().Add(5 * time.Second)
	for a.fsm.Index() < index && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// applyHandler is the leader's side of a forwarded write.
func (a *Agent) applyHandler(ctx context.Context, entry []byte) (any, uint64, int, error) {
	if len(entry) == 0 {
		return nil, 0, http.StatusBadRequest, errors.New("empty entry")
	}
	if !a.raft.IsLeader() {
		return nil, 0, http.StatusMisdirectedRequest, errors.New("not the leader")
	}
	res, index, err := a.raft.ApplyIndex(ctx, entry)
	if errors.Is(err, raftnode.ErrNotLeader) {
		return nil, 0, http.StatusMisdirectedRequest, err
	}
	if err != nil {
		return nil, 0, http.StatusConflict, err
	}
	return res, index, http.StatusOK, nil
}

// establishLeadership is the first leader task of every term: moves the
// last leader was making cannot finish, so they are rolled back, and the
// cookie key ring is seeded if the maps hold none (or this server's files
// are its successor).
func (a *Agent) establishLeadership(stop <-chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	aborted, err := a.abortStuckMoves(ctx)
	if err != nil {
		a.log.Warn("rolling back interrupted moves", "error", err)
		return
	}
	// The barrier of abortStuckMoves is behind: the ring read is the last
	// leader's.
	a.keyring.Seed(ctx)
	if len(aborted) > 0 {
		a.log.Info("rolled back the moves the last leader left", "users", len(aborted))
		a.mu.Lock()
		a.restart.AbortedMoves = append(a.restart.AbortedMoves, aborted...)
		a.mu.Unlock()
	}
}

// abortStuckMoves rolls back every move in the maps, once this server's
// replica has every entry (a barrier); called by a new leader, which runs
// no move yet.
func (a *Agent) abortStuckMoves(ctx context.Context) ([]string, error) {
	if err := a.raft.Barrier(ctx); err != nil {
		return nil, err
	}
	return a.mover.RollBackStuck(ctx, a.fsm.Users())
}

// Bounds of a healthy member: the leader heard from within
// healthSilence, the replica within healthLag entries of the commit index.
const (
	healthSilence = 5 * time.Second
	healthLag     = 1000
)

// clusterHealth is GET /v1/agent/health: whether this agent is a working
// member of its cluster. A server must be a voter at its own raft address
// that hears from a leader and keeps up with the log; a host a member that
// does. Consul's check of stickyd-server (and stickyd-host) calls it, so a
// server outside raft, or one that cannot reach the leader, drops out of
// the servers Consul hands out.
func (a *Agent) clusterHealth() (bool, any) {
	r := a.raftNode()
	if r == nil {
		return false, map[string]string{"status": "starting", "error": "raft is not up yet"}
	}
	h := r.Health()
	body := map[string]any{"name": a.cfg.Name, "raft": h}
	err := h.Healthy(a.cfg.IsServer(), healthSilence, healthLag)
	if err == nil && !a.isStarted() {
		err = errors.New("the agent is starting")
	}
	if err != nil {
		body["status"], body["error"] = "unhealthy", err.Error()
		return false, body
	}
	body["status"] = "ok"
	return true, body
}

// autopilotLoop removes, while this server leads (a leader task), the members it has not
// reached for server.dead_server_cleanup: a host at once (its replacement
// joins again under its name), a voter only while the voters still
// reached number at least bootstrap_expect, so that a dead server's place
// is freed once its replacement (under another name) is healthy and the
// quorum is never made smaller than the operator asked for.
func (a *Agent) autopilotLoop(stop <-chan struct{}) {
	after := a.cfg.DeadServerCleanupAfter()
	if after <= 0 {
		return
	}
	tick := time.NewTicker(min(5*time.Second, after/2))
	defer tick.Stop()
	kept := map[string]bool{} // dead voters already said to be kept
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		dead := a.raft.Unreachable(after)
		if len(dead) == 0 {
			continue
		}
		peers, err := a.raft.Peers()
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
			if id == a.cfg.Name {
				continue
			}
			if voter[id] && voters-deadVoters < a.cfg.Server.BootstrapExpect {
				if !kept[id] {
					a.log.Warn("a raft voter is unreachable; keeping it until a replacement is healthy", "id", id,
						"voters", voters, "unreachable", deadVoters, "bootstrap_expect", a.cfg.Server.BootstrapExpect)
					kept[id] = true
				}
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := a.raft.RemoveMember(ctx, id)
			cancel()
			if err != nil {
				a.log.Warn("removing an unreachable raft member", "id", id, "error", err)
				continue
			}
			a.log.Info("removed an unreachable raft member", "id", id, "voter", voter[id], "unreachable_for_more_than", after)
			if voter[id] {
				voters--
				deadVoters--
			}
			delete(kept, id)
		}
	}
}
