package freeport

import (
	"net"
	"os"
	"strconv"
	"testing"
)

func TestTakeHandsOutDistinctBindablePorts(t *testing.T) {
	ps, err := Take(150) // more than one block
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lowPort || p >= Limit {
			t.Fatalf("port %d outside [%d, %d)", p, lowPort, Limit)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
	}
	if len(holders) < 3 {
		t.Fatalf("150 ports from %d blocks, want at least 3", len(holders))
	}
}

func TestBlocksHeldByAnotherProcessAreSkipped(t *testing.T) {
	// Hold the lock port of the block this process would reserve next, as
	// another test binary would.
	mu.Lock()
	b := (os.Getpid()%numBlocks + tried) % numBlocks
	next = end // the next Take reserves a new block
	mu.Unlock()
	first := lowPort + b*blockSize
	other, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
	if err != nil {
		t.Skipf("port %d is in use here already: %v", first, err)
	}
	defer other.Close()
	ps, err := Take(1)
	if err != nil {
		t.Fatal(err)
	}
	if ps[0] >= first && ps[0] < first+blockSize {
		t.Fatalf("port %d is in block %d, which another process holds", ps[0], b)
	}
}
