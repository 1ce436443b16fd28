package channel

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// ChunkBytes is the size of the pieces a large package travels in. A
// package above it is sent as PackageChunk envelopes ahead of the envelope
// it belongs to (when the other side reads them): a gRPC stream carries a
// series of pieces of this size several times faster than one message of
// tens of megabytes, which it must assemble and copy whole at each end,
// and other people's envelopes pass between the pieces. Any other envelope
// above it goes as the pieces of its encoding.
const ChunkBytes = 256 << 10

// maxAssembling bounds the packages arriving in chunks at once on one
// peer; more means the other side is broken, and the peer stops.
const maxAssembling = 4096

// chunkKey names the package a chunk belongs to.
type chunkKey struct {
	id    uint64
	reply bool
	part  uint32
}

// assembly is a package (or an envelope) arriving in chunks.
type assembly struct {
	buf      []byte
	total    uint64
	envelope bool      // the pieces are an envelope's encoding, not a package
	sum      hash.Hash // nil unless the peer digests packages
	// parts holds the pieces of a bulk package (a precopy's) instead of
	// buf: its buffer is allocated and filled off the read loop, whose
	// allocating 100 MB at once (and the collector's work it is charged
	// for) would hold up the replies behind it.
	parts [][]byte
	bulk  bool
	size  uint64
}

// DigestPackages makes the peer hash each Frozen package as its chunks
// arrive, while the sender is still sending, and give its SHA-256 in
// Frozen.sha256. A Frozen that arrives whole has that field cleared: it is
// only ever this side's own reading. Call it before Listen.
func (p *Peer) DigestPackages() { p.digests = true }

// LimitAssembly bounds the packages arriving in chunks at once on this
// peer to budget bytes in all, and has their buffers grow with the bytes
// that arrive rather than be allocated at the size the first chunk
// claims: for a link to another process that is not this one's own worker
// (a peer link). Past the budget the peer stops, as for any broken
// stream. Call it before Listen.
func (p *Peer) LimitAssembly(budget uint64) { p.budget = budget }

// preallocBounded is the most a bounded peer allocates ahead for one
// assembly.
const preallocBounded = 4 << 20

// EnableChunks says the other side reads packages sent in chunks: from now
// on a package above ChunkBytes is sent that way, and any other envelope
// above it as the pieces of its encoding. Call it after the handshake,
// before the first such envelope.
func (p *Peer) EnableChunks() { p.chunks.Store(true) }

// undigested reports whether the reply to the request id is not to be
// hashed as it arrives.
func (p *Peer) undigested(id uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := p.pending[id]
	return c != nil && c.undigested
}

// packageFields are the packages an envelope carries, numbered by part.
func packageFields(env *protocol.Envelope) []*[]byte {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Frozen:
		if b.Frozen != nil {
			return []*[]byte{&b.Frozen.Package}
		}
	case *protocol.Envelope_Wake:
		if b.Wake != nil {
			return []*[]byte{&b.Wake.Package, &b.Wake.BasePackage}
		}
	case *protocol.Envelope_Precopied:
		if b.Precopied != nil {
			return []*[]byte{&b.Precopied.Package}
		}
	case *protocol.Envelope_Stage:
		if b.Stage != nil {
			return []*[]byte{&b.Stage.Package}
		}
	case *protocol.Envelope_Checkpointed:
		if b.Checkpointed != nil {
			out := make([]*[]byte, len(b.Checkpointed.Pieces))
			for i, pc := range b.Checkpointed.Pieces {
				out[i] = &pc.Package
			}
			return out
		}
	}
	return nil
}

