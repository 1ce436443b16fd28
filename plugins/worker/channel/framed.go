package channel

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The framed channel carries the same envelopes as the gRPC stream, each
// as a 4-byte big-endian length and its protobuf encoding, on a Unix
// socket of the worker's. go-plugin still launches the worker, checks its
// handshake, health and AutoMTLS, and carries the channel's own handshake
// on the gRPC stream; the worker offers its socket in its Hello (path and a
// one-time token, both only ever sent over that authenticated stream), the
// host dials it and proves itself with the token, and says so in its
// HelloAck. From then on the envelopes go on the socket: no HTTP/2 frames
// or flow-control windows, and one writer goroutine that writes whatever
// the senders queued since its last write in one write, so a busy channel
// makes a syscall for many envelopes, not one each. A host or worker that does
// not offer or take it stays on the gRPC stream.

// tokenBytes is the size of the token the host proves itself with.
const tokenBytes = 32

// framedReadBuffer is the read buffer of a framed channel.
const framedReadBuffer = 64 << 10

// keptBuffer is the largest buffer a framed channel keeps between
// envelopes: a package's pieces do not stay behind.
const keptBuffer = 64 << 10

// queueBytes bounds what waits for the writer before senders wait.
const queueBytes = 4 << 20

// maxSocketDir is the longest temporary directory the worker's socket is
// made in.
const maxSocketDir = 64

// tokenWait bounds how long a connection to the worker's socket has to
// send the token.
const tokenWait = 2 * time.Second

// offerWait bounds how long the worker waits for the host's dial once the
// host said it dialed.
const offerWait = 10 * time.Second

// FramedStats are this process's framed channels' counters, all channels
// together (ReadFramedStats).
type FramedStats struct {
	Writes      uint64 // writes to the sockets, each of all that was queued
	Envelopes   uint64 // envelopes sent
	Bytes       uint64 // bytes written
	Waits       uint64 // sends that waited for room in a full queue
	QueuedBytes int64  // encoded, not yet written, now
}

var framedStats struct {
	writes, envelopes, bytes, waits atomic.Uint64
	queued                          atomic.Int64
}

// ReadFramedStats returns the counters of this process's framed channels.
func ReadFramedStats() FramedStats {
	return FramedStats{
		Writes:      framedStats.writes.Load(),
		Envelopes:   framedStats.envelopes.Load(),
		Bytes:       framedStats.bytes.Load(),
		Waits:       framedStats.waits.Load(),
		QueuedBytes: framedStats.queued.Load(),
	}
}

// FramedConn is a Conn over a stream socket: each envelope a 4-byte length
// and its encoding.
type FramedConn struct {
	nc   net.Conn
	r    *bufio.Reader
	hdr  [4]byte
	rbuf []byte // Recv's buffer; only Recv uses it

	mu    sync.Mutex // guards out, spare, werr
	out   []byte     // encoded envelopes waiting for the writer
	spare []byte
	werr  error
	// kick wakes the writer: something waits in out.
	kick chan struct{}
	// room is signalled when the writer takes out: a sender waits while
	// out holds queueBytes or more (a side that stops reading holds its
	// senders back, as a gRPC stream's window does, not an ever-growing
	// buffer).
	room *sync.Cond

	closeOnce sync.Once
	done      chan struct{}
}

var _ Conn = (*FramedConn)(nil)

// NewFramedConn is a framed channel on nc.
func NewFramedConn(nc net.Conn) *FramedConn {
	c := &FramedConn{nc: nc, r: bufio.NewReaderSize(nc, framedReadBuffer), done: make(chan struct{}), kick: make(chan struct{}, 1)}
	c.room = sync.NewCond(&c.mu)
	go c.writeLoop()
	return c
}

// writeLoop writes what the senders queued, all of it at each turn, until
// the channel closes or a write fails.
func (c *FramedConn) writeLoop() {
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		// The senders that are running now queue theirs first: one write
		// then carries them all (on a busy process this is what batches).
		runtime.Gosched()
		c.mu.Lock()
		if len(c.out) == 0 {
			// A kick for what the last turn took.
			c.mu.Unlock()
			continue
		}
		// out and spare never share an array: the senders append to the
		// one while the other is written.
		buf := c.out
		c.out, c.spare = c.spare[:0], nil
		c.room.Broadcast()
		c.mu.Unlock()
		_, err := c.nc.Write(buf)
		framedStats.writes.Add(1)
		framedStats.bytes.Add(uint64(len(buf)))
		framedStats.queued.Add(-int64(len(buf)))
		c.mu.Lock()
		if cap(buf) <= keptBuffer {
			c.spare = buf[:0]
		}
		if err != nil && c.werr == nil {
			c.werr = c.closedOr(err)
		}
		failed := c.werr != nil
		c.mu.Unlock()
		if failed {
			c.Close() // the reader sees it too
			return
		}
	}
}

// Send encodes env for the writer and returns: like a gRPC stream's Send,
// it does not wait for the bytes to leave; a write that fails closes the
// channel, which the reading side sees.
func (c *FramedConn) Send(env *protocol.Envelope) error {
	return c.send(env, proto.MarshalOptions{})
}

// SendSized is Send for an envelope proto.Size has just sized (sizedSender).
func (c *FramedConn) SendSized(env *protocol.Envelope) error {
	return c.send(env, proto.MarshalOptions{UseCachedSize: true})
}

