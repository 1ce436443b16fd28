package raftnode

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// peerHealth follows, on the leader, the members whose heartbeats fail:
// raft reports each failure with the time of the last contact, and the
// first heartbeat that succeeds again. It feeds dead-server cleanup.
type peerHealth struct {
	mu sync.Mutex // guards lastContact
	// lastContact holds, for each member whose heartbeats fail now, when
	// the leader last reached it.
	lastContact map[raft.ServerID]time.Time

	obs  *raft.Observer
	ch   chan raft.Observation
	stop chan struct{}
	done chan struct{}
}

func newPeerHealth(r *raft.Raft) *peerHealth {
	p := &peerHealth{lastContact: map[raft.ServerID]time.Time{}, ch: make(chan raft.Observation, 64),
		stop: make(chan struct{}), done: make(chan struct{})}
	p.obs = raft.NewObserver(p.ch, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.FailedHeartbeatObservation, raft.ResumedHeartbeatObservation, raft.LeaderObservation:
			return true
		}
		return false
	})
	r.RegisterObserver(p.obs)
	go p.run()
	return p
}

func (p *peerHealth) run() {
	defer close(p.done)
	for {
		select {
		case <-p.stop:
			return
		case o := <-p.ch:
			p.mu.Lock()
			switch d := o.Data.(type) {
			case raft.FailedHeartbeatObservation:
				last := d.LastContact
				if _, seen := p.lastContact[d.PeerID]; last.IsZero() && seen {
					break // never reached: keep when the failures began
				}
				if last.IsZero() {
					last = time.Now()
				}
				p.lastContact[d.PeerID] = last
			case raft.ResumedHeartbeatObservation:
				delete(p.lastContact, d.PeerID)
			case raft.LeaderObservation:
				// A new term: this member's view of the others starts over.
				clear(p.lastContact)
			}
			p.mu.Unlock()
		}
	}
}

func (p *peerHealth) close(r *raft.Raft) {
	r.DeregisterObserver(p.obs)
	close(p.stop)
	<-p.done
}

// Unreachable lists, on the leader, the members it has failed to reach
// for at least d (from their last contact, or since the failures began
// when it never reached them).
func (n *Node) Unreachable(d time.Duration) []string {
	if n.peers == nil || n.Raft.State() != raft.Leader {
		return nil
	}
	f := n.Raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	member := map[raft.ServerID]bool{}
	for _, s := range f.Configuration().Servers {
		member[s.ID] = true
	}
	n.peers.mu.Lock()
	defer n.peers.mu.Unlock()
	var out []string
	now := time.Now()
	for id, last := range n.peers.lastContact {
		if !member[id] {
			delete(n.peers.lastContact, id) // removed: no heartbeat will resume
			continue
		}
		if now.Sub(last) >= d {
			out = append(out, string(id))
		}
	}
	return out
}
