package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/maintenance"
	"github.com/stickyd/stickyd/internal/raftnode"
)

// The deployment around the agent (docs/deploy-nomad.md): hosts join the
// servers as non-voting raft members; servers find each other and hosts
// find servers through Consul. The leader, and only the leader, publishes
// the placement registry into Consul KV (consul.Publisher) and runs each
// catalog group as a Nomad job (nomad.Keeper).

// serverAddrs lists the servers' admin addresses: retry_join (host.join
// on a host) and, with a consul block, the instances of the servers'
// service. This agent's own address is left out.
func (a *Agent) serverAddrs(ctx context.Context) []string {
	addrs := slices.Clone(a.cfg.Server.RetryJoin)
	if c := a.consulClient(); c != nil {
		found, err := c.Services(ctx, a.cfg.Consul.ServerService)
		if err != nil {
			a.log.Debug("finding the servers in Consul", "service", a.cfg.Consul.ServerService, "error", err)
		}
		addrs = append(addrs, found...)
	}
	self := a.AdminAddr()
	addrs = slices.DeleteFunc(addrs, func(s string) bool { return s == self })
	slices.Sort(addrs)
	return slices.Compact(addrs)
}

// consulClient is the Consul client of the consul block, nil without one.
func (a *Agent) consulClient() *consul.Client {
	a.consulOnce.Do(func() {
		k := a.cfg.Consul
		if k == nil {
			return
		}
		c, err := consul.New(consul.Config{Address: k.Address, Token: k.Token, Datacenter: k.Datacenter, Prefix: k.Prefix})
		if err != nil {
			a.log.Error("connecting to Consul", "address", k.Address, "error", err)
			return
		}
		a.consul = c
	})
	return a.consul
}

// consulKV is the consul block's KV store for the maintenance windows,
// nil without one.
func (a *Agent) consulKV() maintenance.KV {
	if c := a.consulClient(); c != nil {
		return c
	}
	return nil // not a typed nil: the windows go to the maps
}

// joinAsHost asks the servers to add this agent to raft as a non-voting
// member, until one of them (or the leader it forwards to) says yes.
func (a *Agent) joinAsHost(ctx context.Context) error {
	body, err := json.Marshal(api.MemberRequest{Op: "join", Name: a.cfg.Name, RaftAddr: a.raft.Addr()})
	if err != nil {
		return err
	}
	var last error
	for attempt := 0; ; attempt++ {
		addrs := a.serverAddrs(ctx)
		for _, addr := range addrs {
			cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			err := a.call(cctx, "POST", addr, "/v1/internal/members", body, nil)
			cancel()
			if err == nil {
				a.log.Info("joined the servers as a host", "via", addr)
				a.refreshPeers(ctx)
				return nil
			}
			last = err
		}
		if attempt%20 == 0 {
			a.log.Info("waiting to join the servers", "servers", addrs, "error", last)
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

// memberHandler adds a host to raft or removes a member, on the leader; a
// follower forwards the request to it.
func (a *Agent) memberHandler(ctx context.Context, req api.MemberRequest) (int, error) {
	if a.raft == nil {
		return http.StatusServiceUnavailable, errors.New("raft is not up yet")
	}
	if !a.raft.IsLeader() {
		admin := a.leaderAdmin(ctx)
		if admin == "" {
			return http.StatusServiceUnavailable, errors.New("no leader known yet")
		}
		body, _ := json.Marshal(req)
		if err := a.call(ctx, "POST", admin, "/v1/internal/members", body, nil); err != nil {
			var re *remoteErr
			if errors.As(err, &re) {
				return re.status, re.err
			}
			a.unreachedLeader(err)
			return http.StatusServiceUnavailable, err
		}
		return http.StatusOK, nil
	}
	var err error
	switch {
	case req.Op == "join" && req.Voter:
		if !a.cfg.IsServer() {
			return http.StatusBadRequest, errors.New("only a server takes voters")
		}
		a.log.Info("making a server a raft voter", "name", req.Name, "raft_addr", req.RaftAddr)
		err = a.raft.AddVoter(ctx, req.Name, req.RaftAddr)
	case req.Op == "join":
		a.log.Info("adding a host to raft as a non-voter", "name", req.Name, "raft_addr", req.RaftAddr)
		err = a.raft.AddNonvoter(ctx, req.Name, req.RaftAddr)
	case req.Name == a.cfg.Name:
		// The leader removing itself would leave the cluster to elect
		// without it mid-call; the operator transfers leadership first.
		return http.StatusConflict, fmt.Errorf("%s is the leader: transfer leadership first (stickyd operator raft transfer-leader)", req.Name)
	default:
		a.log.Info("removing a member from raft", "name", req.Name)
		err = a.raft.RemoveMember(ctx, req.Name)
	}
	switch {
	case errors.Is(err, raftnode.ErrNotLeader):
		return http.StatusServiceUnavailable, err
	case err != nil:
		return http.StatusInternalServerError, err
	}
	return http.StatusOK, nil
}

// leaveCluster is a host's goodbye, once its people are parked: its
// workers leave the maps (nobody is placed on them any more) and it
// leaves the raft configuration.
func (a *Agent) leaveCluster(ctx context.Context) {
	entry, err := fsm.Encode(fsm.RegisterAgentRequestType, fsm.AgentEntry{Name: a.cfg.Name, AdminAddr: a.AdminAddr(), Workers: map[string]string{}})
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err = forwardingLog{a}.Apply(cctx, entry)
		cancel()
	}
	if err != nil {
		a.log.Warn("taking this host's workers out of the maps", "error", err)
	}
	body, _ := json.Marshal(api.MemberRequest{Op: "leave", Name: a.cfg.Name})
	for _, addr := range a.serverAddrs(ctx) {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := a.call(cctx, "POST", addr, "/v1/internal/members", body, nil)
		cancel()
		if err == nil {
			a.log.Info("left the servers")
			return
		}
	}
	a.log.Warn("could not leave the raft configuration; the leader keeps this host as a silent non-voter")
}
