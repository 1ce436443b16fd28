package channel

import (
	"context"
	"encoding/hex"
	"math/rand"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Over the plugin server (go-plugin's protocol), a worker that offers the framed channel gets the host's
// dial: every envelope after the handshake goes on the socket, in order,
// the same messages the gRPC stream carries; the socket is gone once taken.
func TestFramedChannelOverPlugin(t *testing.T) {
	served := make(chan []*protocol.Envelope, 1)
	h := startPlugin(t, true, func(ctx context.Context, c Conn) error {
		hello := &protocol.Hello{ProtocolVersion: protocol.Version, App: "t"}
		offer, err := OfferFramed(hello)
		if err != nil {
			return err
		}
		ack, err := Greet(ctx, c, hello)
		if err != nil {
			offer.Close()
			return err
		}
		fc, err := offer.Take(ctx, ack)
		if err != nil || fc == nil {
			t.Errorf("the host's dial was not taken: %v", err)
			return err
		}
		if _, err := os.Stat(hello.FramedSocket); !os.IsNotExist(err) {
			t.Errorf("the socket is still there once taken: %v", err)
		}
		var got []*protocol.Envelope
		for range sample() {
			env, err := fc.Recv()
			if err != nil {
				t.Error(err)
				break
			}
			got = append(got, env)
			if err := fc.Send(env); err != nil { // echoed back
				t.Error(err)
			}
		}
		served <- got
		<-ctx.Done()
		return nil
	})
	stream, err := Dial(t.Context(), h.cc)
	if err != nil {
		t.Fatal(err)
	}
	hello, conn, err := AcceptFramed(t.Context(), stream, &protocol.HelloAck{WorkerId: "w"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if hello.FramedSocket == "" {
		t.Fatal("no offer in the hello")
	}
	if _, ok := conn.(*pairedConn); !ok {
		t.Fatalf("the host stayed on %T", conn)
	}
	for _, env := range sample() {
		if err := conn.Send(env); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range sample() {
		got, err := conn.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("envelope %d came back as %v, want %v", i, got, want)
		}
	}
	select {
	case got := <-served:
		for i, want := range sample() {
			if !proto.Equal(got[i], want) {
				t.Fatalf("the worker read %v, want %v", got[i], want)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the worker read nothing")
	}
}

// A stranger on the socket, without the token, is not taken for the host;
// a host whose ack says it did not dial leaves the worker on the stream.
func TestFramedOfferWantsTheToken(t *testing.T) {
	hello := &protocol.Hello{}
	offer, err := OfferFramed(hello)
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := net.Dial("unix", hello.FramedSocket)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = stranger.Write(make([]byte, tokenBytes))
	defer stranger.Close()
	host, err := dialFramed(t.Context(), hello)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	fc, err := offer.Take(t.Context(), &protocol.HelloAck{Framed: true})
	if err != nil || fc == nil {
		t.Fatalf("the host was not taken: %v", err)
	}
	defer fc.Close()
	if err := host.Send(&protocol.Envelope{Id: 5}); err != nil {
		t.Fatal(err)
	}
	if env, err := fc.Recv(); err != nil || env.Id != 5 {
		t.Fatalf("the worker read %v, %v from the host", env, err)
	}
	// A malformed token is refused before any dial.
	if _, err := dialFramed(t.Context(), &protocol.Hello{FramedSocket: hello.FramedSocket, FramedToken: hex.EncodeToString([]byte("short"))}); err == nil {
		t.Fatal("a short token was dialed")
	}
	other := &protocol.Hello{}
	o2, err := OfferFramed(other)
	if err != nil {
		t.Fatal(err)
	}
	if fc, err := o2.Take(t.Context(), &protocol.HelloAck{}); fc != nil || err != nil {
		t.Fatalf("without the host's dial: %v, %v", fc, err)
	}
}

// An envelope announced larger than the bound ends the channel before
// anything is read into memory.
func TestFramedConnRefusesHugeEnvelopes(t *testing.T) {
	a, b := net.Pipe()
	fc := NewFramedConn(a)
	go func() { _, _ = b.Write([]byte{0xff, 0xff, 0xff, 0xff}) }()
	if _, err := fc.Recv(); err == nil {
		t.Fatal("a 4 GiB envelope was read")
	}
	fc.Close()
	b.Close()
}

// A side that stops reading holds its senders back once queueBytes wait,
// rather than letting the queue grow; closing lets them go with an error.
func TestFramedConnBoundsItsQueue(t *testing.T) {
	a, b := net.Pipe() // nothing reads b
	defer b.Close()
	before := ReadFramedStats()
	fc := NewFramedConn(a)
	big := &protocol.Envelope{Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{
		Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: make([]byte, 1<<20)}}}}}
	sent := make(chan int, 64)
	go func() {
		for i := 0; ; i++ {
			if err := fc.Send(big); err != nil {
				close(sent)
				return
			}
			sent <- i
		}
	}()
	n := 0
	deadline := time.After(2 * time.Second)
wait:
	for {
		select {
		case _, ok := <-sent:
			if !ok {
				t.Fatal("a send failed before the close")
			}
			n++
		case <-deadline:
			break wait
		}
	}
	// What waits, and what the writer took into its blocked write.
	if n > 2*queueBytes/(1<<20)+2 {
		t.Fatalf("%d MiB queued for a side that reads nothing", n)
	}
	// The metrics say so: bytes queued, a sender waiting for room.
	during := ReadFramedStats()
	if q := during.QueuedBytes - before.QueuedBytes; q < queueBytes {
		t.Errorf("%d bytes queued by the metric, want at least %d", q, queueBytes)
	}
	if during.Waits <= before.Waits || during.Envelopes-before.Envelopes < uint64(n) {
		t.Errorf("waits %d -> %d, envelopes %d -> %d for %d sent", before.Waits, during.Waits, before.Envelopes, during.Envelopes, n)
	}
	fc.Close()
	for range sent {
	}
	// Nothing stays counted as queued once the channel is closed.
	deadline = time.After(5 * time.Second)
	for ReadFramedStats().QueuedBytes > before.QueuedBytes {
		select {
		case <-deadline:
			t.Fatalf("%d bytes still counted as queued after the close", ReadFramedStats().QueuedBytes-before.QueuedBytes)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Many senders at once, small and large envelopes mixed: every envelope
// arrives whole, each sender's in its order.
func TestFramedConnManySenders(t *testing.T) {
	a, b := net.Pipe()
	w, r := NewFramedConn(a), NewFramedConn(b)
	defer w.Close()
	defer r.Close()
	const senders, each = 8, 300
	for s := range senders {
		go func() {
			for i := range each {
				size := 10
				if i%50 == 0 {
					size = 1<<20 + 7 // past keptBuffer
				}
				env := &protocol.Envelope{Id: uint64(s)<<32 | uint64(i), Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{
					Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: make([]byte, size)}}}}}
				if err := w.Send(env); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	next := make([]uint64, senders)
	for range senders * each {
		env, err := r.Recv()
		if err != nil {
			t.Fatal(err)
		}
		s, i := env.Id>>32, env.Id&(1<<32-1)
		if i != next[s] {
			t.Fatalf("sender %d: envelope %d after %d", s, i, next[s])
		}
		next[s]++
	}
}

// Two peers on a framed channel over a Unix socket, 16 callers at once,
// small messages and ones large enough to go in pieces, each answered with
// a batch: every answer comes back whole (the channel once handed the
// senders the array it was writing).
func TestFramedPeersUnderLoad(t *testing.T) {
	ln, _ := net.Listen("unix", t.TempDir()+"/s")
	ch := make(chan net.Conn)
	go func() { c, _ := ln.Accept(); ch <- c }()
	a, _ := net.Dial("unix", ln.Addr().String())
	b := <-ch
	wa, wb := NewFramedConn(a), NewFramedConn(b)
	var srv *Peer
	srv = NewIdlePeer(wb, func(env *protocol.Envelope) {
		go func() {
			rep := &protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: env.GetFrame().GetMessage().GetData()}}}}}
			pulled := &protocol.Envelope{Id: env.Id + 1<<40, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{More: true}}}
			_ = srv.SendTogether(pulled, rep)
		}()
	})
	srv.EnableChunks()
	srv.EnableBatches()
	srv.Listen()
	cl := NewPeer(wa, nil)
	cl.EnableChunks()
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				n := rand.Intn(300)
				if i%97 == 0 {
					n = 600 << 10
				}
				d := make([]byte, n)
				c, err := cl.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: &protocol.Frame{Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Data: d}}}}})
				if err != nil {
					t.Error(err)
					return
				}
				r, err := c.Wait(t.Context())
				if err != nil {
					t.Error(err)
					return
				}
				if got := len(r.GetFrameReply().GetMessage().GetData()); got != n {
					t.Errorf("an answer of %d bytes to a message of %d", got, n)
					return
				}
			}
		}()
	}
	wg.Wait()
}
