package channel

import (
	"google.golang.org/grpc"
)

// HandshakeConfig is go-plugin's handshake (plugin.HandshakeConfig, field
// for field, so that the host converts one into the other): the worker
// reads it without linking go-plugin (ServePlugin).
type HandshakeConfig struct {
	// ProtocolVersion is the plugin transport's version, the "app
	// protocol" of go-plugin's handshake line.
	ProtocolVersion uint
	// MagicCookieKey and MagicCookieValue are the environment variable the
	// host sets for its workers, by which a worker knows a host started it.
	MagicCookieKey   string
	MagicCookieValue string
}

// Handshake is the go-plugin handshake shared by host and worker. Its
// ProtocolVersion is the plugin transport's; the channel protocol version is
// checked separately in the first envelope (see Accept and Greet).
var Handshake = HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "STICKYD_WORKER_PLUGIN",
	MagicCookieValue: "3f1c0b1e-stickyd-worker",
}

// MaxEnvelopeBytes bounds one envelope on the gRPC channel, in both
// directions (gRPC's default is 4 MiB). The front's body and message limits
// must stay below it.
const MaxEnvelopeBytes = 512 << 20

// The channel is one stream: whatever is in flight on it when a person's
// reply is sent arrives before that reply. The window bounds that queue,
// so a precopy of 100 MB streaming from the worker holds a reply back by
// at most 2 MiB, not by the 32 MiB a wider window let through (pauses of
// 50-500 ms at 100 MB); a loopback pipe needs no more to run at full speed.
const (
	windowBytes = 2 << 20
	bufferBytes = 256 << 10
)

// ServerOptions are the worker's gRPC server options.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxEnvelopeBytes), grpc.MaxSendMsgSize(MaxEnvelopeBytes),
		grpc.InitialWindowSize(windowBytes), grpc.InitialConnWindowSize(windowBytes),
		grpc.ReadBufferSize(bufferBytes), grpc.WriteBufferSize(bufferBytes)}
}

// PeerLinkMessageBytes bounds one gRPC message a peer link's server
// reads. Both sides of a link of this version send every envelope above
// ChunkBytes in chunks, so no message needs more; a larger one (an older
// version's whole package, or a hostile sender's) is refused before it is
// read into memory, where two 300 MB envelopes once took an agent to
// 1.9 GB.
const PeerLinkMessageBytes = 4 << 20

// PeerLinkServerOptions are the gRPC server options of the peer-link port.
func PeerLinkServerOptions() []grpc.ServerOption {
	return append(ServerOptions(), grpc.MaxRecvMsgSize(PeerLinkMessageBytes))
}

// PeerLinkAssemblyBytes bounds the bytes of the packages arriving in chunks
// at once on one peer link (Peer.LimitAssembly).
const PeerLinkAssemblyBytes = 1 << 30

// DialOptions are the host's gRPC options for a worker's channel.
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithDefaultCallOptions(
		grpc.MaxCallRecvMsgSize(MaxEnvelopeBytes), grpc.MaxCallSendMsgSize(MaxEnvelopeBytes)),
		grpc.WithInitialWindowSize(windowBytes), grpc.WithInitialConnWindowSize(windowBytes),
		grpc.WithReadBufferSize(bufferBytes), grpc.WithWriteBufferSize(bufferBytes)}
}
