package worker

import (
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A freeze with bounds of its own: while the person's request runs in the
// app it waits up to request_wait (then freezes them, answered once);
// past request_wait it is refused UNAVAILABLE at once, and when it comes
// to run it freezes without a second answer, undone by the thaw.
func TestFreezeWaitsForARequestInTheApp(t *testing.T) {
	m := newSiteMux()
	h := startApp(t, Site(m, SiteOptions{}), "w1")
	p := newPerson(t, h)
	freeze := func(epoch uint64, waitMs, requestWaitMs uint32) *channelCallResult {
		c, err := h.peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{
			User: p.user, Epoch: epoch, WaitMs: waitMs, RequestWaitMs: requestWaitMs}}})
		if err != nil {
			t.Fatal(err)
		}
		res := &channelCallResult{done: make(chan struct{})}
		go func() {
			res.env, res.err = c.Wait(t.Context())
			close(res.done)
		}()
		return res
	}

	// Within request_wait: the freeze waits for the request, then runs.
	slow := h.start(p.request("GET", "/block", nil))
	waitUntil(t, "the request to run", func() bool { return len(m.startedConns()) == 1 })
	fz := freeze(1, 50, 5000)
	time.Sleep(300 * time.Millisecond) // past wait_ms
	select {
	case <-fz.done:
		t.Fatalf("the freeze answered while the request ran: %v %v", fz.env, fz.err)
	default:
	}
	m.gate <- struct{}{}
	if _, err := slow.Wait(t.Context()); err != nil {
		t.Fatalf("the slow request: %v", err)
	}
	<-fz.done
	if fz.err != nil || fz.env.GetFrozen() == nil {
		t.Fatalf("the freeze after the request: %v %v", fz.env, fz.err)
	}
	if _, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Thaw{Thaw: &protocol.Thaw{User: p.user, Epoch: 1}}}); err != nil {
		t.Fatal(err)
	}

	// Past request_wait: refused at once, the request untouched. (The
	// person's frames now carry the epoch of the move that was undone.)
	at := func(epoch uint64, f *protocol.Frame) *protocol.Frame { f.Epoch = epoch; return f }
	slow = h.start(at(1, p.request("GET", "/block", nil)))
	waitUntil(t, "the second request to run", func() bool { return len(m.startedConns()) == 2 })
	began := time.Now()
	fz = freeze(2, 50, 200)
	<-fz.done
	if remoteCode(fz.err) != protocol.Error_UNAVAILABLE {
		t.Fatalf("a freeze past request_wait: %v %v", fz.env, fz.err)
	}
	if waited := time.Since(began); waited > 3*time.Second {
		t.Fatalf("the refusal came after %v", waited)
	}
	m.gate <- struct{}{}
	if _, err := slow.Wait(t.Context()); err != nil {
		t.Fatalf("the second slow request: %v", err)
	}
	// The mover's thaw follows the late freeze, and the person goes on.
	if _, err := h.peer.Call(t.Context(), &protocol.Envelope{Body: &protocol.Envelope_Thaw{Thaw: &protocol.Thaw{User: p.user, Epoch: 2}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := h.frame(at(2, p.request("GET", "/", nil))); err != nil || string(r.GetHttp().Body) != p.conn {
		t.Fatalf("after the rolled-back freeze: %v %v", r, err)
	}
}

type channelCallResult struct {
	env  *protocol.Envelope
	err  error
	done chan struct{}
}
