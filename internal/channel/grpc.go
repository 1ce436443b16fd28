package channel

import (
	"context"
	"errors"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/stickyd/stickyd/internal/protocol"
)

// stream is what the client and server sides of the Channel RPC share.
type stream interface {
	Send(*protocol.Envelope) error
	Recv() (*protocol.Envelope, error)
}

// GRPCConn is a Conn over one Channel RPC stream.
type GRPCConn struct {
	s      stream
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
