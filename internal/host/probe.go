package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// A running worker's life: the probes, its proof of life and its numbers
// (a worker mute for ProbeMisses probes is killed, unless it is busy; one
// over its memory ceiling too), and its checkpoint rounds, until its
// process ends or the pool stops it.

// wait returns true when the worker died, false when the pool stopped it.
func (s *slot) wait(ctx context.Context) bool {
	s.mu.Lock()
	peer, proc, incarnation, checkpoints := s.peer, s.proc, s.info.Incarnation, s.checkpoints
	s.mu.Unlock()
	if every := s.spec.CheckpointInterval; every > 0 && checkpoints && s.pool.Checkpoints != nil {
		// The rounds end before wait returns: the next incarnation reads
		// an index its predecessor no longer writes.
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			s.checkpointLoop(ctx, peer, incarnation, every, stop)
		}()
		defer func() {
			close(stop)
			<-done
		}()
	}
	var tick <-chan time.Time
	interval, misses := s.pool.ProbeInterval, s.pool.ProbeMisses
	if misses <= 0 {
		misses = 3
	}
	if interval > 0 {
		t := time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	missed, silent, bloated := 0, false, ""
	busyFor := s.pool.BusyTimeout
	if busyFor <= 0 {
		busyFor = defaultBusyTimeout
	}
	cpu := progress{pid: proc.Pid()}
	busyKilled := ""
	cpu.moved(0) // the first reading
	busyMin := busyTicks(interval)
	kill := func() {
		if pid := proc.Pid(); pid > 0 {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		peer.Close()
	}
	for {
		select {
		case <-tick:
			if s.pool.probesOff.Load() {
				continue
			}
			if s.probe(ctx, peer, interval) {
				missed = 0
				cpu.moved(0)
				s.busy(time.Time{})
				if bloated == "" {
					if bloated = s.overMemory(); bloated != "" {
						s.log.Warn("worker over its memory ceiling; killing it", "why", bloated)
						kill()
						tick = nil
					}
				}
				continue
			}
			s.mu.Lock()
			s.info.ProbeFailures++
			s.mu.Unlock()
			if time.Since(peer.LastRecv()) < interval {
				// No answer yet, but the worker is talking (a large
				// package on the channel ahead of the answer): alive.
				continue
			}
			if cpu.moved(busyMin) {
				// Busy in the app (the probe's answer waits for the GIL,
				// or a C call): alive, up to busyFor.
				since := s.busy(time.Now())
				if time.Since(since) < busyFor {
					missed = 0
					continue
				}
				busyKilled = fmt.Sprintf("killed: busy for %s without answering a probe (busy_timeout %s)", time.Since(since).Round(time.Second), busyFor)
				s.log.Warn("worker busy without answering its probes for too long; killing it", "busy_for", time.Since(since).Round(time.Second), "busy_timeout", busyFor)
				kill()
				tick = nil
				continue
			} else {
				missed++
				if missed < misses {
					continue
				}
			}
			// Silence is information: a mute worker is killed and relaunched.
			silent = true
			s.log.Warn("worker missed its probes; killing it", "missed", missed, "interval", interval)
			kill()
			tick = nil // no probe of a worker being killed: it would count as one more miss
			continue
		case <-peer.Done():
			how := "exited: channel closed"
			if err := peer.Err(); err != nil && !errors.Is(err, channel.ErrClosed) {
				how = "exited: " + err.Error()
			}
			switch {
			case busyKilled != "":
				how = busyKilled
			case silent:
				how = fmt.Sprintf("killed for silence: %d probes unanswered", missed)
			case bloated != "":
				how = "killed for memory: " + bloated
			default:
				proc.Kill()
				if er, ok := proc.(exitReporter); ok {
					if st := er.ExitStatus(time.Second); st != "" {
						how = "exited: " + st
					}
				}
			}
			s.down(StateDead, how)
			proc.Kill()
			s.ended()
			s.log.Warn("worker died; starting a replacement", "how", how)
			return true
		case <-ctx.Done():
			s.down(StateStopped, "stopped by the host")
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = peer.Call(sctx, &protocol.Envelope{Body: &protocol.Envelope_Shutdown{Shutdown: &protocol.Shutdown{Reason: "host stopping"}}})
			cancel()
			peer.Close()
			proc.Kill()
			s.ended()
			return false
		}
	}
}

// probe asks the worker for its numbers and records them; false when it did
// not answer in time.
func (s *slot) probe(ctx context.Context, peer *channel.Peer, timeout time.Duration) bool {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	env, err := peer.Call(pctx, &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil || env.GetProbeReply() == nil {
		return false
	}
	r := env.GetProbeReply()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.LastProbe = time.Now()
	s.info.Users, s.info.Conns, s.info.Pages = r.Users, r.Conns, r.Pages
	s.info.HeapBytes, s.info.Goroutines, s.info.Frames = r.HeapBytes, r.Goroutines, r.Frames
	s.info.StateRefused, s.info.PagesRefused = r.StateRefused, r.PagesRefused
	s.info.RSSBytes, s.info.CPUSeconds, s.info.Mailbox = r.RssBytes, r.CpuSeconds, r.MailboxDepth
	s.info.MaintenanceWaiting, s.info.MaintenanceTimedOut = r.MaintenanceWaiting, r.MaintenanceTimedOut
	for _, u := range r.PerUser {
		s.usage[u.User] = u
	}
	for _, u := range r.Left {
		delete(s.usage, u)
	}
	return true
}

// overMemory describes the worker's breach of its group's hard memory
// ceiling, or returns "".
func (s *slot) overMemory() string {
	max := s.spec.MemoryMax
	if max == 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mem, what := s.info.RSSBytes, "rss"
	if mem == 0 {
		mem, what = s.info.HeapBytes, "heap"
	}
	if mem <= max {
		return ""
	}
	return fmt.Sprintf("%s %d MiB > ceiling %d MiB", what, mem>>20, max>>20)
}

// Probe asks a worker for its numbers.
func (p *Pool) Probe(ctx context.Context, workerID string) (*protocol.ProbeReply, error) {
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	peer, err := s.readyPeer(ctx, p.stopCh())
	if err != nil {
		return nil, err
	}
	env, err := peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_Probe{Probe: &protocol.Probe{}}})
	if err != nil {
		return nil, err
	}
	return env.GetProbeReply(), nil
}

// PauseProbes stops probing, for a planned operation that keeps workers
// busy on purpose (parking everyone before a stop): nobody is killed for
// silence while it runs.
func (p *Pool) PauseProbes() { p.probesOff.Store(true) }
