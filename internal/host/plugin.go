package host

import (
	"context"
	"errors"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/stickyd/stickyd/plugins/worker/channel"
)

// The host's half of the go-plugin glue. The worker's half is not
// go-plugin's library but channel.ServePlugin, which speaks its protocol
// without linking it (a worker stays small; docs/sdk.md); what both halves
// share is channel.Handshake and the Worker service of package protocol.

// pluginName is the name the worker plugin is dispensed under.
const pluginName = "worker"

// pluginHandshake is channel.Handshake as go-plugin takes it.
var pluginHandshake = plugin.HandshakeConfig(channel.Handshake)

// pluginSet is the plugin set of the host's go-plugin clients.
var pluginSet = map[string]plugin.Plugin{pluginName: workerPlugin{}}

// workerPlugin is go-plugin's handle on a worker: dispensed, it is the
// gRPC connection on which the host opens the channel (channel.Dial).
type workerPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = workerPlugin{}

// GRPCServer is the plugin's side, which a host never serves.
func (workerPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return errors.New("a stickyd worker is served by the SDK (channel.ServePlugin), not by go-plugin")
}

// GRPCClient returns the worker's connection.
func (workerPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, cc *grpc.ClientConn) (any, error) {
	return cc, nil
}
