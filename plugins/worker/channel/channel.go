// Package channel owns the one stream of Envelopes between a host and a
// worker, whatever carries it: gRPC on the go-plugin socket (grpc.go,
// plugin.go; the worker's end of go-plugin's protocol in pluginserve.go,
// without go-plugin) or a pair of in-memory queues carrying the same
// encoded bytes (mem.go). On top of a Conn, a Peer (peer.go) correlates requests with their
// replies, and the handshake (handshake.go) checks the protocol version.
//
// The channel is shared by the host (internal/host) and the SDK (package
// worker), and lives in the SDK's module so that an application's worker
// needs nothing else of stickyd; it is not an API for applications, and it
// may change with the protocol version. The package knows nothing of users,
// pages or the supervisor, and must never import the product.
package channel

import (
	"errors"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Conn is one end of a channel. Send may be called from many goroutines; Recv
// from one. Close is idempotent and unblocks a pending Recv, which then
// returns ErrClosed (or the transport's error).
type Conn interface {
	Send(*protocol.Envelope) error
	Recv() (*protocol.Envelope, error)
	Close() error
}

var (
	// ErrClosed is returned by a Conn or Peer used after it was closed.
	ErrClosed = errors.New("channel closed")
	// ErrIncompatible is returned by the handshake when the two sides speak
	// different protocol versions.
	ErrIncompatible = errors.New("incompatible worker protocol")
)
