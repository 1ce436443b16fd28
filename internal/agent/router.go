package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/stickyd/stickyd/internal/channel"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/protocol"
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// Any front reaches any worker. Workers of this agent are reached through its
// pool; a worker of another agent through a peer link: one gRPC stream of
// envelopes per pair of agents (the same Envelope and Channel RPC a worker
// speaks), each envelope naming its target worker. The far agent hands each
// envelope to its pool in arrival order, so a page's frames keep their order
// across hosts. Every agent registers its workers in the maps, so any server
// knows where a worker runs.

// router is the agent's Dispatcher, and what the supervisor and the mover
// know of workers: local ones directly, remote ones over peer links.
type router struct {
	a *Agent

	mu    sync.Mutex // guards links
	links map[string]*link
}

type link struct {
	conn *grpc.ClientConn
	peer *channel.Peer
}

// peerFor returns the link to the agent running worker.
func (r *router) peerFor(ctx context.Context, worker string) (*channel.Peer, error) {
	ag, ok := r.a.fsm.AgentOf(worker)
	if !ok || ag.RPCAddr == "" {
		return nil, fmt.Errorf("%w %q", host.ErrUnknownWorker, worker)
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
	if r.a.tls != nil {
		creds = credentials.NewTLS(r.a.tls.ClientTLS(tlsutil.RoleServer, tlsutil.RoleHost))
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

func (r *router) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, l := range r.links {
		l.peer.Close()
		l.conn.Close()
		delete(r.links, name)
	}
}

// start sends env to worker, wherever it runs.
func (r *router) start(ctx context.Context, worker string, env *protocol.Envelope) (*channel.Call, error) {
	if r.a.pool.Has(worker) {
		return r.a.pool.StartEnvelope(ctx, worker, env)
	}
	for {
		p, err := r.peerFor(ctx, worker)
		if err != nil {
			return nil, err
		}
		env.Target = worker
		c, err := p.Start(env)
		if err == nil {
			return c, nil
		}
		// The link broke: the next peerFor dials again, within ctx.
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (r *router) call(ctx context.Context, worker string, env *protocol.Envelope) (*protocol.Envelope, error) {
	c, err := r.start(ctx, worker, env)
	if err != nil {
		return nil, err
	}
	return c.Wait(ctx)
}

// Send implements front.Dispatcher.
func (r *router) Send(ctx context.Context, worker string, f *protocol.Frame) (*channel.Call, error) {
	if r.a.pool.Has(worker) {
		// The frame goes in its envelope there, once.
		return r.a.pool.Send(ctx, worker, f)
	}
	return r.start(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
}

// Freeze, Thaw, Evict and Ready implement move.Workers.
func (r *router) Freeze(ctx context.Context, worker, user string, epoch uint64) (*protocol.Frozen, error) {
	return r.FreezeFrom(ctx, worker, user, epoch, 0, "")
}

// FreezeFrom, Precopy and Stage implement move.Precopier.
func (r *router) FreezeFrom(ctx context.Context, worker, user string, epoch, base uint64, baseDigest string) (*protocol.Frozen, error) {
	env, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Freeze{Freeze: &protocol.Freeze{User: user, Epoch: epoch, Base: base, BaseDigest: baseDigest}}})
	if err != nil {
		return nil, err
	}
	fz := env.GetFrozen()
	if fz == nil {
		return nil, fmt.Errorf("worker %s answered a freeze with %T", worker, env.Body)
	}
	return fz, nil
}

func (r *router) Precopy(ctx context.Context, worker, user string) (*protocol.Precopied, error) {
	env, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Precopy{Precopy: &protocol.Precopy{User: user}}})
	if err != nil {
		return nil, err
	}
	pc := env.GetPrecopied()
	if pc == nil {
		return nil, fmt.Errorf("worker %s answered a precopy with %T", worker, env.Body)
	}
	return pc, nil
}

func (r *router) Stage(ctx context.Context, worker, user, digest string, pkg []byte) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Stage{Stage: &protocol.Stage{User: user, Digest: digest, Package: pkg}}})
	return err
}

func (r *router) Thaw(ctx context.Context, worker, user string, epoch uint64) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Thaw{Thaw: &protocol.Thaw{User: user, Epoch: epoch}}})
	return err
}

func (r *router) Evict(ctx context.Context, worker, user string) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: user}}})
	return err
}

