// Package freeport hands out loopback ports to tests that start real
// processes (agents, Consul, Nomad) and must write a port into their
// configuration before the process binds it.
//
// Asking the kernel for port 0 and closing the listener is not enough when
// several test binaries run side by side: the kernel hands the same
// ephemeral range to every outgoing connection, so the port can be taken
// again before the agent binds it. Ports here come from below the
// ephemeral range instead (see ip_local_port_range), in blocks. A process
// reserves a block by holding a listener on its first port for as long as
// it lives, so two test binaries never hand out the same block, and no
// outgoing connection is ever given one of these ports by the kernel.
package freeport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
)

// Limit is the first port this package never hands out. The ports from it
// up to the usual ephemeral range (32768–60999) are the test Nomad agents'
// dynamic ports (internal/testagents): Nomad hands them to allocations
// without checking the host, so a port handed out here and held by an
// agent of another test binary would stop an allocation from binding it.
const Limit = 20000

const (
	lowPort   = 10000
	blockSize = 64
	numBlocks = (Limit - lowPort) / blockSize
)

var (
	mu      sync.Mutex
	next    int            // next port to hand out in the current block
	end     int            // end of the current block
	holders []net.Listener // one per reserved block, held until exit
	tried   int            // blocks tried since start
)

// Take returns n ports that are free on 127.0.0.1 for both TCP and UDP now
// and were handed to no one else by this package, in this process or in
// another one.
func Take(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	ports := make([]int, 0, n)
	for len(ports) < n {
		if next >= end {
			if err := reserveBlock(); err != nil {
				return nil, err
			}
		}
		p := next
		next++
		if free(p) {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// reserveBlock finds a block whose first port can be bound and holds it.
// Processes start at different blocks (by pid) so they rarely meet.
func reserveBlock() error {
	start := os.Getpid() % numBlocks
	for tried < numBlocks {
		b := (start + tried) % numBlocks
		tried++
		first := lowPort + b*blockSize
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(first)))
		if err != nil {
			continue // another process holds this block
		}
		holders = append(holders, l)
		next, end = first+1, first+blockSize
		return nil
	}
	return errors.New("freeport: every block of ports is taken")
}

// free reports whether p can be bound on loopback for TCP and UDP (Consul
// and Nomad use both on one number).
func free(p int) bool {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer l.Close()
	u, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	u.Close()
	return true
}

// Addr returns a free "127.0.0.1:port" for a test, failing it if none is
// left.
func Addr(t testing.TB) string {
	t.Helper()
	ps, err := Take(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ps[0])
}
