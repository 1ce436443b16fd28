package channel

import (
	"context"
	"fmt"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
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
	hello, _, err := accept(ctx, c, ack, false)
	return hello, err
}

// AcceptFramed is Accept that also takes the framed channel the worker
// offers (FramedOffer), when it does and its socket answers: it returns
// the Conn to use from then on, the framed one (which closes c with it) or
// c itself.
func AcceptFramed(ctx context.Context, c Conn, ack *protocol.HelloAck) (*protocol.Hello, Conn, error) {
	return accept(ctx, c, ack, true)
}

func accept(ctx context.Context, c Conn, ack *protocol.HelloAck, framed bool) (*protocol.Hello, Conn, error) {
	env, err := recvCtx(ctx, c)
	if err != nil {
		return nil, c, fmt.Errorf("waiting for the worker's hello: %w", err)
	}
	hello := env.GetHello()
	if hello == nil {
		return nil, c, fmt.Errorf("worker opened the channel with %T, want hello", env.Body)
	}
	if hello.ProtocolVersion != protocol.Version {
		msg := fmt.Sprintf("worker %q speaks channel protocol %d, this host speaks %d; rebuild the worker against a matching stickyd SDK",
			hello.App, hello.ProtocolVersion, protocol.Version)
		_ = c.Send(&protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_Error{
			Error: &protocol.Error{Code: protocol.Error_INCOMPATIBLE, Message: msg}}})
		return hello, c, fmt.Errorf("%w: %s", ErrIncompatible, msg)
	}
	ack.ProtocolVersion = protocol.Version
	var fc *FramedConn
	if framed && hello.FramedSocket != "" {
		// The worker waits for the ack before it takes the dial: the
		// dial is done first, and the ack says whether it was.
		if fc, err = dialFramed(ctx, hello); err == nil {
			ack.Framed = true
		}
	}
	if err := c.Send(&protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_HelloAck{HelloAck: ack}}); err != nil {
		if fc != nil {
			fc.Close()
		}
		return hello, c, fmt.Errorf("sending hello ack: %w", err)
	}
	if fc == nil {
		return hello, c, nil
	}
	return hello, Paired(fc, c), nil
}

// pairedConn is a framed channel whose handshake's stream stays open
// beside it, idle, for as long as it lives: closing one closes both (the
// worker stops when either ends).
type pairedConn struct {
	*FramedConn
	stream Conn
}

func (p *pairedConn) Close() error {
	p.FramedConn.Close()
	return p.stream.Close()
}

// Paired returns the framed channel fc as the Conn to use in stream's
// place: closing it closes both.
func Paired(fc *FramedConn, stream Conn) Conn { return &pairedConn{FramedConn: fc, stream: stream} }

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
