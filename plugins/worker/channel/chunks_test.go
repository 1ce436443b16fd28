package channel

import (
	"bytes"
	"crypto/sha256"
	"sync/atomic"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// countingConn counts the envelopes sent on a Conn, and the chunks among them.
type countingConn struct {
	Conn
	sent, chunks atomic.Int64
}

func (c *countingConn) Send(env *protocol.Envelope) error {
	c.sent.Add(1)
	if env.GetPackageChunk() != nil {
		c.chunks.Add(1)
	}
	return c.Conn.Send(env)
}

func bigPackage(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i * 7)
	}
	return b
}

// A large Wake request and a large Frozen reply travel in chunks towards a
// side that reads them, and arrive whole; the sender's envelope is left as
// it was.
func TestPeerSendsLargePackagesInChunks(t *testing.T) {
	for _, chunked := range []bool{false, true} {
		a, b := Pipe()
		ca, cb := &countingConn{Conn: a}, &countingConn{Conn: b}
		frozen := bigPackage(3*ChunkBytes + 5)
		var server *Peer
		got := make(chan []byte, 1)
		server = NewIdlePeer(cb, func(env *protocol.Envelope) {
			got <- env.GetWake().GetPackage()
			go func() {
				// A digest on the wire is never taken for the receiver's own.
				_ = server.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Frozen{Frozen: &protocol.Frozen{Package: frozen, Pages: 2, Sha256: []byte("forged")}}})
			}()
		})
		client := NewIdlePeer(ca, nil)
		client.DigestPackages()
		if chunked {
			server.EnableChunks()
			client.EnableChunks()
		}
		server.Listen()
		client.Listen()

		wake := bigPackage(2*ChunkBytes + 1)
		env := &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: "ann", Epoch: 3, Package: wake}}}
		rep, err := client.Call(t.Context(), env)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(<-got, wake) {
			t.Fatalf("chunked=%v: the wake package arrived changed", chunked)
		}
		if !bytes.Equal(env.GetWake().GetPackage(), wake) {
			t.Fatalf("chunked=%v: the sender's envelope lost its package", chunked)
		}
		if fz := rep.GetFrozen(); !bytes.Equal(fz.GetPackage(), frozen) || fz.GetPages() != 2 {
			t.Fatalf("chunked=%v: the frozen reply arrived changed", chunked)
		}
		sum := sha256.Sum256(frozen)
		if got, want := rep.GetFrozen().GetSha256(), sum[:]; chunked && !bytes.Equal(got, want) || !chunked && got != nil {
			t.Fatalf("chunked=%v: the frozen package's digest is %x", chunked, got)
		}
		wantA, wantB := int64(0), int64(0)
		if chunked {
			wantA, wantB = 3, 4
		}
		if ca.chunks.Load() != wantA || cb.chunks.Load() != wantB {
			t.Fatalf("chunked=%v: %d and %d chunks sent, want %d and %d", chunked, ca.chunks.Load(), cb.chunks.Load(), wantA, wantB)
		}
		client.Close()
		server.Close()
	}
}

// Chunks that belong to no package, or to a package past the bound, stop
// the peer with a reason: they come only from a broken or hostile side.
func TestPeerRefusesBadChunks(t *testing.T) {
	for name, envs := range map[string][]*protocol.Envelope{
		"too large": {{Id: 1, Body: &protocol.Envelope_PackageChunk{PackageChunk: &protocol.PackageChunk{Data: []byte("x"), Total: MaxEnvelopeBytes + 1}}}},
		"no package": {
			{Id: 1, Body: &protocol.Envelope_PackageChunk{PackageChunk: &protocol.PackageChunk{Data: []byte("x"), Total: 1}}},
			{Id: 1, Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}},
		},
	} {
		a, b := Pipe()
		p := NewPeer(b, func(*protocol.Envelope) {})
		for _, env := range envs {
			if err := a.Send(env); err != nil {
				t.Fatal(err)
			}
		}
		<-p.Done()
		if p.Err() == nil || p.Err() == ErrClosed {
			t.Fatalf("%s: the peer stopped with %v, want the reason", name, p.Err())
		}
		t.Logf("%s: %v", name, p.Err())
		a.Close()
	}
}

