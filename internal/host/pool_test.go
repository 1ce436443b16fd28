package host

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/protocol"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeLauncher runs a worker that greets with version and then serves
// probes until its channel closes.
type fakeLauncher struct {
	version  uint32
	launches atomic.Int32
}

type fakeProc struct{ conn channel.Conn }

func (p fakeProc) Pid() int { return 0 }
func (p fakeProc) Kill()    { p.conn.Close() }

func (l *fakeLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	l.launches.Add(1)
	host, wk := channel.Pipe()
	go func() {
		if _, err := channel.Greet(context.Background(), wk, &protocol.Hello{ProtocolVersion: l.version, App: "fake"}); err != nil {
			wk.Close()
			return
		}
		var p *channel.Peer
		p = channel.NewIdlePeer(wk, func(env *protocol.Envelope) {
			_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{}}})
		})
		p.Listen()
	}()
	return fakeProc{host}, host, nil
}

func TestIncompatibleWorkerIsRefused(t *testing.T) {
	l := &fakeLauncher{version: protocol.Version + 7}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l}})
	defer p.Close()
	err := p.Start(t.Context())
	if !errors.Is(err, channel.ErrIncompatible) {
		t.Fatalf("Start: %v, want ErrIncompatible", err)
	}
	if !strings.Contains(err.Error(), "web-1") || !strings.Contains(err.Error(), "speaks channel protocol") {
		t.Fatalf("error does not say which worker and why: %v", err)
	}
	if w := p.Workers()[0]; w.State != StateRefused || w.HowDied == "" {
		t.Fatalf("refused worker shows %+v", w)
	}
	// Frames for a refused worker wait within their deadline, then fail.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Send(ctx, "web-1", &protocol.Frame{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send to a refused worker: %v", err)
	}
}

func TestCompatibleWorkerProbe(t *testing.T) {
	p := New(nil, []GroupSpec{{Name: "web", Workers: 2, Launcher: &fakeLauncher{version: protocol.Version}}})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := p.Ready(); len(got) != 2 || got[0] != "web-1" || got[1] != "web-2" {
		t.Fatalf("ready %v", got)
	}
	if _, err := p.Probe(t.Context(), "web-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Probe(t.Context(), "nope"); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("probe of an unknown worker: %v", err)
	}
}

// An in-process worker whose channel dies is relaunched in the same slot.
func TestInprocWorkerRelaunched(t *testing.T) {
	l := &InprocLauncher{Serve: worker.InProcess(counter.New(), worker.Options{Name: "counter"})}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l}})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	s, _ := p.slot("web-1")
	s.mu.Lock()
	proc := s.proc
	s.mu.Unlock()
	proc.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := p.Workers()[0]
		if w.State == StateReady && w.Incarnation == 2 {
			if w.HowDied == "" || w.DiedAt.IsZero() {
				t.Fatalf("death not recorded: %+v", w)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker not relaunched: %+v", w)
		}
		time.Sleep(10 * time.Millisecond)
	}
	r, err := p.Probe(t.Context(), "web-1")
	if err != nil || r.Goroutines == 0 {
		t.Fatalf("probe after relaunch: %v %v", r, err)
	}
}
