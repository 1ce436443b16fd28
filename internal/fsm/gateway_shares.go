package fsm

import (
	"fmt"
	"maps"
)

// GatewaySharesRequestType records the ceilings of the servers' shares of
// the gateway's limits (docs/gateway.md, "Calls run where they arrive").
const GatewaySharesRequestType MessageType = 29

// GatewayShare is the most a server's process may run of each model: the
// leader writes a ceiling up before it grants a share past it, and down
// once the server runs less. A new leader counts the ceilings of the
// servers that have not renewed with it yet.
type GatewayShare struct {
	Process string         `json:"process"`
	Models  map[string]int `json:"models"`
}

// GatewaySharesRequest sets the ceilings of the servers in Set and drops
// those of the servers in Drop.
type GatewaySharesRequest struct {
	Set  map[string]GatewayShare `json:"set,omitempty"`
	Drop []string                `json:"drop,omitempty"`
}

func (f *FSM) applyGatewayShares(buf body) interface{} {
	var req GatewaySharesRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding gateway shares: %w", err)
	}
	g := f.gatewayLocked()
	if g.Shares == nil {
		g.Shares = map[string]GatewayShare{}
	}
	for server, s := range req.Set {
		g.Shares[server] = GatewayShare{Process: s.Process, Models: maps.Clone(s.Models)}
	}
	for _, server := range req.Drop {
		delete(g.Shares, server)
	}
	return nil
}

// GatewayShares returns a copy of the ceilings, by server.
func (f *FSM) GatewayShares() map[string]GatewayShare {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := map[string]GatewayShare{}
	if f.state.Gateway == nil {
		return out
	}
	for server, s := range f.state.Gateway.Shares {
		out[server] = GatewayShare{Process: s.Process, Models: maps.Clone(s.Models)}
	}
	return out
}