func (c *FramedConn) send(env *protocol.Envelope, opts proto.MarshalOptions) error {
	c.mu.Lock()
	if len(c.out) >= queueBytes && c.werr == nil {
		framedStats.waits.Add(1)
		for len(c.out) >= queueBytes && c.werr == nil {
			c.room.Wait()
		}
	}
	if c.werr != nil {
		err := c.werr
		c.mu.Unlock()
		return err
	}
	// The length goes in front of the encoding once it is known.
	mark := len(c.out)
	c.out = append(c.out, 0, 0, 0, 0)
	var err error
	c.out, err = opts.MarshalAppend(c.out, env)
	size := len(c.out) - mark - 4
	if err == nil && size > MaxEnvelopeBytes {
		err = fmt.Errorf("an envelope of %d bytes; at most %d are sent", size, MaxEnvelopeBytes)
	}
	if err != nil {
		c.out = c.out[:mark]
		c.mu.Unlock()
		return err
	}
	binary.BigEndian.PutUint32(c.out[mark:], uint32(size))
	framedStats.envelopes.Add(1)
	framedStats.queued.Add(int64(size + 4))
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // the writer is already woken
	}
	return nil
}

// Recv reads the next envelope.
func (c *FramedConn) Recv() (*protocol.Envelope, error) {
	if _, err := io.ReadFull(c.r, c.hdr[:]); err != nil {
		return nil, c.closedOr(err)
	}
	n := binary.BigEndian.Uint32(c.hdr[:])
	if n > MaxEnvelopeBytes {
		return nil, fmt.Errorf("an envelope of %d bytes arrived; at most %d are read", n, MaxEnvelopeBytes)
	}
	buf := c.rbuf
	if int(n) > cap(buf) {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(c.r, buf); err != nil {
		return nil, c.closedOr(err)
	}
	if cap(buf) <= keptBuffer {
		c.rbuf = buf
	}
	env := &protocol.Envelope{}
	// (Unmarshal copies what it keeps: the buffer is read into again.)
	if err := proto.Unmarshal(buf, env); err != nil {
		return nil, fmt.Errorf("decoding an envelope: %w", err)
	}
	return env, nil
}

// Close closes the socket; a Recv in progress returns ErrClosed.
func (c *FramedConn) Close() error {
	c.closeOnce.Do(func() {
		close(c.done)
		_ = c.nc.Close()
		c.mu.Lock()
		if c.werr == nil {
			c.werr = ErrClosed
		}
		// What was queued and never taken is not written now.
		framedStats.queued.Add(-int64(len(c.out)))
		c.out = nil
		c.room.Broadcast()
		c.mu.Unlock()
	})
	return nil
}

// closedOr is ErrClosed once Close was called or the other side hung up,
// else err.
func (c *FramedConn) closedOr(err error) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return err
}

// FramedOffer is a worker's offer of a framed channel: a Unix socket in a
// directory of its own (mode 0700) and the token the host must send first.
type FramedOffer struct {
	dir   string
	ln    net.Listener
	token []byte
}

// OfferFramed opens the worker's socket and writes the offer into hello.
// Call Take with the host's answer, or Close if the handshake fails.
func OfferFramed(hello *protocol.Hello) (*FramedOffer, error) {
	// A Unix socket's path is bounded (108 bytes on Linux): a long TMPDIR
	// (a Nomad allocation's) gives way to /tmp.
	base := os.TempDir()
	if len(base) > maxSocketDir {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "stickyd-channel-")
	if err != nil {
		return nil, fmt.Errorf("making the channel's socket directory: %w", err)
	}
	path := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("listening for the framed channel: %w", err)
	}
	token := make([]byte, tokenBytes)
	if _, err := rand.Read(token); err != nil {
		ln.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	hello.FramedSocket, hello.FramedToken = path, hex.EncodeToString(token)
	return &FramedOffer{dir: dir, ln: ln, token: token}, nil
}

// Take returns the framed channel if the host's ack says it dialed it:
// the first connection that proves itself with the token. The socket and
// its directory are gone once it returns.
func (o *FramedOffer) Take(ctx context.Context, ack *protocol.HelloAck) (*FramedConn, error) {
	defer o.Close()
	if !ack.Framed {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, offerWait)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { o.ln.Close() })
	defer stop()
	for {
		nc, err := o.ln.Accept()
		if err != nil {
			return nil, fmt.Errorf("waiting for the host on the framed channel: %w", err)
		}
		got := make([]byte, tokenBytes)
		// The host writes the token as it connects: a connection that
		// does not is not kept waiting for long.
		_ = nc.SetReadDeadline(time.Now().Add(tokenWait))
		if _, err := io.ReadFull(nc, got); err != nil || subtle.ConstantTimeCompare(got, o.token) != 1 {
			nc.Close() // not the host: the socket stays for it
			continue
		}
		_ = nc.SetReadDeadline(time.Time{})
		return NewFramedConn(nc), nil
	}
}

// Close withdraws the offer.
func (o *FramedOffer) Close() {
	o.ln.Close()
	os.RemoveAll(o.dir)
}

// dialFramed is the host's side: it dials the socket hello offers and
// proves itself with the token.
func dialFramed(ctx context.Context, hello *protocol.Hello) (*FramedConn, error) {
	token, err := hex.DecodeString(hello.FramedToken)
	if err != nil || len(token) != tokenBytes {
		return nil, errors.New("the worker's framed channel token is malformed")
	}
	ctx, cancel := context.WithTimeout(ctx, offerWait)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", hello.FramedSocket)
	if err != nil {
		return nil, err
	}
	_ = nc.SetWriteDeadline(time.Now().Add(offerWait))
	if _, err := nc.Write(token); err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetWriteDeadline(time.Time{})
	return NewFramedConn(nc), nil
}
