package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Handler receives the envelopes that are not replies: requests (id != 0) and
// notices (id 0). It is called from the Peer's read loop, in arrival order,
// and must not block: hand work to another goroutine and answer with Reply.
type Handler func(*protocol.Envelope)

// Peer correlates requests and replies over a Conn. It owns the Conn's read
// loop; Close (or the Conn failing) fails every pending call.
type Peer struct {
	conn   Conn
	handle Handler
	nextID atomic.Uint64
	// nextNotice numbers the notices sent in pieces.
	nextNotice atomic.Uint64
	// lastRecv is when the last envelope arrived (unix nanoseconds).
	lastRecv atomic.Int64
	// chunks is set once the other side said it reads packages in chunks.
	chunks atomic.Bool
	// batches is set once the other side said it reads envelopes sent
	// together (EnableBatches).
	batches atomic.Bool
	// assembling holds the packages arriving in chunks, by the id and
	// reply flag of the envelope they belong to. Only the read loop
	// touches it.
	assembling map[chunkKey]*assembly
	digests    bool // set before Listen: see DigestPackages
	// budget bounds the bytes assembling holds (LimitAssembly; 0: no
	// bound beyond MaxEnvelopeBytes each); assemblingBytes is what it
	// holds. Only the read loop touches them after Listen.
	budget          uint64
	assemblingBytes uint64

	mu      sync.Mutex // guards pending and err
	pending map[uint64]*Call
	err     error

	done chan struct{}
	once sync.Once
}

// NewPeer starts the read loop on conn. handle may be nil when the other side
// only ever replies.
func NewPeer(conn Conn, handle Handler) *Peer {
	p := NewIdlePeer(conn, handle)
	p.Listen()
	return p
}

// NewIdlePeer returns a Peer that reads nothing until Listen, so its owner
// can finish setting up before the first request reaches handle.
func NewIdlePeer(conn Conn, handle Handler) *Peer {
	return &Peer{conn: conn, handle: handle, pending: make(map[uint64]*Call), done: make(chan struct{})}
}

// Listen starts the read loop. Call it once.
func (p *Peer) Listen() { go p.readLoop() }

// Call is a request in flight.
type Call struct {
	id uint64
	p  *Peer
	// undigested says the reply's package is not hashed as it arrives
	// (DigestPackages): a precopy's.
	undigested bool

	mu sync.Mutex // guards the fields below
	// settled is set once the reply (or the peer's end) is here: env and
	// ok hold it until Then or Wait take it, or it went to then.
	settled   bool
	env       *protocol.Envelope
	ok        bool
	then      func(*protocol.Envelope, error)
	abandoned bool
	// reply is made by a Wait that comes before the reply (buffered 1); a
	// call answered through Then never has one.
	reply chan *protocol.Envelope
}

// settle hands on the call's reply (ok false: the peer stopped), once:
// to the function given to Then if there is one, else to Wait.
func (c *Call) settle(env *protocol.Envelope, ok bool) {
	c.mu.Lock()
	if c.settled {
		c.mu.Unlock()
		return
	}
	c.settled = true
	fn := c.then
	if fn == nil {
		c.env, c.ok = env, ok
		if c.reply != nil {
			if ok {
				c.reply <- env // buffered: never blocks
			} else {
				close(c.reply)
			}
		}
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	fn(c.result(env, ok))
}

func (c *Call) result(env *protocol.Envelope, ok bool) (*protocol.Envelope, error) {
	if !ok {
		if err := c.p.Err(); err != nil {
			return nil, err
		}
		return nil, errAbandoned
	}
	if e := env.GetError(); e != nil {
		return nil, &RemoteError{Code: e.Code, Message: e.Message, Kind: e.Kind}
	}
	return env, nil
}

// Then has fn called with the reply instead of waiting for it: at once if
// it is here already, else from the Peer's read loop when it arrives (or
// when the peer stops), so fn must not block. Use Then or Wait, not both;
// Abandon gives the call up.
func (c *Call) Then(fn func(*protocol.Envelope, error)) {
	c.mu.Lock()
	if c.abandoned {
		c.mu.Unlock()
		return
	}
	if c.settled {
		env, ok := c.env, c.ok
		c.mu.Unlock()
		fn(c.result(env, ok))
		return
	}
	c.then = fn
	c.mu.Unlock()
}

// Abandon gives the call up: a late reply is dropped. It reports whether
// the call was still waiting, in which case the function given to Then is
// never called.
func (c *Call) Abandon() bool {
	c.p.forget(c.id)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.abandoned = true
	if c.settled {
		return false
	}
	c.settled = true
	return true
}

// Start sends env as a request and returns at once; envelopes started from one
// goroutine reach the other side in the order they were started.
func (p *Peer) Start(env *protocol.Envelope) (*Call, error) {
	c := &Call{id: p.nextID.Add(1), p: p, undigested: env.GetPrecopy() != nil}
	env.Id, env.Reply = c.id, false
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return nil, err
	}
	p.pending[c.id] = c
	p.mu.Unlock()
	if err := p.send(env); err != nil {
		p.forget(c.id)
		return nil, fmt.Errorf("sending envelope: %w", err)
	}
	return c, nil
}

// Wait waits for the reply. An Error envelope from the other side is returned
// as a *RemoteError. If ctx ends first the call is abandoned: a late reply is
// dropped.
func (c *Call) Wait(ctx context.Context) (*protocol.Envelope, error) {
	c.mu.Lock()
	if c.settled {
		env, ok := c.env, c.ok
		c.mu.Unlock()
		return c.result(env, ok)
	}
	if c.reply == nil {
		c.reply = make(chan *protocol.Envelope, 1)
	}
	reply := c.reply
	c.mu.Unlock()
	select {
	case env, ok := <-reply:
		return c.result(env, ok)
	case <-ctx.Done():
		c.p.forget(c.id)
		return nil, ctx.Err()
	}
}

