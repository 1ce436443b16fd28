package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stickyd/stickyd/internal/tlsutil"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The peer links: the Router dials one to each agent whose workers it
// reaches (peerFor), and the LinkServer serves the links other agents dial
// to this one's workers.

// link is one dialled peer link.
type link struct {
	conn *grpc.ClientConn
	peer *channel.Peer
}

// peerFor returns the link to the agent running worker.
func (r *Router) peerFor(ctx context.Context, worker string) (*channel.Peer, error) {
	ag, ok := r.cfg.Maps.AgentOf(worker)
	if !ok || ag.RPCAddr == "" {
		return nil, fmt.Errorf("%w %q", ErrUnknownWorker, worker)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if l := r.links[ag.Name]; l != nil {
		select {
		case <-l.peer.Done():
			l.conn.Close()
			delete(r.links, ag.Name)
		default:
			return l.peer, nil
		}
	}
	creds := insecure.NewCredentials()
	if r.cfg.TLS != nil {
		creds = credentials.NewTLS(r.cfg.TLS.ClientTLS(tlsutil.RoleServer, tlsutil.RoleHost))
	}
	cc, err := grpc.NewClient(ag.RPCAddr, append(channel.DialOptions(), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		return nil, fmt.Errorf("dialing agent %s: %w", ag.Name, err)
	}
	c, err := channel.DialPeerLink(context.WithoutCancel(ctx), cc)
	if err != nil {
		cc.Close()
		return nil, fmt.Errorf("opening the peer link to %s: %w", ag.Name, err)
	}
	peer := channel.NewIdlePeer(c, nil)
	peer.LimitAssembly(channel.PeerLinkAssemblyBytes)
	if c.Chunks() {
		peer.EnableChunks()
	}
	peer.Listen()
	l := &link{conn: cc, peer: peer}
	if r.links == nil {
		r.links = map[string]*link{}
	}
	r.links[ag.Name] = l
	return l.peer, nil
}

// Close closes every dialled link. A later call dials again.
func (r *Router) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, l := range r.links {
		l.peer.Close()
		l.conn.Close()
		delete(r.links, name)
	}
}

// LinkServerConfig is what a LinkServer is built from.
type LinkServerConfig struct {
	// Addr is the address to listen on (rpc_addr; ":0" picks a port).
	Addr string
	// Pool runs the workers the links' envelopes are for.
	Pool *Pool
	// TLS, if set, is required of the agents that dial: servers and hosts.
	TLS *tlsutil.Manager
}

// LinkServer serves the peer links other agents dial to this agent's
// workers: each envelope is started on its target worker in arrival order
// and answered when that worker answers.
type LinkServer struct {
	pool *Pool
	rpc  *grpc.Server
	addr string
	done chan struct{} // closed when Serve returns
}

// ServeLinks listens on cfg.Addr and serves peer links until Stop.
func ServeLinks(cfg LinkServerConfig) (*LinkServer, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("peer links: listening on %s: %w", cfg.Addr, err)
	}
	if cfg.TLS != nil {
		// Servers and hosts open peer links; the TLS is the listener's
		// (each refusal counted), so gRPC sees plain connections.
		ln = cfg.TLS.Listener(ln, "rpc", tlsutil.RoleServer, tlsutil.RoleHost)
	}
	s := &LinkServer{pool: cfg.Pool, rpc: grpc.NewServer(channel.PeerLinkServerOptions()...),
		addr: ln.Addr().String(), done: make(chan struct{})}
	channel.RegisterServer(s.rpc, s.serveLink)
	go func() {
		defer close(s.done)
		_ = s.rpc.Serve(ln)
	}()
	return s, nil
}

// Addr is the address the links are served on.
func (s *LinkServer) Addr() string { return s.addr }

// Stop closes the listener and every link at once, and waits for the
// server to end. Idempotent.
func (s *LinkServer) Stop() {
	s.rpc.Stop()
	<-s.done
}

// serveLink relays one peer link's envelopes to this agent's workers, each
// started in arrival order and answered when its worker answers.
func (s *LinkServer) serveLink(ctx context.Context, c channel.Conn) error {
	var p *channel.Peer
	p = channel.NewIdlePeer(c, func(env *protocol.Envelope) {
		id, target := env.Id, env.Target
		env.Target = ""
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		call, err := s.pool.StartEnvelope(sctx, target, env)
		if err != nil {
			cancel()
			code := protocol.Error_UNAVAILABLE
			if errors.Is(err, ErrUnknownWorker) {
				code = protocol.Error_NOT_FOUND
			}
			_ = p.ReplyError(id, code, err.Error())
			return
		}
		go func() {
			defer cancel()
			rep, err := call.Wait(sctx)
			if err != nil {
				var re *channel.RemoteError
				if errors.As(err, &re) {
					_ = p.ReplyError(id, re.Code, re.Message)
				} else {
					_ = p.ReplyError(id, protocol.Error_UNAVAILABLE, err.Error())
				}
				return
			}
			_ = p.Reply(id, rep)
		}()
	})
	p.LimitAssembly(channel.PeerLinkAssemblyBytes)
	if gc, ok := c.(*channel.GRPCConn); ok && gc.Chunks() {
		p.EnableChunks()
	}
	p.Listen()
	select {
	case <-p.Done():
	case <-ctx.Done():
		p.Close()
	}
	return nil
}
