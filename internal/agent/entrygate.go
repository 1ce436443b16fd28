package agent

import (
	"context"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
)

// entryGate says whether every server of the raft configuration applies
// entries of a type: a writer holds a new type back while a rolling update
// still runs an older server, which would skip it and drift from the
// others. Once every server does, it stays so (servers are upgraded, not
// downgraded); until then the servers are asked again at most every 10 s.
type entryGate struct {
	a *Agent

	mu     sync.Mutex // guards newest, asked and asking
	newest fsm.MessageType
	asked  time.Time
	asking bool
}

// allow reports whether every server applies entries of type t. It never
// waits: what it does not know yet it asks in the background, and says no
// meanwhile.
func (g *entryGate) allow(t fsm.MessageType) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.newest >= t {
		return true
	}
	if !g.asking && time.Since(g.asked) >= 10*time.Second {
		g.asking, g.asked = true, time.Now()
		go func() {
			n := g.ask()
			g.mu.Lock()
			g.newest = max(g.newest, n)
			g.asking = false
			g.mu.Unlock()
		}()
	}
	return false
}

// ask is the newest entry type all the servers apply, as they say.
func (g *entryGate) ask() fsm.MessageType {
	a := g.a
	r := a.raftNode()
	if r == nil {
		return fsm.NewestEntryType // no cluster: this process alone
	}
	peers, err := r.Peers()
	if err != nil || len(peers) == 0 {
		return 0
	}
	newest := fsm.NewestEntryType
	self := r.Addr()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range peers {
		if p.Address == self {
			continue
		}
		admin := a.peers.AdminOf(p.ID, p.Address)
		if admin == "" {
			a.refreshPeers(ctx, p.ID)
			if admin = a.peers.AdminOf(p.ID, p.Address); admin == "" {
				return 0
			}
		}
		var s Self
		if err := a.call(ctx, "GET", admin, "/v1/agent/self", nil, &s); err != nil {
			return 0
		}
		newest = min(newest, fsm.MessageType(s.NewestEntry))
	}
	return newest
}
