package channel

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

func sample() []*protocol.Envelope {
	return []*protocol.Envelope{
		{Id: 1, Body: &protocol.Envelope_Hello{Hello: &protocol.Hello{ProtocolVersion: protocol.Version, App: "demo", Pid: 42}}},
		{Id: 7, Body: &protocol.Envelope_Frame{Frame: &protocol.Frame{User: "maria", Conn: "c1", Epoch: 3,
			Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p1", Data: []byte(`{"op":"inc"}`)}}}}},
		{Id: 7, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{WorkerId: "web-1",
			Kind: &protocol.FrameReply_Deltas{Deltas: &protocol.Deltas{Page: "p1", Last: 9, Deltas: []*protocol.Delta{
				{Seq: 9, Op: protocol.Delta_SET, Path: "grid/filter", Value: []byte(`"abc"`)}}}}}}},
		{Id: 8, Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}},
		{Id: 9, Reply: true, Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: protocol.Error_MOVED, Message: "moved"}}},
	}
}

// The in-memory queue carries exactly the protobuf encoding of the envelope,
// and those bytes decode as the same message the gRPC path delivers.
func TestMemBytesMatchGRPC(t *testing.T) {
	memHost, memWorker := Pipe()
	defer memHost.Close()

	got := make(chan *protocol.Envelope, 16)
	h := startPlugin(t, true, func(ctx context.Context, c Conn) error {
		for {
			env, err := c.Recv()
			if err != nil {
				return nil
			}
			got <- env
		}
	})
	grpcConn, err := Dial(t.Context(), h.cc)
	if err != nil {
		t.Fatal(err)
	}
	defer grpcConn.Close()

	for _, env := range sample() {
		if err := memHost.Send(env); err != nil {
			t.Fatal(err)
		}
		wire, err := memWorker.RecvBytes()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(env)
		if string(wire) != string(want) {
			t.Fatalf("memory queue bytes differ from the protobuf encoding of %v", env)
		}
		var decoded protocol.Envelope
		if err := proto.Unmarshal(wire, &decoded); err != nil {
			t.Fatalf("decoding memory bytes: %v", err)
		}
		if err := grpcConn.Send(env); err != nil {
			t.Fatal(err)
		}
		var viaGRPC *protocol.Envelope
		select {
		case viaGRPC = <-got:
		case <-time.After(5 * time.Second):
			t.Fatal("gRPC envelope never arrived")
		}
		if !proto.Equal(&decoded, viaGRPC) {
			t.Fatalf("memory path decoded %v, gRPC path delivered %v", &decoded, viaGRPC)
		}
		again, _ := proto.MarshalOptions{Deterministic: true}.Marshal(viaGRPC)
		if string(again) != string(wire) {
			t.Fatalf("gRPC envelope re-encodes to other bytes than the memory queue carried")
		}
	}
}

func TestPipeCloseUnblocksRecv(t *testing.T) {
	a, b := Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := b.Recv()
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	a.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Recv after close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Recv still blocked after Close")
	}
	if err := a.Send(&protocol.Envelope{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after close: %v", err)
	}
}

func TestHandshake(t *testing.T) {
	tests := []struct {
		name    string
		version uint32
		wantErr bool
	}{
		{"same version", protocol.Version, false},
		{"newer worker", protocol.Version + 1, true},
		{"ancient worker", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, wk := Pipe()
			defer host.Close()
			var (
				wg        sync.WaitGroup
				greetErr  error
				greetAck  *protocol.HelloAck
				ctx, stop = context.WithTimeout(context.Background(), 5*time.Second)
			)
			defer stop()
			wg.Add(1)
			go func() {
				defer wg.Done()
				greetAck, greetErr = Greet(ctx, wk, &protocol.Hello{ProtocolVersion: tt.version, App: "app"})
			}()
			_, acceptErr := Accept(ctx, host, &protocol.HelloAck{WorkerId: "web-1", Group: "web"})
			wg.Wait()
			if !tt.wantErr {
				if acceptErr != nil || greetErr != nil {
					t.Fatalf("accept %v, greet %v", acceptErr, greetErr)
				}
				if greetAck.WorkerId != "web-1" || greetAck.ProtocolVersion != protocol.Version {
					t.Fatalf("ack %v", greetAck)
				}
				return
			}
			for side, err := range map[string]error{"host": acceptErr, "worker": greetErr} {
				if !errors.Is(err, ErrIncompatible) {
					t.Fatalf("%s side: %v, want ErrIncompatible", side, err)
				}
				if !strings.Contains(err.Error(), "protocol") {
					t.Fatalf("%s side error does not say why: %v", side, err)
				}
			}
		})
	}
}

