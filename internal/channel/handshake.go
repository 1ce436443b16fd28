package channel

import (
	"context"
	"fmt"

	"github.com/stickyd/stickyd/internal/protocol"
)

// Greet is the worker's side of the handshake: it sends hello and waits for
// the host's HelloAck. A host that refuses the worker answers with an Error,
// returned here wrapping ErrIncompatible when that is the reason.
func Greet(ctx context.Context, c Conn, hello *protocol.Hello) (*protocol.HelloAck, error) {
	if err := c.Send(&protocol.Envelope{Id: 1, Body: &protocol.Envelope_Hello{Hello: hello}}); err != nil {
		return nil, fmt.Errorf("sending hello: %w", err)
	}
	env, err := recvCtx(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("waiting for the host's answer to hello: %w", err)
	}
	if e := env.GetError(); e != nil {
		if e.Code == protocol.Error_INCOMPATIBLE {
			return nil, fmt.Errorf("%w: %s", ErrIncompatible, e.Message)
		}
		return nil, &RemoteError{Code: e.Code, Message: e.Message}
	}
	ack := env.GetHelloAck()
	if ack == nil {
		return nil, fmt.Errorf("host answered hello with %T", env.Body)
	}
	return ack, nil
}

// Accept is the host's side of the handshake: it reads the worker's Hello and
// accepts it with ack, or refuses a worker that speaks another protocol
// version, telling it why, and returns an error wrapping ErrIncompatible.
func Accept(ctx context.Context, c Conn, ack *protocol.HelloAck) (*protocol.Hello, error) {
	env, err := recvCtx(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("waiting for the worker's hello: %w", err)
	}
	hello := env.GetHello()
	if hello == nil {
		return nil, fmt.Errorf("worker opened the channel with %T, want hello", env.Body)
	}
	if hello.ProtocolVersion != protocol.Version {
		msg := fmt.Sprintf("worker %q speaks channel protocol %d, this host speaks %d; rebuild the worker against a matching stickyd SDK",
			hello.App, hello.ProtocolVersion, protocol.Version)
		_ = c.Send(&protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_Error{
			Error: &protocol.Error{Code: protocol.Error_INCOMPATIBLE, Message: msg}}})
		return hello, fmt.Errorf("%w: %s", ErrIncompatible, msg)
	}
	ack.ProtocolVersion = protocol.Version
	if err := c.Send(&protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_HelloAck{HelloAck: ack}}); err != nil {
		return hello, fmt.Errorf("sending hello ack: %w", err)
	}
	return hello, nil
}

// recvCtx reads one envelope, closing c if ctx ends first.
func recvCtx(ctx context.Context, c Conn) (*protocol.Envelope, error) {
	type result struct {
		env *protocol.Envelope
		err error
	}
	ch := make(chan result, 1)
	go func() {
		env, err := c.Recv()
		ch <- result{env, err}
	}()
	select {
	case r := <-ch:
		return r.env, r.err
	case <-ctx.Done():
		c.Close()
		return nil, ctx.Err()
	}
}
