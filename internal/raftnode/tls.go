package raftnode

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// tlsStream is raft's stream layer over mutual TLS.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	tls       *tlsutil.Manager
}

// Dial opens a connection to a member: a server or a host of the cluster.
func (s *tlsStream) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return s.tls.Dial(ctx, string(address), tlsutil.RoleServer, tlsutil.RoleHost)
}

// Addr is the address the other members dial.
func (s *tlsStream) Addr() net.Addr { return s.advertise }

// tlsTransport is raft's network transport over mutual TLS on bind,
// advertised as advertise (as raft.NewTCPTransport checks it).
func tlsTransport(bind string, advertise *net.TCPAddr, m *tlsutil.Manager, log hclog.Logger) (*raft.NetworkTransport, error) {
	if advertise.IP == nil || advertise.IP.IsUnspecified() {
		return nil, errors.New("raft: the advertised address must be a routable address, not " + advertise.String())
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	adv := net.Addr(advertise)
	if advertise.Port == 0 {
		adv = ln.Addr()
	}
	// Only servers send raft requests: a leader's appends and snapshots,
	// a candidate's votes.
	stream := &tlsStream{Listener: m.Listener(ln, "raft", tlsutil.RoleServer), advertise: adv, tls: m}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  log,
	}), nil
}
