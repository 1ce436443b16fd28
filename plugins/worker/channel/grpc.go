package channel

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// stream is what the client and server sides of the Channel RPC share.
type stream interface {
	Send(*protocol.Envelope) error
	Recv() (*protocol.Envelope, error)
}

// GRPCConn is a Conn over one Channel RPC stream.
type GRPCConn struct {
	s stream
	// chunks: the other side of a peer link reads packages in chunks
	// (DialPeerLink, and the server side of one).
	chunks bool
	sendMu sync.Mutex // serialises Send: a gRPC stream allows one sender
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
}

var _ Conn = (*GRPCConn)(nil)

// Dial opens the Channel RPC on cc, as the host does on a worker's plugin
// connection. Cancelling ctx or closing the Conn ends the stream.
func Dial(ctx context.Context, cc grpc.ClientConnInterface) (*GRPCConn, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := protocol.NewWorkerClient(cc).Channel(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	return &GRPCConn{s: s, cancel: cancel, done: make(chan struct{})}, nil
}

// chunksKey is the gRPC metadata by which the two sides of a peer link
// say they read packages in chunks: the dialer in its request, the server
// in its header.
const chunksKey = "stickyd-chunks"

// DialPeerLink opens the Channel RPC on a peer link to another agent,
// saying this side reads chunks. Chunks() then reports whether the server
// does: a server of this version answers at once; one that does not
// answer within headerWait is taken as an older version, which does not.
func DialPeerLink(ctx context.Context, cc grpc.ClientConnInterface) (*GRPCConn, error) {
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(ctx, chunksKey, "1"))
	s, err := protocol.NewWorkerClient(cc).Channel(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	c := &GRPCConn{s: s, cancel: cancel, done: make(chan struct{})}
	header := make(chan metadata.MD, 1)
	go func() {
		md, _ := s.Header()
		header <- md
	}()
	select {
	case md := <-header:
		c.chunks = len(md.Get(chunksKey)) > 0
	case <-time.After(headerWait):
	}
	return c, nil
}

// headerWait is how long DialPeerLink waits for the server's header.
const headerWait = 3 * time.Second

// Chunks reports whether the other side of a peer link reads packages in
// chunks (see Peer.EnableChunks).
func (c *GRPCConn) Chunks() bool { return c.chunks }

// Send writes env on the stream.
func (c *GRPCConn) Send(env *protocol.Envelope) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	return transportErr(c.s.Send(env))
}

// Recv reads the next envelope from the stream.
func (c *GRPCConn) Recv() (*protocol.Envelope, error) {
	env, err := c.s.Recv()
	if err != nil {
		select {
		case <-c.done:
			return nil, ErrClosed
		default:
		}
		return nil, transportErr(err)
	}
	return env, nil
}

// Close ends the stream. On the server side it makes Serve return.
func (c *GRPCConn) Close() error {
	c.once.Do(func() {
		close(c.done)
		if c.cancel != nil {
			c.cancel()
		}
		if cs, ok := c.s.(grpc.ClientStream); ok {
			c.sendMu.Lock()
			_ = cs.CloseSend()
			c.sendMu.Unlock()
		}
	})
	return nil
}

func transportErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
		return ErrClosed
	}
	return err
}

// grpcServer implements the Worker service on the worker's side: each Channel
// call becomes a Conn handed to serve, and the call lasts as long as serve.
type grpcServer struct {
	protocol.UnimplementedWorkerServer
	serve func(context.Context, Conn) error
}

func (g *grpcServer) Channel(s grpc.BidiStreamingServer[protocol.Envelope, protocol.Envelope]) error {
	c := &GRPCConn{s: s, done: make(chan struct{})}
	if md, ok := metadata.FromIncomingContext(s.Context()); ok && len(md.Get(chunksKey)) > 0 {
		// A peer link's dialer of this version: it reads chunks, and is
		// told at once that this side does (DialPeerLink).
		if err := s.SendHeader(metadata.Pairs(chunksKey, "1")); err != nil {
			return err
		}
		c.chunks = true
	}
	ctx, cancel := context.WithCancel(s.Context())
	defer cancel()
	c.cancel = cancel
	go func() {
		<-ctx.Done()
		c.Close()
	}()
	err := g.serve(ctx, c)
	c.Close()
	return err
}

// RegisterServer registers the Worker service on s; every Channel call is
// served by serve.
func RegisterServer(s *grpc.Server, serve func(context.Context, Conn) error) {
	protocol.RegisterWorkerServer(s, &grpcServer{serve: serve})
}
