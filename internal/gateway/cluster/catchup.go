package cluster

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/api"
)

// A key is created through the leader and reaches the other servers with
// their replicas, a moment later. A server that meets a key of stickyd's
// own format it does not know (or that has no key yet, so its gateway
// would take the call as one without a key) catches up first: it asks the
// leader how far its maps have applied the log, waits until its own
// replica is there, and only then decides. The leader acknowledged the
// key's creation once it had applied it, so a key created before the call
// is then known everywhere.

// catchUpWait bounds a catch-up: the leader's answer and this replica's
// wait for its index. Past it the server decides on what it has.
const catchUpWait = 5 * time.Second

// catchUp brings this replica up to the leader's applied index, one
// round at a time: a caller that arrives while a round is out joins the
// next one (which starts after the caller arrived, so it sees every key
// created before), and every caller waiting then shares it. A stranger
// trying made-up keys thus costs the leader at most one small request per
// round trip, however many there are.
type catchUp struct {
	// leaderIndex is the leader's applied index (after it checked it
	// still leads); applied is this replica's.
	leaderIndex func(context.Context) (uint64, error)
	applied     func() uint64

	mu        sync.Mutex
	out, next *catchUpRound

	rounds, waited atomic.Uint64 // for the metrics
}

type catchUpRound struct {
	done chan struct{}
	err  error
}

// wait returns once a round that started after it was called has ended
// (its error: the leader could not be asked, or the replica did not get
// there within catchUpWait), or when ctx ends.
func (c *catchUp) wait(ctx context.Context) error {
	c.waited.Add(1)
	c.mu.Lock()
	var r *catchUpRound
	switch {
	case c.out == nil:
		r = &catchUpRound{done: make(chan struct{})}
		c.out = r
		go c.run(r)
	case c.next == nil:
		r = &catchUpRound{done: make(chan struct{})}
		c.next = r
	default:
		r = c.next
	}
	c.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs round r, then the one queued meanwhile, if any.
func (c *catchUp) run(r *catchUpRound) {
	for r != nil {
		c.rounds.Add(1)
		r.err = c.round()
		close(r.done)
		c.mu.Lock()
		r, c.next = c.next, nil
		c.out = r
		c.mu.Unlock()
	}
}

func (c *catchUp) round() error {
	ctx, cancel := context.WithTimeout(context.Background(), catchUpWait)
	defer cancel()
	index, err := c.leaderIndex(ctx)
	if err != nil {
		return err
	}
	for c.applied() < index {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// leaderApplied is catchUp's leaderIndex: on the leader, its own maps'
// index once it has proved its lead; elsewhere, the leader's answer.
func (g *Gateway) leaderApplied(ctx context.Context) (uint64, error) {
	if g.srv.Raft().IsLeader() {
		if err := g.lead.check(); err != nil {
			return 0, err
		}
		return g.maps.Index(), nil
	}
	admin, err := g.leaderAdmin(ctx)
	if err != nil {
		return 0, err
	}
	var out struct {
		Index uint64 `json:"index"`
	}
	err = g.call(ctx, http.MethodGet, admin, "/v1/internal/gateway/applied", &out)
	return out.Index, err
}

// serveApplied is the leader's side: its maps' index once it has proved,
// with a quorum, that it still leads (a deposed leader's index may lack
// what the new one acknowledged). The proof is the one the shares use
// (leaderLease: at most one quorum round per 100 ms, however many ask).
func (g *Gateway) serveApplied(w http.ResponseWriter, r *http.Request) error {
	if err := g.lead.check(); err != nil {
		return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
	}
	writeJSONTo(w, http.StatusOK, map[string]uint64{"index": g.maps.Index()})
	return nil
}
