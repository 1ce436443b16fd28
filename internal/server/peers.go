package server

import "sync"

// Peers is what this server knows of the other servers' addresses: for
// each raft address, the name of the server last seen there and its admin
// API address. Raft names the leader and the members by ID and address
// (its configuration as it is now); a lookup answers only when the server
// last seen at that address has that name. A new server that takes a raft
// address another one had (a Nomad replacement on a small port range) is
// therefore never sent to the other's admin address: the caller learns
// the addresses again.
type Peers struct {
	mu     sync.Mutex
	byRaft map[string]peer
}

type peer struct {
	name, admin string
}

// Learn records that the server name serves raft at raftAddr and its admin
// API at adminAddr.
func (p *Peers) Learn(name, raftAddr, adminAddr string) {
	if raftAddr == "" || adminAddr == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byRaft == nil {
		p.byRaft = map[string]peer{}
	}
	for addr, e := range p.byRaft {
		if e.name == name && addr != raftAddr {
			delete(p.byRaft, addr) // the server moved
		}
	}
	p.byRaft[raftAddr] = peer{name: name, admin: adminAddr}
}

// AdminOf is the admin API address of the server named name at raftAddr,
// "" when this server does not know it (or knows another server there).
func (p *Peers) AdminOf(name, raftAddr string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.byRaft[raftAddr]
	if !ok || (name != "" && e.name != name) {
		return ""
	}
	return e.admin
}

// Forget drops what is known of raftAddr: its admin address did not
// answer as an agent does, and is learnt again at the next lookup.
func (p *Peers) Forget(raftAddr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byRaft, raftAddr)
}