// Drop implements move.Dropper: an eviction that leaves no fence.
func (r *router) Drop(ctx context.Context, worker, user string) error {
	_, err := r.call(ctx, worker, &protocol.Envelope{Body: &protocol.Envelope_Evict{Evict: &protocol.Evict{User: user, Forget: true}}})
	return err
}

// Ready lists this agent's ready workers and every worker other agents
// registered (their own hosts restart them; a frame waits if one is down).
func (r *router) Ready() []string {
	out := r.a.pool.Ready()
	for _, ag := range r.a.fsm.Agents() {
		if ag.Name == r.a.cfg.Name || ag.Draining {
			continue
		}
		for w := range ag.Workers {
			out = append(out, w)
		}
	}
	return out
}

// deliverTimeout bounds handing a package to the destination's host.
const deliverTimeout = 10 * time.Second

// Deliver hands a moved person's package to the agent of the worker they
// are moving to, before the maps point there: the package travels from
// memory to the host that wakes them, and the one that froze them may go
// away. A local worker's agent has it already; an agent not in the maps
// fetches it at the wake as before.
func (r *router) Deliver(ctx context.Context, worker, digest string, pkg []byte) error {
	if r.a.pool.GroupOf(worker) != "" {
		return nil
	}
	ag, ok := r.a.fsm.AgentOf(worker)
	if !ok || ag.Name == r.a.cfg.Name || ag.AdminAddr == "" {
		return nil
	}
	// Bounded: a destination host that does not take it in time (stopped,
	// cut off) rolls the move back, and the person stays home.
	ctx, cancel := context.WithTimeout(ctx, deliverTimeout)
	defer cancel()
	if _, err := r.a.fetch(ctx, "PUT", ag.AdminAddr, "/v1/internal/park/"+digest, pkg); err != nil {
		return fmt.Errorf("delivering the package to %s: %w", ag.Name, err)
	}
	return nil
}

// Local lists this agent's ready workers.
func (r *router) Local() []string { return r.a.pool.Ready() }

// GroupOf implements supervisor.Workers.
func (r *router) GroupOf(worker string) string {
	if g := r.a.pool.GroupOf(worker); g != "" {
		return g
	}
	if ag, ok := r.a.fsm.AgentOf(worker); ok {
		return ag.Workers[worker]
	}
	return ""
}

// serveLinks serves peer links on the RPC address.
func (a *Agent) serveLinks() error {
	ln, err := net.Listen("tcp", a.cfg.Server.RPCAddr)
	if err != nil {
		return fmt.Errorf("peer links: listening on %s: %w", a.cfg.Server.RPCAddr, err)
	}
	if a.tls != nil {
		// Servers and hosts open peer links; the TLS is the listener's
		// (each refusal counted), so gRPC sees plain connections.
		ln = a.tls.Listener(ln, "rpc", tlsutil.RoleServer, tlsutil.RoleHost)
	}
	addr := ln.Addr().String()
	a.rpcAddr.Store(&addr)
	s := grpc.NewServer(channel.PeerLinkServerOptions()...)
	channel.RegisterServer(s, a.serveLink)
	a.rpc = s
	go func() { _ = s.Serve(ln) }()
	return nil
}

// serveLink relays one peer link's envelopes to this agent's workers, each
// started in arrival order and answered when its worker answers.
func (a *Agent) serveLink(ctx context.Context, c channel.Conn) error {
	var p *channel.Peer
	p = channel.NewIdlePeer(c, func(env *protocol.Envelope) {
		id, target := env.Id, env.Target
		env.Target = ""
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		call, err := a.pool.StartEnvelope(sctx, target, env)
		if err != nil {
			cancel()
			code := protocol.Error_UNAVAILABLE
			if errors.Is(err, host.ErrUnknownWorker) {
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

// clusterParcels reads a parked package from this agent's store, or fetches
// it from the agent that parked it.
type clusterParcels struct{ a *Agent }

func (c clusterParcels) Get(digest string) ([]byte, error) {
	b, err := c.a.park.Get(digest)
	if err == nil || !errors.Is(err, park.ErrNotFound) {
		return b, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, ag := range c.a.fsm.Agents() {
		if ag.Name == c.a.cfg.Name {
			continue
		}
		b, ferr := c.a.fetch(ctx, "GET", ag.AdminAddr, "/v1/internal/park/"+digest, nil)
		if ferr != nil {
			continue
		}
		if park.Digest(b) != digest {
			return nil, fmt.Errorf("%w: %s fetched from %s", park.ErrCorrupt, digest, ag.Name)
		}
		if _, err := c.a.hold(b); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, err
}
