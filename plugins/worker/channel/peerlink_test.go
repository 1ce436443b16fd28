package channel

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// peerLinkServer serves the peer-link port's gRPC options on loopback TCP;
// each link's peer is bounded to budget bytes of assembly and echoes a
// frame's payload back.
func peerLinkServer(t *testing.T, budget uint64) (addr string, peers chan *Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(PeerLinkServerOptions()...)
	peers = make(chan *Peer, 4)
	RegisterServer(s, func(ctx context.Context, c Conn) error {
		var p *Peer
		p = NewIdlePeer(c, func(env *protocol.Envelope) {
			go func() {
				_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Frozen{Frozen: &protocol.Frozen{Package: env.GetWake().GetPackage()}}})
			}()
		})
		p.LimitAssembly(budget)
		if c.(*GRPCConn).Chunks() {
			p.EnableChunks()
		}
		p.Listen()
		peers <- p
		select {
		case <-p.Done():
		case <-ctx.Done():
		}
		return nil
	})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String(), peers
}

func dialPeerLink(t *testing.T, addr string) (*GRPCConn, *grpc.ClientConn) {
	t.Helper()
	cc, err := grpc.NewClient(addr, append(DialOptions(), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	c, err := DialPeerLink(t.Context(), cc)
	if err != nil {
		t.Fatal(err)
	}
	return c, cc
}

// Both sides of a peer link say they read chunks, so an envelope of
// 20 MiB (five times the port's message bound) travels in pieces and
// arrives whole; one sent whole, as an older version or a hostile sender
// would, is refused before it is read, and so are chunks past the link's
// assembly budget; neither is held in memory beyond the bounds.
func TestPeerLinkBoundsMessages(t *testing.T) {
	addr, peers := peerLinkServer(t, 32<<20)
	c, _ := dialPeerLink(t, addr)
	if !c.Chunks() {
		t.Fatal("the server did not say it reads chunks")
	}
	client := NewIdlePeer(c, nil)
	client.EnableChunks()
	client.Listen()
	big := bigPackage(20 << 20)
	rep, err := client.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: "ann", Package: big}}})
	if err != nil {
		t.Fatalf("a 20 MiB frame in pieces: %v", err)
	}
	if !bytes.Equal(rep.GetFrozen().GetPackage(), big) {
		t.Fatal("the 20 MiB frame came back changed")
	}
	<-peers

	// Sent whole: refused by gRPC at the message bound.
	whole, _ := dialPeerLink(t, addr)
	<-peers
	huge := bigPackage(300 << 20)
	err = whole.Send(&protocol.Envelope{Id: 1, Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{User: "ann", Package: huge}}})
	if err == nil {
		_, err = whole.Recv()
	}
	if err == nil || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a 300 MiB envelope sent whole: %v, want it refused at the bound", err)
	}

	// Chunks past the budget: the link stops with the reason.
	flood, _ := dialPeerLink(t, addr)
	server := <-peers
	for id := uint64(1); id <= 200; id++ {
		pc := &protocol.PackageChunk{Data: make([]byte, ChunkBytes), Total: MaxEnvelopeBytes}
		if err := flood.Send(&protocol.Envelope{Id: id, Body: &protocol.Envelope_PackageChunk{PackageChunk: pc}}); err != nil {
			break
		}
	}
	<-server.Done()
	if err := server.Err(); err == nil || !strings.Contains(err.Error(), "passed this link's") {
		t.Fatalf("a flood of chunks: the link stopped with %v", err)
	}
}