// send writes env, its large packages in chunks first when the other side
// reads them. The chunks and env go from one goroutine, so they arrive in
// order; other senders' envelopes may pass between them. env's packages
// are sent as chunks and restored before send returns: env belongs to the
// sender during the call, as with its id.
func (p *Peer) send(env *protocol.Envelope) error {
	if !p.chunks.Load() {
		return p.conn.Send(env)
	}
	fields := packageFields(env)
	if env.Id != 0 {
		for part, pkg := range fields {
			if len(*pkg) <= ChunkBytes {
				continue
			}
			whole := *pkg
			if err := p.sendChunks(env.Id, env.Reply, uint32(part), false, whole); err != nil {
				return err
			}
			*pkg = nil
			defer func() { *pkg = whole }()
		}
	}
	if proto.Size(env) <= ChunkBytes {
		if c, ok := p.conn.(sizedSender); ok {
			// Sized just now, on this goroutine: not walked again.
			return c.SendSized(env)
		}
		return p.conn.Send(env)
	}
	return p.sendPieces(env)
}

// sizedSender is a Conn that can send an envelope proto.Size has just sized
// without sizing it again (proto.MarshalOptions.UseCachedSize). The caller
// must not have changed the envelope since.
type sizedSender interface {
	SendSized(env *protocol.Envelope) error
}

// sendChunks sends b as chunks of the package part of the envelope id (or
// of its encoding, for envelope).
func (p *Peer) sendChunks(id uint64, reply bool, part uint32, envelope bool, b []byte) error {
	for off := 0; off < len(b); off += ChunkBytes {
		pc := &protocol.PackageChunk{Data: b[off:min(off+ChunkBytes, len(b))], Part: part, Envelope: envelope}
		if off == 0 {
			pc.Total = uint64(len(b))
		}
		if err := p.conn.Send(&protocol.Envelope{Id: id, Reply: reply, Body: &protocol.Envelope_PackageChunk{PackageChunk: pc}}); err != nil {
			return err
		}
	}
	return nil
}

// sendPieces sends a large envelope as the pieces of its encoding. Notices
// (id 0) are told apart by a number of this side's own, never used by a
// request: the high bit set.
func (p *Peer) sendPieces(env *protocol.Envelope) error {
	b, err := proto.Marshal(env)
	if err != nil {
		return err
	}
	id := env.Id
	if id == 0 {
		id = noticeBit | p.nextNotice.Add(1)
	}
	return p.sendChunks(id, env.Reply, envelopePart, true, b)
}

// noticeBit marks the ids of notices sent in pieces.
const noticeBit = 1 << 63

// envelopePart is the part number of an envelope's own pieces: its
// packages may be arriving in chunks under the same id.
const envelopePart = ^uint32(0)

// gather keeps a chunk for the envelope it belongs to. It runs in the read
// loop. When the chunk completes an envelope sent in pieces, that envelope
// is returned, to be handled as if it had arrived whole.
func (p *Peer) gather(env *protocol.Envelope, pc *protocol.PackageChunk) (*protocol.Envelope, error) {
	whole, err := p.gatherPiece(env, pc)
	if err != nil || whole == nil {
		return nil, err
	}
	out := &protocol.Envelope{}
	if err := proto.Unmarshal(whole, out); err != nil {
		return nil, fmt.Errorf("decoding an envelope sent in pieces: %w", err)
	}
	if out.GetPackageChunk() != nil {
		return nil, errors.New("an envelope sent in pieces is itself a piece")
	}
	if env.Id&noticeBit != 0 {
		out.Id = 0
	}
	return out, nil
}

