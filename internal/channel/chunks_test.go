package channel

import (
	"bytes"
	"crypto/sha256"
	"sync/atomic"
	"testing"

	"github.com/stickyd/stickyd/internal/protocol"
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