func TestPeerCorrelatesAndFailsPending(t *testing.T) {
	a, b := Pipe()
	var server *Peer
	server = NewIdlePeer(b, func(env *protocol.Envelope) {
		if env.GetProbe() != nil {
			go func() {
				time.Sleep(time.Duration(env.Id%3) * time.Millisecond) // answer out of order
				_ = server.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{Frames: env.Id}}})
			}()
		}
	})
	server.Listen()
	client := NewPeer(a, nil)
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Start(&protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
			if err != nil {
				t.Error(err)
				return
			}
			env, err := c.Wait(t.Context())
			if err != nil {
				t.Error(err)
				return
			}
			if env.GetProbeReply().Frames != c.id {
				t.Errorf("call %d got the reply of %d", c.id, env.GetProbeReply().Frames)
			}
		}()
	}
	wg.Wait()

	// A call whose answer never comes fails when the peer closes.
	c, err := client.Start(&protocol.Envelope{Body: &protocol.Envelope_Shutdown{Shutdown: &protocol.Shutdown{}}})
	if err != nil {
		t.Fatal(err)
	}
	server.Close()
	if _, err := c.Wait(t.Context()); err == nil {
		t.Fatal("pending call survived the channel closing")
	}
	<-client.Done()
	if _, err := client.Start(&protocol.Envelope{}); err == nil {
		t.Fatal("Start on a stopped peer succeeded")
	}
}

// Then hands a call's reply to a function, whether the reply came before
// Then or after it, and the peer's end too; an abandoned call's function
// is never called, even when its reply comes.
func TestCallThenAndAbandon(t *testing.T) {
	a, b := Pipe()
	hold := make(chan uint64, 8)
	var server *Peer
	server = NewIdlePeer(b, func(env *protocol.Envelope) {
		if env.GetProbe() != nil {
			hold <- env.Id // the test says when to answer
		}
	})
	server.Listen()
	client := NewPeer(a, nil)
	answer := func(id uint64) {
		if err := server.Reply(id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{Frames: id}}}); err != nil {
			t.Fatal(err)
		}
	}
	probe := func() *Call {
		c, err := client.Start(&protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	type got struct {
		env *protocol.Envelope
		err error
	}
	then := func(c *Call) chan got {
		ch := make(chan got, 2)
		c.Then(func(env *protocol.Envelope, err error) { ch <- got{env, err} })
		return ch
	}
	wait := func(ch chan got, id uint64) {
		t.Helper()
		select {
		case g := <-ch:
			if g.err != nil || g.env.GetProbeReply().GetFrames() != id {
				t.Fatalf("call %d: %+v %v", id, g.env, g.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("call %d: Then's function never called", id)
		}
	}

	// The reply after Then.
	c1 := probe()
	ch1 := then(c1)
	answer(<-hold)
	wait(ch1, c1.id)

	// The reply before Then: it waits in the call for Then.
	c2 := probe()
	answer(<-hold)
	for client.Pending() > 0 {
		time.Sleep(time.Millisecond)
	}
	wait(then(c2), c2.id)

	// Abandoned while waiting: the late reply is dropped.
	c3 := probe()
	ch3 := then(c3)
	id3 := <-hold
	if !c3.Abandon() {
		t.Fatal("Abandon of a waiting call reported it settled")
	}
	answer(id3)
	// A call after it, answered, proves the read loop passed the late reply.
	c4 := probe()
	ch4 := then(c4)
	answer(<-hold)
	wait(ch4, c4.id)
	select {
	case g := <-ch3:
		t.Fatalf("an abandoned call's function was called: %+v", g)
	default:
	}
	if c4.Abandon() {
		t.Fatal("Abandon of a settled call reported it waiting")
	}

	// The peer's end fails a waiting call through Then.
	c5 := probe()
	ch5 := then(c5)
	<-hold
	server.Close()
	select {
	case g := <-ch5:
		if g.err == nil {
			t.Fatalf("a call outlived its peer: %+v", g.env)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the peer's end never reached Then's function")
	}
}
