package agent

import (
	"context"
	"fmt"

	"github.com/stickyd/stickyd/internal/gateway/cluster"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/telemetry"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The AI gateway in the server role (docs/gateway.md) lives in
// internal/gateway/cluster; this file wires it to the agent: its block in
// the configuration, its start and stop, its admin routes, its workers'
// calls, and what it needs of this server (server.Cluster).

// GatewayConfig is the gateway block; GatewayModel a model callers ask
// for by name; GatewayDeployment one provider account serving a model.
type (
	GatewayConfig     = cluster.Config
	GatewayModel      = cluster.Model
	GatewayDeployment = cluster.Deployment
)

// finishGateway checks the gateway block and fills its defaults.
func (c *Config) finishGateway() error {
	g := c.Gateway
	if g == nil {
		return nil
	}
	if !c.IsServer() {
		return fmt.Errorf("gateway: only servers run the gateway")
	}
	return g.Finish()
}

// startGateway builds the router (every server), traced when the
// telemetry block says so, and serves the transports.
func (a *Agent) startGateway(ctx context.Context) error {
	if a.cfg.Gateway == nil {
		return nil
	}
	tracing, err := telemetry.New(ctx, a.cfg.Telemetry, a.cfg.Name) // nil without the block
	if err != nil {
		return err
	}
	a.parts.add("gateway traces", nil, tracing.Shutdown) // stopped after the gateway: its last spans go out
	a.cfg.Gateway.TracerProvider = tracing.TracerProvider()
	gw, err := cluster.New(a.cfg.Gateway, a.cluster, a.fsm, a.log)
	if err != nil {
		return err
	}
	a.gw = gw
	stop := make(chan struct{})
	var drained <-chan struct{}
	// The gateway takes no new call as the agent begins to stop; those
	// running finish (within ctx) while the people are parked, before
	// its last charges are sent.
	a.parts.add("AI gateway", func(ctx context.Context) { drained = gw.Drain(ctx) }, func(ctx context.Context) error {
		if drained != nil {
			select {
			case <-drained:
			case <-ctx.Done():
				gw.Cut()
			}
		}
		gw.Close()
		close(stop)
		gw.Stop() // the last charges reach the log before raft stops
		return nil
	})
	if err := gw.Start(a.registry, stop); err != nil {
		return err
	}
	a.leadership.Add("run the gateway's submitted calls and hand out its shares", gw.Lead)
	return nil
}

// gatewayFromWorker serves one GatewayCall of worker until stop (the
// host's WorkerCalls start it on its own goroutine). It is the agent's:
// internal/gateway/cluster imports internal/host, so the host cannot name
// the gateway.
func (a *Agent) gatewayFromWorker(stop <-chan struct{}, worker string, env *protocol.Envelope, r host.Replier) {
	cluster.FromWorker(a.gw, a.cfg.Gateway != nil, a.log, stop, worker, env, r)
}

// GatewayAddr and GatewayGRPCAddr are the gateway's listeners ("" without
// a gateway block).
func (a *Agent) GatewayAddr() string {
	if a.gw == nil {
		return ""
	}
	return a.gw.Addr()
}

func (a *Agent) GatewayGRPCAddr() string {
	if a.gw == nil {
		return ""
	}
	return a.gw.GRPCAddr()
}
