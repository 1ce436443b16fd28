package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/fsm"
)

// mapsResult is what the maps cost at the population, applied directly
// (no raft): heap per person, and a snapshot taken while writers and front
// lookups go on.
type mapsResult struct {
	people, conns int
	fill          time.Duration
	heapLeader    float64 // bytes per person
	heapFollower  float64 // bytes per person, restored from the snapshot
	walks         int64   // walks of everyone meanwhile (people by worker, stale connections)
	snapLock      time.Duration
	persist       time.Duration
	snapBytes     int64
	restore       time.Duration
	applies       int64
	maxApply      time.Duration // longest Apply during the snapshot's life
	maxWait       time.Duration // longest an Apply waited for the lock meanwhile
	lookups       int64
	maxLookup     time.Duration // longest front lookup during it
}

// workerName is the name of worker w of host h, as the simulation names them.
func workerName(host, w int) string { return fmt.Sprintf("h%03d-w%d", host, w) }

func personName(i int) string { return fmt.Sprintf("person-%07d", i) }

func connName(i, c int) string { return fmt.Sprintf("conn-%07d-%d", i, c) }

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// applyOne applies entry at index through f, as raft would.
func applyOne(f *fsm.FSM, index uint64, typ fsm.MessageType, body any) (any, error) {
	b, err := fsm.Encode(typ, body)
	if err != nil {
		return nil, err
	}
	out := f.Apply(&raft.Log{Index: index, Data: b})
	if err, ok := out.(error); ok {
		return nil, err
	}
	return out, nil
}

// fillMaps puts o.people people with o.conns connections each on the
// simulation's workers, entry by entry.
func fillMaps(f *fsm.FSM, o options, index *uint64) error {
	for i := range o.people {
		w := workerName(i%o.hosts, (i/o.hosts)%o.workers)
		for c := range o.conns {
			*index++
			if _, err := applyOne(f, *index, fsm.ConnectRequestType, fsm.ConnectRequest{Conn: connName(i, c), User: personName(i), Worker: w}); err != nil {
				return fmt.Errorf("connecting %s: %w", personName(i), err)
			}
		}
	}
	return nil
}

func measureMaps(ctx context.Context, o options, dir string, stderr io.Writer) (mapsResult, error) {
	r := mapsResult{people: o.people, conns: o.people * o.conns}
	base := heapInUse()
	f := fsm.New()
	var index uint64
	start := time.Now()
	if err := fillMaps(f, o, &index); err != nil {
		return r, err
	}
	r.fill = time.Since(start)
	r.heapLeader = float64(heapInUse()-base) / float64(o.people)
	fmt.Fprintf(stderr, "maps: %d people, %d connections in %v; %.0f B a person\n", o.people, r.conns, r.fill.Round(time.Millisecond), r.heapLeader)

	// Writers (moves, through the one road's batched entries) and front
	// lookups go on while the snapshot is taken and written. index is
	// the writer's alone from here on.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var maxApply, maxLookup atomic.Int64
	var applyErr error
	wg.Add(3)
	go func() {
		// Walks of everyone, as governance, the forgetting of stale
		// connections and the Consul publish make them: each holds the
		// maps' lock a shard at a time.
		defer wg.Done()
		mine := map[string]bool{workerName(1, 1): true, workerName(2, 3): true}
		for {
			select {
			case <-stop:
				return
			default:
			}
			f.UsersByWorker(mine)
			f.StaleConns(mine, 1)
			atomic.AddInt64(&r.walks, 1)
		}
	}()
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			i := (n * 7919) % o.people
			u, _ := f.User(personName(i))
			to := workerName((i+1+n)%o.hosts, n%o.workers)
			t0 := time.Now()
			index++
			if _, err := applyOne(f, index, fsm.MoveBatchRequestType, fsm.MoveBatchRequest{Begin: []fsm.MoveBeginRequest{{User: u.User, From: u.Worker, To: to, Epoch: u.Epoch}}}); err != nil {
				applyErr = err
				return
			}
			index++
			if _, err := applyOne(f, index, fsm.MoveBatchRequestType, fsm.MoveBatchRequest{Commit: []fsm.MoveCommitRequest{{User: u.User, To: to, Epoch: u.Epoch + 1}}}); err != nil {
				applyErr = err
				return
			}
			d := time.Since(t0) / 2
			r.applies += 2
			if int64(d) > maxApply.Load() {
				maxApply.Store(int64(d))
			}
		}
	}()
	go func() {
		defer wg.Done()
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			t0 := time.Now()
			f.Lookup(connName((n*104729)%o.people, n%o.conns))
			d := time.Since(t0)
			atomic.AddInt64(&r.lookups, 1)
			if int64(d) > maxLookup.Load() {
				maxLookup.Store(int64(d))
			}
		}
	}()
	time.Sleep(200 * time.Millisecond) // the writers under way
	f.MaxApplyWait()                   // from here on
	t0 := time.Now()
	snap, err := f.Snapshot()
	r.snapLock = time.Since(t0)
	if err != nil {
		close(stop)
		wg.Wait()
		return r, err
	}
	path := filepath.Join(dir, "maps.snap")
	t0 = time.Now()
	sink, err := newFileSink(path)
	if err == nil {
		err = snap.Persist(sink)
	}
	r.persist = time.Since(t0)
	snap.Release()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err != nil {
		return r, fmt.Errorf("persisting: %w", err)
	}
	if applyErr != nil {
		return r, fmt.Errorf("moving while the snapshot was taken: %w", applyErr)
	}
	r.maxApply, r.maxLookup = time.Duration(maxApply.Load()), time.Duration(maxLookup.Load())
	r.maxWait = f.MaxApplyWait()
	if st, err := os.Stat(path); err == nil {
		r.snapBytes = st.Size()
	}
	fmt.Fprintf(stderr, "maps: snapshot %v under the lock, persisted in %v (%d MB)\n", r.snapLock, r.persist.Round(time.Millisecond), r.snapBytes>>20)

	// The follower's side: the leader's maps let go, the snapshot restored.
	f = nil
	base = heapInUse()
	g := fsm.New()
	t0 = time.Now()
	in, err := os.Open(path)
	if err != nil {
		return r, err
	}
	if err := g.Restore(in); err != nil {
		return r, fmt.Errorf("restoring: %w", err)
	}
	r.restore = time.Since(t0)
	r.heapFollower = float64(heapInUse()-base) / float64(o.people)
	if _, users := g.Counts(); users != o.people {
		return r, fmt.Errorf("restored %d people, want %d", users, o.people)
	}
	fmt.Fprintf(stderr, "maps: restored in %v; %.0f B a person\n", r.restore.Round(time.Millisecond), r.heapFollower)
	runtime.KeepAlive(g)
	return r, ctx.Err()
}

// fileSink is a raft.SnapshotSink on a file.
type fileSink struct{ *os.File }

func newFileSink(path string) (*fileSink, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &fileSink{f}, nil
}

func (s *fileSink) ID() string    { return "bench" }
func (s *fileSink) Cancel() error { return s.File.Close() }

var _ raft.SnapshotSink = (*fileSink)(nil)
