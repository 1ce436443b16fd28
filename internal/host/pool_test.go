package host

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

func TestMain(m *testing.M) {
	if os.Getenv(pluginHelperEnv) != "" {
		os.Exit(servePluginHelper())
	}
	goleak.VerifyTestMain(m)
}

// fakeLauncher runs a worker that greets with version and then serves
// probes until its channel closes. Its hello does not say it checkpoints.
type fakeLauncher struct {
	version  uint32
	heap     uint64 // what its probe answers say
	launches atomic.Int32
	// checkpoints counts the checkpoint requests its workers received.
	checkpoints atomic.Int32
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
			if env.GetCheckpoint() != nil {
				l.checkpoints.Add(1)
			}
			_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{HeapBytes: l.heap}}})
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

// Workers come and go at run time: an added worker gets a fresh id, a
// cordoned one takes no newcomers, and only an empty one can be retired.
func TestAddCordonRetire(t *testing.T) {
	l := &InprocLauncher{Serve: worker.InProcess(counter.New(), worker.Options{Name: "counter"})}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l}})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Add(t.Context(), "nope"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("Add to an unknown group: %v", err)
	}
	id, err := p.Add(t.Context(), "web")
	if err != nil || id != "web-2" {
		t.Fatalf("Add: %q %v", id, err)
	}
	if got := p.Ready(); len(got) != 2 {
		t.Fatalf("ready %v", got)
	}
	if err := p.Cordon("web-2", true); err != nil {
		t.Fatal(err)
	}
	if got := p.Ready(); len(got) != 1 || got[0] != "web-1" {
		t.Fatalf("ready with web-2 cordoned: %v", got)
	}
	// web-1 holds a connection: it cannot be retired.
	c, err := p.Send(t.Context(), "web-1", &protocol.Frame{Kind: &protocol.Frame_Http{Http: &protocol.HTTPRequest{Method: "GET", Url: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.Retire(t.Context(), "web-1", "test"); !errors.Is(err, ErrNotEmpty) {
		t.Fatalf("retiring a worker with a connection: %v", err)
	}
	if err := p.Retire(t.Context(), "web-2", "compacted"); err != nil {
		t.Fatal(err)
	}
	if ws := p.Workers(); len(ws) != 1 || ws[0].ID != "web-1" {
		t.Fatalf("workers after retirement: %+v", ws)
	}
	if r := p.Retired(); len(r) != 1 || r[0].ID != "web-2" || r[0].State != StateRetired || !strings.Contains(r[0].HowDied, "compacted") {
		t.Fatalf("retired: %+v", r)
	}
	if _, err := p.Send(t.Context(), "web-2", &protocol.Frame{}); !errors.Is(err, ErrUnknownWorker) {
		t.Fatalf("frame to a retired worker: %v", err)
	}
	// A retired id is never given again.
	if id, err := p.Add(t.Context(), "web"); err != nil || id != "web-3" {
		t.Fatalf("Add after retirement: %q %v", id, err)
	}
}

// A worker over its group's memory ceiling is killed and relaunched, and its
// lifecycle says why.
func TestWorkerOverMemoryCeilingIsKilled(t *testing.T) {
	l := &fakeLauncher{version: protocol.Version, heap: 300 << 20}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l, MemoryMax: 256 << 20}})
	p.ProbeInterval = 20 * time.Millisecond
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		w := p.Workers()[0]
		if w.Incarnation >= 2 {
			if !strings.HasPrefix(w.HowDied, "killed for memory: heap 300 MiB > ceiling 256 MiB") {
				t.Fatalf("how it died: %q", w.HowDied)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker over its ceiling still runs: %+v", w)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Groups come and go at run time too.
func TestAddAndRemoveGroup(t *testing.T) {
	l := &InprocLauncher{Serve: worker.InProcess(counter.New(), worker.Options{Name: "counter"})}
	p := New(nil, []GroupSpec{{Name: "v1", Workers: 1, Launcher: l}})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.AddGroup(t.Context(), GroupSpec{Name: "v2", Workers: 2, Launcher: l}); err != nil {
		t.Fatal(err)
	}
	if err := p.AddGroup(t.Context(), GroupSpec{Name: "v2", Workers: 1, Launcher: l}); err == nil {
		t.Fatal("a group added twice")
	}
	if got := p.Ready(); len(got) != 3 || p.GroupOf("v2-2") != "v2" || !p.HasGroup("v2") {
		t.Fatalf("ready %v", got)
	}
	if err := p.RemoveGroup(t.Context(), "v2", "group retired"); err != nil {
		t.Fatal(err)
	}
	if got := p.Ready(); len(got) != 1 || p.HasGroup("v2") || len(p.Retired()) != 2 {
		t.Fatalf("after removing v2: ready %v, retired %+v", got, p.Retired())
	}
	if err := p.RemoveGroup(t.Context(), "v2", "again"); !errors.Is(err, ErrUnknownGroup) {
		t.Fatalf("removing a group twice: %v", err)
	}
}

// A stopping host wakes no parked person (their package waits for the next
// host to run), and still serves the people awake on it until their park.
func TestStoppingHostWakesNobody(t *testing.T) {
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: &fakeLauncher{version: protocol.Version}}})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	send := func(f *protocol.Frame) error {
		c, err := p.Send(t.Context(), "web-1", f)
		if err != nil {
			return err
		}
		_, err = c.Wait(t.Context())
		return err
	}
	if err := send(&protocol.Frame{User: "ann", Epoch: 2, WakePackage: "d1"}); err != nil {
		t.Fatalf("a parked person's frame before the stop: %v", err)
	}
	p.Stopping()
	if err := send(&protocol.Frame{User: "bob", Epoch: 2, WakePackage: "d2"}); !errors.Is(err, ErrNoWakeStopping) {
		t.Fatalf("a parked person's frame on a stopping host: %v, want ErrNoWakeStopping", err)
	}
	if err := send(&protocol.Frame{User: "ann", Epoch: 2}); err != nil {
		t.Fatalf("an awake person's frame on a stopping host: %v", err)
	}
}

// pidLauncher is a fakeLauncher whose workers have a pid of their own, as
// a subprocess's.
type pidLauncher struct{ fakeLauncher }

type pidProc struct{ fakeProc }

func (pidProc) Pid() int { return 4242 }

func (l *pidLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	p, c, err := l.fakeLauncher.Launch(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	return pidProc{p.(fakeProc)}, c, nil
}

// An in-process worker's probe reads the agent's process (its heap, RSS
// and CPU are everyone's there): its info says so (shared_process), and a
// subprocess worker's does not.
func TestInprocWorkerSharesTheProcess(t *testing.T) {
	in := &InprocLauncher{Serve: worker.InProcess(counter.New(), worker.Options{Name: "counter"})}
	p := New(nil, []GroupSpec{
		{Name: "in", Workers: 1, Launcher: in},
		{Name: "sub", Workers: 1, Launcher: &pidLauncher{fakeLauncher{version: protocol.Version}}},
	})
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"in-1": true, "sub-1": false}
	for _, w := range p.Workers() {
		if shared, ok := want[w.ID]; !ok || w.SharedProcess != shared {
			t.Errorf("%s: shared_process %v, want %v (pid %d)", w.ID, w.SharedProcess, shared, w.Pid)
		}
		delete(want, w.ID)
	}
	if len(want) > 0 {
		t.Fatalf("workers not listed: %v", want)
	}
}
