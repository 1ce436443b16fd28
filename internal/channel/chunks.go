package channel

import (
	"crypto/sha256"
	"fmt"
	"hash"

	"github.com/stickyd/stickyd/internal/protocol"
)

// ChunkBytes is the size of the pieces a large package travels in. A
// package above it is sent as PackageChunk envelopes ahead of the envelope
// it belongs to (when the other side reads them): a gRPC stream carries a
// series of pieces of this size several times faster than one message of
// tens of megabytes, which it must assemble and copy whole at each end,
// and other people's envelopes pass between the pieces.
const ChunkBytes = 256 << 10

// maxAssembling bounds the packages arriving in chunks at once on one
// peer; more means the other side is broken, and the peer stops.
const maxAssembling = 4096

// chunkKey names the envelope a chunk belongs to.
type chunkKey struct {
	id    uint64
	reply bool
}

// assembly is a package arriving in chunks.
type assembly struct {
	buf []byte
	sum hash.Hash // nil unless the peer digests packages
}

// DigestPackages makes the peer hash each Frozen package as its chunks
// arrive, while the sender is still sending, and give its SHA-256 in
// Frozen.sha256. A Frozen that arrives whole has that field cleared: it is
// only ever this side's own reading. Call it before Listen.
func (p *Peer) DigestPackages() { p.digests = true }

// EnableChunks says the other side reads packages sent in chunks: from now
// on a Frozen or Wake package above ChunkBytes is sent that way. Call it
// after the handshake, before the first such envelope.
func (p *Peer) EnableChunks() { p.chunks.Store(true) }

// packageField is the package an envelope carries, or nil.
func packageField(env *protocol.Envelope) *[]byte {
	switch b := env.Body.(type) {
	case *protocol.Envelope_Frozen:
		if b.Frozen != nil {
			return &b.Frozen.Package
		}
	case *protocol.Envelope_Wake:
		if b.Wake != nil {
			return &b.Wake.Package
		}
	}
	return nil
}

// send writes env, its package in chunks first when it is large and the
// other side reads them. The chunks and env go from one goroutine, so they
// arrive in order; other senders' envelopes may pass between them. env's
// package is sent as chunks and restored before send returns: env belongs
// to the sender during the call, as with its id.
func (p *Peer) send(env *protocol.Envelope) error {
	pkg := packageField(env)
	if pkg == nil || len(*pkg) <= ChunkBytes || env.Id == 0 || !p.chunks.Load() {
		return p.conn.Send(env)
	}
	whole := *pkg
	for off := 0; off < len(whole); off += ChunkBytes {
		pc := &protocol.PackageChunk{Data: whole[off:min(off+ChunkBytes, len(whole))]}
		if off == 0 {
			pc.Total = uint64(len(whole))
		}
		if err := p.conn.Send(&protocol.Envelope{Id: env.Id, Reply: env.Reply, Body: &protocol.Envelope_PackageChunk{PackageChunk: pc}}); err != nil {
			return err
		}
	}
	*pkg = nil
	defer func() { *pkg = whole }()
	return p.conn.Send(env)
}

// gather keeps a chunk for the envelope it belongs to. It runs in the read
// loop.
func (p *Peer) gather(env *protocol.Envelope, pc *protocol.PackageChunk) error {
	key := chunkKey{env.Id, env.Reply}
	a, ok := p.assembling[key]
	if !ok {
		if pc.Total > MaxEnvelopeBytes {
			return fmt.Errorf("a package of %d bytes arrived in chunks; at most %d are accepted", pc.Total, MaxEnvelopeBytes)
		}
		if len(p.assembling) >= maxAssembling {
			return fmt.Errorf("%d packages are arriving in chunks at once; at most %d may", len(p.assembling)+1, maxAssembling)
		}
		if p.assembling == nil {
			p.assembling = make(map[chunkKey]*assembly)
		}
		a = &assembly{buf: make([]byte, 0, max(pc.Total, uint64(len(pc.Data))))}
		if p.digests && env.Reply {
			a.sum = sha256.New()
		}
		p.assembling[key] = a
	}
	if len(a.buf)+len(pc.Data) > MaxEnvelopeBytes {
		return fmt.Errorf("a package arriving in chunks passed %d bytes", MaxEnvelopeBytes)
	}
	a.buf = append(a.buf, pc.Data...)
	if a.sum != nil {
		a.sum.Write(pc.Data)
	}
	return nil
}

// assemble gives env the package its chunks carried, if any arrived. It
// runs in the read loop.
func (p *Peer) assemble(env *protocol.Envelope) error {
	fz := env.GetFrozen()
	if fz != nil {
		fz.Sha256 = nil
	}
	if len(p.assembling) == 0 {
		return nil
	}
	key := chunkKey{env.Id, env.Reply}
	a, ok := p.assembling[key]
	if !ok {
		return nil
	}
	delete(p.assembling, key)
	pkg := packageField(env)
	if pkg == nil {
		return fmt.Errorf("package chunks arrived for a %T envelope, which carries no package", env.Body)
	}
	if a.sum != nil && fz != nil {
		a.sum.Write(*pkg)
		fz.Sha256 = a.sum.Sum(nil)
	}
	*pkg = append(a.buf, *pkg...)
	return nil
}