// gatherPiece adds a chunk to its assembly; for an envelope sent in
// pieces, it returns the whole encoding once total bytes have arrived.
func (p *Peer) gatherPiece(env *protocol.Envelope, pc *protocol.PackageChunk) ([]byte, error) {
	key := chunkKey{env.Id, env.Reply, pc.Part}
	a, ok := p.assembling[key]
	if !ok {
		if pc.Total > MaxEnvelopeBytes {
			return nil, fmt.Errorf("a package of %d bytes arrived in chunks; at most %d are accepted", pc.Total, MaxEnvelopeBytes)
		}
		if len(p.assembling) >= maxAssembling {
			return nil, fmt.Errorf("%d packages are arriving in chunks at once; at most %d may", len(p.assembling)+1, maxAssembling)
		}
		if p.assembling == nil {
			p.assembling = make(map[chunkKey]*assembly)
		}
		a = &assembly{total: pc.Total, envelope: pc.Envelope}
		ahead := max(pc.Total, uint64(len(pc.Data)))
		if p.budget > 0 {
			ahead = min(ahead, preallocBounded)
		}
		switch {
		case env.Reply && !pc.Envelope && p.undigested(env.Id):
			a.bulk = true
		default:
			a.buf = make([]byte, 0, ahead)
			if p.digests && env.Reply && !pc.Envelope {
				a.sum = sha256.New()
			}
		}
		p.assembling[key] = a
	}
	if pc.Envelope != (pc.Part == envelopePart) {
		return nil, fmt.Errorf("a chunk of part %d says envelope=%v", pc.Part, pc.Envelope)
	}
	if a.size+uint64(len(pc.Data)) > MaxEnvelopeBytes {
		return nil, fmt.Errorf("a package arriving in chunks passed %d bytes", MaxEnvelopeBytes)
	}
	if p.budget > 0 {
		if p.assemblingBytes+uint64(len(pc.Data)) > p.budget {
			return nil, fmt.Errorf("packages arriving in chunks at once passed this link's %d bytes", p.budget)
		}
		p.assemblingBytes += uint64(len(pc.Data))
	}
	a.size += uint64(len(pc.Data))
	if a.bulk {
		a.parts = append(a.parts, pc.Data)
		return nil, nil
	}
	a.buf = append(a.buf, pc.Data...)
	if a.sum != nil {
		a.sum.Write(pc.Data)
	}
	if !a.envelope {
		return nil, nil
	}
	switch n := uint64(len(a.buf)); {
	case n > a.total:
		return nil, fmt.Errorf("an envelope sent in pieces passed its %d bytes", a.total)
	case n < a.total:
		return nil, nil
	}
	delete(p.assembling, key)
	p.assemblingBytes -= min(p.assemblingBytes, a.size)
	return a.buf, nil
}

// assemble gives env the packages their chunks carried, if any arrived.
// It runs in the read loop. A bulk package is left to later, which joins
// its pieces and must run (off the read loop) before env is used.
func (p *Peer) assemble(env *protocol.Envelope) (later func(), err error) {
	// A digest is only ever this side's own reading. A precopy is not
	// hashed here: the person it copies is still working, and their replies
	// would wait in this loop behind the hashing; whoever stores it does.
	var sum *[]byte
	if fz := env.GetFrozen(); fz != nil {
		sum = &fz.Sha256
	}
	if sum != nil {
		*sum = nil
	}
	if len(p.assembling) == 0 {
		return nil, nil
	}
	var joins []func()
	for part, pkg := range packageFields(env) {
		key := chunkKey{env.Id, env.Reply, uint32(part)}
		a, ok := p.assembling[key]
		if !ok || a.envelope {
			continue
		}
		delete(p.assembling, key)
		p.assemblingBytes -= min(p.assemblingBytes, a.size)
		if a.bulk {
			joins = append(joins, func() { *pkg = join(a.parts, *pkg) })
			continue
		}
		if a.sum != nil && sum != nil {
			a.sum.Write(*pkg)
			*sum = a.sum.Sum(nil)
		}
		*pkg = append(a.buf, *pkg...)
	}
	// Chunks left for this envelope belong to no package it carries.
	for key, a := range p.assembling {
		if key.id == env.Id && key.reply == env.Reply && !a.envelope {
			return nil, fmt.Errorf("package chunks arrived for a %T envelope, which carries no package %d", env.Body, key.part)
		}
	}
	if len(joins) == 0 {
		return nil, nil
	}
	return func() {
		for _, j := range joins {
			j()
		}
	}, nil
}

// join is parts followed by tail, in one buffer.
func join(parts [][]byte, tail []byte) []byte {
	n := len(tail)
	for _, b := range parts {
		n += len(b)
	}
	out := make([]byte, 0, n)
	for _, b := range parts {
		out = append(out, b...)
	}
	return append(out, tail...)
}
