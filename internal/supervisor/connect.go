package supervisor

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// Group commit of new connections: the connections named while entries
// are being written go together in the next one (ConnectBatch), so a rush
// of newcomers costs entries by the round trip, not by the person. A
// connection named alone is written alone at once: nothing waits for a
// batch to fill.
const (
	// maxConnectBatch bounds the connections of one entry.
	maxConnectBatch = 1024
	// connectWriters is how many entries of connections may be on their
	// way at once (raft pipelines them into one disk write).
	connectWriters = 4
	// connectTimeout bounds the write of one entry; a caller that leaves
	// earlier leaves its connection to be bound all the same.
	connectTimeout = 30 * time.Second
)

type connectBatcher struct {
	log Log
	// encode builds the entries (the maps' EncodeEntry).
	encode func(fsm.MessageType, any) ([]byte, error)
	// together reports whether every server applies ConnectBatch
	// entries; until it does, each connection is an entry of its own.
	together atomic.Pointer[func() bool]

	mu      sync.Mutex // guards pending, writers and writing
	pending []*pendingConnect
	writers int
	// writing counts the connections taken by writers and not yet
	// answered.
	writing int
}

type pendingConnect struct {
	req  fsm.ConnectRequest
	done chan connectOutcome
}

type connectOutcome struct {
	route placement.Route
	err   error
}

// connect binds one connection through the next entry.
func (b *connectBatcher) connect(ctx context.Context, req fsm.ConnectRequest) (placement.Route, error) {
	p := &pendingConnect{req: req, done: make(chan connectOutcome, 1)}
	b.mu.Lock()
	b.pending = append(b.pending, p)
	if b.writers < connectWriters {
		b.writers++
		go b.write()
	}
	b.mu.Unlock()
	select {
	case o := <-p.done:
		return o.route, o.err
	case <-ctx.Done():
		return placement.Route{}, ctx.Err()
	}
}

// write writes entries of the pending connections until none is left.
func (b *connectBatcher) write() {
	for {
		b.mu.Lock()
		n := min(len(b.pending), maxConnectBatch)
		if n == 0 {
			b.writers--
			b.mu.Unlock()
			return
		}
		batch := b.pending[:n:n]
		b.pending = b.pending[n:]
		if len(b.pending) == 0 {
			b.pending = nil // the backing array of a burst is let go
		}
		b.writing += n
		b.mu.Unlock()
		b.writeBatch(batch)
		b.mu.Lock()
		b.writing -= n
		b.mu.Unlock()
	}
}

func (b *connectBatcher) mayBatch() bool {
	f := b.together.Load()
	return f == nil || (*f)()
}

func (b *connectBatcher) writeBatch(batch []*pendingConnect) {
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	fail := func(err error) {
		for _, p := range batch {
			p.done <- connectOutcome{err: err}
		}
	}
	if len(batch) > 1 && !b.mayBatch() {
		for _, p := range batch {
			b.writeBatch([]*pendingConnect{p})
		}
		return
	}
	// One connection goes as the entry of one, which every version
	// applies; more go as a batch.
	typ, body := fsm.ConnectRequestType, any(batch[0].req)
	if len(batch) > 1 {
		req := fsm.ConnectBatchRequest{Conns: make([]fsm.ConnectRequest, len(batch))}
		for i, p := range batch {
			req.Conns[i] = p.req
		}
		typ, body = fsm.ConnectBatchRequestType, req
	}
	entry, err := b.encode(typ, body)
	if err != nil {
		fail(err)
		return
	}
	res, err := b.log.Apply(ctx, entry)
	if err != nil {
		fail(err)
		return
	}
	switch out := res.(type) {
	case placement.Route:
		if len(batch) == 1 {
			batch[0].done <- connectOutcome{route: out}
			return
		}
	case fsm.ConnectBatchResult:
		if len(out.Conns) == len(batch) {
			for i, p := range batch {
				p.done <- connectOutcome{route: out.Conns[i].Route, err: out.Conns[i].Err()}
			}
			return
		}
	}
	fail(fmt.Errorf("the log answered %d connections with %T", len(batch), res))
}