// A large envelope that carries no package (a checkpoint of a big page, a
// notice) goes as the pieces of its encoding and arrives whole, a reply as
// the reply of its call and a notice as a notice.
func TestPeerSendsLargeEnvelopesInPieces(t *testing.T) {
	a, b := Pipe()
	ca := &countingConn{Conn: a}
	piece := bigPackage(2*ChunkBytes + 9)
	notices := make(chan *protocol.Envelope, 1)
	var server *Peer
	server = NewIdlePeer(b, func(env *protocol.Envelope) {
		if env.Id == 0 {
			notices <- env
			return
		}
		go func() {
			// A big piece goes in chunks; the rest, still large, as the
			// pieces of the reply's encoding.
			pieces := []*protocol.CheckpointPiece{{User: "ann", Package: piece}, {User: "bob", Package: []byte("small")}}
			for i := 0; i < 40; i++ {
				pieces = append(pieces, &protocol.CheckpointPiece{User: "cy", Package: bigPackage(ChunkBytes / 16)})
			}
			_ = server.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Checkpointed{Checkpointed: &protocol.Checkpointed{Pieces: pieces}}})
		}()
	})
	client := NewIdlePeer(ca, nil)
	server.EnableChunks()
	client.EnableChunks()
	server.Listen()
	client.Listen()
	defer client.Close()
	defer server.Close()

	rep, err := client.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Checkpoint{Checkpoint: &protocol.Checkpoint{MaxBytes: 1 << 30}}})
	if err != nil {
		t.Fatal(err)
	}
	ps := rep.GetCheckpointed().GetPieces()
	if len(ps) != 42 || !bytes.Equal(ps[0].Package, piece) || string(ps[1].Package) != "small" || !bytes.Equal(ps[41].Package, bigPackage(ChunkBytes/16)) {
		t.Fatalf("the checkpoint reply arrived changed: %d pieces", len(ps))
	}
	data := bigPackage(3 * ChunkBytes)
	if err := client.Notify(&protocol.Envelope{Body: &protocol.Envelope_Publish{Publish: &protocol.Publish{Table: "prices", Data: data}}}); err != nil {
		t.Fatal(err)
	}
	n := <-notices
	if n.Id != 0 || n.GetPublish().GetTable() != "prices" || !bytes.Equal(n.GetPublish().GetData(), data) {
		t.Fatalf("the notice arrived changed (id %d)", n.Id)
	}
	if ca.chunks.Load() < 4 {
		t.Fatalf("the notice went in %d pieces, want at least 4", ca.chunks.Load())
	}
}

// A precopy's package (a bulk reply) arrives whole in chunks, joined off
// the read loop, and a Stage request
// carrying one arrives whole too.
func TestPrecopyTravelsInChunks(t *testing.T) {
	a, b := Pipe()
	cb := &countingConn{Conn: b}
	pkg := bigPackage(5*ChunkBytes + 17)
	var server *Peer
	staged := make(chan []byte, 1)
	server = NewIdlePeer(cb, func(env *protocol.Envelope) {
		switch body := env.Body.(type) {
		case *protocol.Envelope_Precopy:
			go func() {
				_ = server.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Precopied{Precopied: &protocol.Precopied{Package: pkg, Base: 9}}})
			}()
		case *protocol.Envelope_Stage:
			staged <- body.Stage.Package
			go func() {
				_ = server.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{}}})
			}()
		}
	})
	client := NewIdlePeer(a, nil)
	client.DigestPackages()
	server.EnableChunks()
	client.EnableChunks()
	server.Listen()
	client.Listen()
	rep, err := client.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Precopy{Precopy: &protocol.Precopy{User: "ann"}}})
	if err != nil {
		t.Fatal(err)
	}
	if pc := rep.GetPrecopied(); !bytes.Equal(pc.GetPackage(), pkg) || pc.GetBase() != 9 {
		t.Fatalf("the precopy arrived changed (%d bytes of %d)", len(pc.GetPackage()), len(pkg))
	}
	if n := cb.chunks.Load(); n != 6 {
		t.Fatalf("the precopy went in %d chunks, want 6", n)
	}
	if _, err := client.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{User: "ann", Package: pkg}}}); err != nil {
		t.Fatal(err)
	}
	if got := <-staged; !bytes.Equal(got, pkg) {
		t.Fatalf("the staged package arrived changed")
	}
	if len(client.assembling) != 0 {
		t.Fatalf("%d assemblies left", len(client.assembling))
	}
}
