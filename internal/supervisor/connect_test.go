package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
)

// slowLog is a log whose writes wait until released, counting entries by
// type: what is named meanwhile must go together.
type slowLog struct {
	direct
	gate    chan struct{}
	mu      sync.Mutex
	entries map[fsm.MessageType]int
	// binary counts the entries written in the binary envelope.
	binary int
}

func (l *slowLog) Apply(ctx context.Context, entry []byte) (any, error) {
	l.mu.Lock()
	gate := l.gate
	l.mu.Unlock()
	<-gate
	l.mu.Lock()
	l.entries[fsm.EntryType(entry)]++
	if fsm.MessageType(entry[0]) == fsm.BinaryEntryType {
		l.binary++
	}
	l.mu.Unlock()
	return l.direct.Apply(ctx, entry)
}

// A rush of newcomers is written in a few entries, not one each; each
// caller gets its own route, and a refused name refuses that caller alone.
func TestConnectsGoTogether(t *testing.T) {
	f := fsm.New()
	log := &slowLog{direct: direct{f: f}, gate: make(chan struct{}), entries: map[fsm.MessageType]int{}}
	s := New(f, log, ready{"w1"}, nil)
	// A connection that exists already: a newcomer of that name is refused.
	close(log.gate)
	if _, err := s.Connect(t.Context(), "taken", "ann", "w1"); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.gate = make(chan struct{})
	log.mu.Unlock()
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n+1)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Connect(t.Context(), fmt.Sprintf("c%d", i), fmt.Sprintf("u%d", i), "w1")
			if err == nil && (r.Conn != fmt.Sprintf("c%d", i) || r.User != fmt.Sprintf("u%d", i) || r.Worker != "w1") {
				err = fmt.Errorf("route %+v", r)
			}
			errs[i] = err
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[n] = s.Connect(t.Context(), "taken", "bob", "w1")
	}()
	// Everyone is waiting behind the first writes; then the log goes on.
	waitPending(t, s, log, n+1)
	log.mu.Lock()
	close(log.gate)
	log.mu.Unlock()
	wg.Wait()
	for i, err := range errs[:n] {
		if err != nil {
			t.Fatalf("c%d: %v", i, err)
		}
	}
	if !errors.Is(errs[n], fsm.ErrConnTaken) {
		t.Fatalf("a newcomer named after an existing connection: %v, want ErrConnTaken", errs[n])
	}
	entries := log.entries[fsm.ConnectRequestType] + log.entries[fsm.ConnectBatchRequestType]
	if entries > 2*connectWriters+1 {
		t.Fatalf("%d connections took %d entries (%v)", n+1, entries, log.entries)
	}
	if conns, users := f.Counts(); conns != n+1 || users != n+1 {
		t.Fatalf("the maps hold %d connections and %d people, want %d", conns, users, n+1)
	}
}

// waitPending waits until n connections are either queued or being
// written (held at the log's gate).
func waitPending(t *testing.T, s *Supervisor, log *slowLog, n int) {
	t.Helper()
	for range 5000 {
		s.connects.mu.Lock()
		got := len(s.connects.pending) + s.connects.writing
		s.connects.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-t.Context().Done():
			return
		default:
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the connections never queued (%d wanted)", n)
}

// While a server of the cluster does not apply batches (a rolling update
// under way), every connection is an entry of its own, in JSON; once all
// do, they go together, in the binary envelope.
func TestConnectBatchGate(t *testing.T) {
	f := fsm.New()
	log := &slowLog{direct: direct{f: f}, gate: make(chan struct{}), entries: map[fsm.MessageType]int{}}
	s := New(f, log, ready{"w1"}, nil)
	var together atomic.Bool
	s.SetBatchGate(together.Load)
	f.SetEntryGate(func(t fsm.MessageType) bool { return together.Load() || t < fsm.ConnectBatchRequestType })
	rush := func(prefix string, n int) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := s.Connect(t.Context(), fmt.Sprintf("%s%d", prefix, i), "", "w1"); err != nil {
					t.Error(err)
				}
			}()
		}
		waitPending(t, s, log, n)
		log.mu.Lock()
		close(log.gate)
		log.mu.Unlock()
		wg.Wait()
		log.mu.Lock()
		log.gate = make(chan struct{})
		log.mu.Unlock()
	}
	rush("a", 50)
	if log.entries[fsm.ConnectBatchRequestType] != 0 || log.entries[fsm.ConnectRequestType] != 50 || log.binary != 0 {
		t.Fatalf("with an older server: %v (%d binary), want 50 connect entries in JSON and no batch", log.entries, log.binary)
	}
	together.Store(true)
	rush("b", 50)
	if log.entries[fsm.ConnectBatchRequestType] == 0 || log.entries[fsm.ConnectRequestType]+log.entries[fsm.ConnectBatchRequestType] > 50+2*connectWriters {
		t.Fatalf("once every server applies batches: %v", log.entries)
	}
	if log.binary != log.entries[fsm.ConnectBatchRequestType]+log.entries[fsm.ConnectRequestType]-50 {
		t.Fatalf("once every server applies the binary envelope: %d binary of %v", log.binary, log.entries)
	}
	if conns, _ := f.Counts(); conns != 100 {
		t.Fatalf("%d connections, want 100", conns)
	}
}
