package host

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// muteLauncher runs workers that answer probes until mute is set; then
// the first incarnation of each slot stops answering (as a SIGSTOPped
// process), while later incarnations answer. failNext makes that many
// launches fail.
type muteLauncher struct {
	mute     atomic.Bool
	failNext atomic.Int32
	mu       sync.Mutex
	launches map[string]int
}

func (l *muteLauncher) Launch(ctx context.Context, id string) (Process, channel.Conn, error) {
	if l.failNext.Load() > 0 {
		l.failNext.Add(-1)
		return nil, nil, errors.New("no room on the host")
	}
	l.mu.Lock()
	if l.launches == nil {
		l.launches = map[string]int{}
	}
	l.launches[id]++
	first := l.launches[id] == 1
	l.mu.Unlock()
	host, wk := channel.Pipe()
	go func() {
		if _, err := channel.Greet(context.Background(), wk, &protocol.Hello{ProtocolVersion: protocol.Version, App: "mute"}); err != nil {
			wk.Close()
			return
		}
		var p *channel.Peer
		p = channel.NewIdlePeer(wk, func(env *protocol.Envelope) {
			if first && l.mute.Load() {
				return // stopped: no answer, the channel stays open
			}
			_ = p.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_ProbeReply{ProbeReply: &protocol.ProbeReply{HeapBytes: 1 << 20}}})
		})
		p.Listen()
	}()
	return fakeProc{host}, host, nil
}

// waitWorkers polls until every worker satisfies ok, or fails.
func waitWorkers(t *testing.T, p *Pool, what string, ok func(WorkerInfo) bool) []WorkerInfo {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ws := p.Workers()
		all := len(ws) > 0
		for _, w := range ws {
			all = all && ok(w)
		}
		if all {
			return ws
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v", what, ws)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A silent worker is killed after exactly ProbeMisses unanswered probes:
// no probe is sent (and counted) once it is being killed. Eight slots go
// silent together so that a stray extra probe cannot hide by chance.
func TestSilentWorkerKilledAfterMisses(t *testing.T) {
	l := &muteLauncher{}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 8, Launcher: l}})
	p.ProbeInterval, p.ProbeMisses = 30*time.Millisecond, 3
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, "first probes", func(w WorkerInfo) bool { return !w.LastProbe.IsZero() })
	before := map[string]int64{}
	for _, w := range p.Workers() {
		before[w.ID] = w.ProbeFailures
	}
	l.mute.Store(true)
	ws := waitWorkers(t, p, "silent workers relaunched", func(w WorkerInfo) bool { return w.Incarnation >= 2 && w.State == StateReady })
	for _, w := range ws {
		if want := "killed for silence: 3 probes unanswered"; w.HowDied != want {
			t.Errorf("%s: how it died %q, want %q", w.ID, w.HowDied, want)
		}
		if n := w.ProbeFailures - before[w.ID]; n > 3 {
			t.Errorf("%s: %d probes unanswered before its kill, want at most 3", w.ID, n)
		}
	}
}

// A relaunched worker keeps how its predecessor ended, with its
// incarnation, even when the first relaunch attempt fails.
func TestRelaunchKeepsHowPredecessorEnded(t *testing.T) {
	l := &muteLauncher{}
	p := New(nil, []GroupSpec{{Name: "web", Workers: 1, Launcher: l}})
	p.ProbeInterval, p.ProbeMisses = 30*time.Millisecond, 3
	defer p.Close()
	if err := p.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitWorkers(t, p, "a first probe", func(w WorkerInfo) bool { return !w.LastProbe.IsZero() })
	born := p.Workers()[0].Born
	l.failNext.Store(1)
	l.mute.Store(true)
	w := waitWorkers(t, p, "the silent worker relaunched", func(w WorkerInfo) bool { return w.Incarnation >= 2 && w.State == StateReady })[0]
	if len(w.Ends) != 1 {
		t.Fatalf("ends %+v, want the first incarnation's", w.Ends)
	}
	e := w.Ends[0]
	if e.Incarnation != 1 || !e.Born.Equal(born) || e.DiedAt.IsZero() || e.How != "killed for silence: 3 probes unanswered" {
		t.Errorf("end of incarnation 1: %+v (born %s)", e, born)
	}
	if w.HowDied != e.How {
		t.Errorf("how_died %q, want the predecessor's end %q (a failed launch is not how it ended)", w.HowDied, e.How)
	}
	if w.LaunchError != "" {
		t.Errorf("launch error %q kept after a start that worked", w.LaunchError)
	}
}