// errAbandoned is what a call given up (Abandon) answers a late Wait.
var errAbandoned = errors.New("the call was abandoned")

// Call sends env and waits for its reply.
func (p *Peer) Call(ctx context.Context, env *protocol.Envelope) (*protocol.Envelope, error) {
	c, err := p.Start(env)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx)
}

// Reply answers the request with the given id.
func (p *Peer) Reply(id uint64, env *protocol.Envelope) error {
	env.Id, env.Reply = id, true
	return p.send(env)
}

// EnableBatches says the other side reads envelopes sent together
// (SendTogether). Call it after the handshake.
func (p *Peer) EnableBatches() { p.batches.Store(true) }

// SendTogether sends envs, each already an answer or a notice with its id
// set, in order and, when the other side reads batches, in one message: the
// other side handles them back to back (a pull woken by a message and the
// message's reply reach the front together). An envelope that carries a
// package, or is large, goes alone, in order.
func (p *Peer) SendTogether(envs ...*protocol.Envelope) error {
	if len(envs) > 1 && p.batches.Load() && batchable(envs) {
		carrier := &protocol.Envelope{Batch: envs}
		if !p.chunks.Load() || proto.Size(carrier) <= ChunkBytes {
			return p.conn.Send(carrier)
		}
	}
	for _, env := range envs {
		if err := p.send(env); err != nil {
			return err
		}
	}
	return nil
}

// batchable says envs may travel in one batch: none carries a package
// (which may have to go in chunks) or is itself a batch.
func batchable(envs []*protocol.Envelope) bool {
	for _, env := range envs {
		if len(packageFields(env)) > 0 || len(env.Batch) > 0 || env.GetPackageChunk() != nil {
			return false
		}
	}
	return true
}

// ReplyError answers the request with an Error envelope.
func (p *Peer) ReplyError(id uint64, code protocol.Error_Code, msg string) error {
	return p.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: code, Message: msg}}})
}

// Notify sends env with id 0; no reply is expected.
func (p *Peer) Notify(env *protocol.Envelope) error {
	env.Id, env.Reply = 0, false
	return p.send(env)
}

// LastRecv is when the last envelope arrived from the other side (zero
// before the first): any envelope is a sign of life.
func (p *Peer) LastRecv() time.Time {
	n := p.lastRecv.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Done is closed when the peer stops: Close was called or the Conn failed.
func (p *Peer) Done() <-chan struct{} { return p.done }

// Err says why the peer stopped, or nil while it runs.
func (p *Peer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Close closes the Conn and fails pending calls with ErrClosed. Idempotent.
func (p *Peer) Close() error {
	p.stop(ErrClosed)
	return nil
}

// Pending is the number of calls waiting for a reply.
func (p *Peer) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

func (p *Peer) forget(id uint64) {
	p.mu.Lock()
	delete(p.pending, id)
	p.mu.Unlock()
}

func (p *Peer) readLoop() {
	for {
		env, err := p.conn.Recv()
		if err != nil {
			p.stop(err)
			return
		}
		p.lastRecv.Store(time.Now().UnixNano())
		if len(env.Batch) > 0 {
			if err := p.receiveBatch(env); err != nil {
				p.stop(err)
				return
			}
			continue
		}
		if err := p.receive(env); err != nil {
			p.stop(err)
			return
		}
	}
}

// receiveBatch handles the envelopes of a batch in order, as if each had
// arrived alone.
func (p *Peer) receiveBatch(carrier *protocol.Envelope) error {
	if carrier.Body != nil || carrier.Id != 0 {
		return errors.New("a batch's carrier has a body or an id of its own")
	}
	for _, env := range carrier.Batch {
		if len(env.Batch) > 0 || env.GetPackageChunk() != nil {
			return errors.New("a batch holds a batch or a piece of a package")
		}
		if err := p.receive(env); err != nil {
			return err
		}
	}
	return nil
}

// receive handles one envelope: a piece is kept until its envelope is
// whole, a reply settles its call, anything else goes to the handler.
func (p *Peer) receive(env *protocol.Envelope) error {
	if pc := env.GetPackageChunk(); pc != nil {
		whole, err := p.gather(env, pc)
		if err != nil {
			return err
		}
		if whole == nil {
			return nil
		}
		env = whole
	}
	later, err := p.assemble(env)
	if err != nil {
		return err
	}
	if !env.Reply {
		if p.handle != nil {
			p.handle(env)
		}
		return nil
	}
	p.mu.Lock()
	c := p.pending[env.Id]
	delete(p.pending, env.Id)
	p.mu.Unlock()
	switch {
	case c != nil && later != nil:
		go func() {
			later()
			c.settle(env, true)
		}()
	case c != nil:
		c.settle(env, true)
	}
	return nil
}

func (p *Peer) stop(err error) {
	p.once.Do(func() {
		p.mu.Lock()
		p.err = err
		pending := p.pending
		p.pending = nil
		p.mu.Unlock()
		for _, c := range pending {
			c.settle(nil, false)
		}
		p.conn.Close()
		close(p.done)
	})
}

// RemoteError is an Error envelope received as a reply.
type RemoteError struct {
	Code    protocol.Error_Code
	Message string
	// Kind is the refusing subsystem's finer word, when it said one.
	Kind string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}
