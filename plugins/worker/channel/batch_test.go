package channel

import (
	"context"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Envelopes sent together travel as one message to a side that reads
// batches, and each settles its own call in order; to a side that does not,
// they go one by one, and every call still settles.
func TestSendTogether(t *testing.T) {
	for _, batches := range []bool{true, false} {
		a, b := Pipe()
		var worker *Peer
		carried := make(chan int, 4) // envelopes per message the host's side received
		host := NewPeer(&batchCountConn{Conn: a, got: carried}, nil)
		worker = NewIdlePeer(b, func(env *protocol.Envelope) {
			if env.GetFrame().GetMessage() == nil {
				return // the pull waits
			}
			pulled := &protocol.Envelope{Id: env.Id - 1, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{More: true}}}
			reply := &protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{}}}
			if err := worker.SendTogether(pulled, reply); err != nil {
				t.Error(err)
			}
		})
		if batches {
			worker.EnableBatches()
		}
		worker.Listen()
		pull, err := host.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: &protocol.Frame{Kind: &protocol.Frame_Pull{Pull: &protocol.PagePull{}}}}})
		if err != nil {
			t.Fatal(err)
		}
		msg, err := host.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: &protocol.Frame{Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{}}}}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		p, perr := pull.Wait(ctx)
		m, merr := msg.Wait(ctx)
		cancel()
		if perr != nil || merr != nil || !p.GetFrameReply().GetMore() || m.GetFrameReply().GetMore() {
			t.Fatalf("batches %v: pull %v %v, message %v %v", batches, p, perr, m, merr)
		}
		want := []int{2}
		if !batches {
			want = []int{1, 1}
		}
		for _, n := range want {
			if got := <-carried; got != n {
				t.Fatalf("batches %v: a message carried %d envelopes, want %d", batches, got, n)
			}
		}
		host.Close()
		worker.Close()
	}
}

// A batch whose carrier has a body of its own, or that holds a batch, ends
// the channel: the sender is broken.
func TestMalformedBatchEndsTheChannel(t *testing.T) {
	for _, bad := range []*protocol.Envelope{
		{Id: 3, Batch: []*protocol.Envelope{{Id: 1, Reply: true}}},
		{Batch: []*protocol.Envelope{{Batch: []*protocol.Envelope{{Id: 1, Reply: true}}}}},
	} {
		a, b := Pipe()
		p := NewPeer(a, nil)
		if err := b.Send(bad); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("a malformed batch %v was taken", bad)
		}
		b.Close()
	}
}

// batchCountConn reports how many envelopes each received message carried.
type batchCountConn struct {
	Conn
	got chan int
}

func (c *batchCountConn) Recv() (*protocol.Envelope, error) {
	env, err := c.Conn.Recv()
	if err == nil {
		n := 1
		if len(env.Batch) > 0 {
			n = len(env.Batch)
		}
		select {
		case c.got <- n:
		default:
		}
	}
	return env, err
}
