package server

import "testing"

// A server that takes a raft address another server had is not sent to
// the other's admin address; a server that moves is found at its new one.
func TestPeersFollowTheNameAtAnAddress(t *testing.T) {
	var p Peers
	p.Learn("s1", "10.0.0.1:7001", "10.0.0.1:8001")
	p.Learn("s2", "10.0.0.2:7001", "10.0.0.2:8001")
	if got := p.AdminOf("s1", "10.0.0.1:7001"); got != "10.0.0.1:8001" {
		t.Fatalf("s1's admin: %q", got)
	}
	// s3 replaces s1 and takes its raft address: until learnt, unknown.
	if got := p.AdminOf("s3", "10.0.0.1:7001"); got != "" {
		t.Fatalf("s3 at s1's old raft address resolves to %q, s1's admin address", got)
	}
	p.Learn("s3", "10.0.0.1:7001", "10.0.0.1:8005")
	if got := p.AdminOf("s3", "10.0.0.1:7001"); got != "10.0.0.1:8005" {
		t.Fatalf("s3's admin: %q", got)
	}
	if got := p.AdminOf("s1", "10.0.0.1:7001"); got != "" {
		t.Fatalf("s1 still resolves at an address s3 took: %q", got)
	}
	// s2 moves to a new raft address: its old entry goes.
	p.Learn("s2", "10.0.0.2:7002", "10.0.0.2:8002")
	if got := p.AdminOf("s2", "10.0.0.2:7001"); got != "" {
		t.Fatalf("s2's old address still resolves: %q", got)
	}
	p.Forget("10.0.0.2:7002")
	if got := p.AdminOf("s2", "10.0.0.2:7002"); got != "" {
		t.Fatalf("a forgotten address resolves: %q", got)
	}
	// No name (a caller that has only the address) takes whoever is there.
	if got := p.AdminOf("", "10.0.0.1:7001"); got != "10.0.0.1:8005" {
		t.Fatalf("by address alone: %q", got)
	}
}
