package channel

import (
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Pipe returns the two ends of an in-memory channel. Every envelope is
// marshalled with the same protobuf encoding the gRPC transport uses and the
// bytes are queued; the other end unmarshals them. Queues are unbounded, like
// a socket buffer that never fills: flow control belongs to the layers above.
func Pipe() (*MemConn, *MemConn) {
	ab, ba := newQueue(), newQueue()
	return &MemConn{out: ab, in: ba}, &MemConn{out: ba, in: ab}
}

// MemConn is one end of a Pipe.
type MemConn struct {
	out, in *queue
	once    sync.Once
}

var _ Conn = (*MemConn)(nil)

// Send encodes env and queues the bytes for the other end.
func (c *MemConn) Send(env *protocol.Envelope) error {
	b, err := proto.Marshal(env)
	if err != nil {
		return err
	}
	return c.out.push(b)
}

// Recv waits for the next envelope from the other end.
func (c *MemConn) Recv() (*protocol.Envelope, error) {
	b, err := c.RecvBytes()
	if err != nil {
		return nil, err
	}
	env := new(protocol.Envelope)
	if err := proto.Unmarshal(b, env); err != nil {
		return nil, err
	}
	return env, nil
}

// RecvBytes waits for the next encoded envelope, exactly as it was queued.
func (c *MemConn) RecvBytes() ([]byte, error) { return c.in.pop() }

// Close closes both directions; the other end sees ErrClosed once it has read
// what was already queued.
func (c *MemConn) Close() error {
	c.once.Do(func() {
		c.out.close()
		c.in.close()
	})
	return nil
}

type queue struct {
	mu     sync.Mutex // guards items and closed
	items  [][]byte
	closed bool
	ready  chan struct{} // one token when items became non-empty
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(b []byte) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.items = append(q.items, b)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
	return nil
}

func (q *queue) pop() ([]byte, error) {
	for {
		q.mu.Lock()
		if len(q.items) > 0 {
			b := q.items[0]
			q.items[0] = nil
			q.items = q.items[1:]
			q.mu.Unlock()
			return b, nil
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		<-q.ready
	}
}

func (q *queue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}
