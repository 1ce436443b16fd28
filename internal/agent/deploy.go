package agent

import (
	"context"

	"github.com/stickyd/stickyd/internal/consul"
	"github.com/stickyd/stickyd/internal/maintenance"
)

// The deployment around the agent (docs/deploy-nomad.md): hosts join the
// servers as non-voting raft members; servers find each other and hosts
// find servers through Consul. The leader, and only the leader, publishes
// the placement registry into Consul KV (consul.Publisher) and runs each
// catalog group as a Nomad job (nomad.Keeper).

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

// discoverServers finds the servers' admin addresses in Consul (none
// without a consul block).
func (a *Agent) discoverServers(ctx context.Context) ([]string, error) {
	c := a.consulClient()
	if c == nil {
		return nil, nil
	}
	return c.Services(ctx, a.cfg.Consul.ServerService)
}

// consulKV is the consul block's KV store for the maintenance windows,
// nil without one.
func (a *Agent) consulKV() maintenance.KV {
	if c := a.consulClient(); c != nil {
		return c
	}
	return nil // not a typed nil: the windows go to the maps
}
