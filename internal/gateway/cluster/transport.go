package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
	"github.com/stickyd/stickyd/internal/gateway/transport"
)

// serve serves the gateway's transports: HTTP (async REST and the
// OpenAI-compatible API) and gRPC, with the API keys as bearer tokens.
func (g *Gateway) serve() error {
	c := g.cfg
	name := newAuthenticator(c.APIKeys, g.maps, g.catchUp).name
	log := g.log.Named("gateway")
	h := transport.HTTPHandler(g, transport.HTTPOptions{Logger: log,
		Auth: func(r *http.Request) (string, error) {
			auth := r.Header.Get("Authorization")
			if k := r.Header.Get("X-Api-Key"); auth == "" && k != "" {
				auth = "Bearer " + k // Anthropic's clients send their key so
			}
			return name(r.Context(), auth)
		}})
	ln, err := net.Listen("tcp", c.Address)
	if err != nil {
		return fmt.Errorf("gateway: listening on %s: %w", c.Address, err)
	}
	// A key reads its own usage beside the calls.
	mux := http.NewServeMux()
	mux.Handle("GET /v1/gateway/usage", g.selfUsage(name))
	mux.Handle("/", h)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	g.servers = append(g.servers, server{drain: hs.Shutdown, close: hs.Close})
	g.addr = ln.Addr().String()
	gln, err := net.Listen("tcp", c.GRPCAddress)
	if err != nil {
		return fmt.Errorf("gateway: listening for gRPC on %s: %w", c.GRPCAddress, err)
	}
	gs := grpc.NewServer()
	gatewaypb.RegisterGatewayServer(gs, transport.GRPCServer(g, transport.GRPCOptions{Logger: log,
		Auth: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			auth := ""
			if v := md.Get("authorization"); len(v) > 0 {
				auth = v[0]
			}
			return name(ctx, auth)
		}}))
	go func() { _ = gs.Serve(gln) }()
	g.servers = append(g.servers, server{
		drain: func(ctx context.Context) error {
			done := make(chan struct{})
			go func() { gs.GracefulStop(); close(done) }()
			select {
			case <-done:
				return nil
			case <-ctx.Done():
				gs.Stop()
				return ctx.Err()
			}
		},
		close: func() error { gs.Stop(); return nil }})
	g.grpcAddr = gln.Addr().String()
	log.Info("gateway listening", "http", g.addr, "grpc", g.grpcAddr, "models", g.router.Models())
	return nil
}

// server is one of the gateway's listeners: drain stops taking calls
// and waits (within ctx) for those running to end; close cuts them.
type server struct {
	drain func(context.Context) error
	close func() error
}

// Drain stops the gateway's transports from taking calls and lets the
// running ones finish, for at most call_timeout (and ctx): a graceful
// stop does not cut an answer under way. The channel is closed when they
// have, or the bound is reached and the rest are cut.
func (g *Gateway) Drain(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if len(g.servers) == 0 {
		close(done)
		return done
	}
	bound := duration(g.cfg.CallTimeout)
	if bound <= 0 {
		bound = drainDefault
	}
	dctx, cancel := context.WithTimeout(ctx, bound)
	servers := g.servers
	go func() {
		defer close(done)
		defer cancel()
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.drain(dctx); err != nil {
					g.log.Warn("gateway calls still running at the end of the stop's bound were cut", "error", err)
					_ = s.close()
				}
			}()
		}
		wg.Wait()
	}()
	return done
}

// drainDefault bounds the drain without a call_timeout (the router's
// default call timeout).
const drainDefault = 2 * time.Minute

// Cut closes the transports' listeners, cutting the calls still running
// on them (a stop whose own bound ended before Drain's).
func (g *Gateway) Cut() {
	for _, s := range g.servers {
		_ = s.close()
	}
}

// Close closes the router and forgets the listeners: no call starts here
// again. Call it after Drain's channel closed, or after Cut.
func (g *Gateway) Close() {
	g.servers = nil
	g.router.Close()
}

// Stop waits until the last charges are sent to the log, once the stop
// channel given to Start closed, and hands this server's share of the
// limits back to the leader when no call runs here any more: call it
// before raft stops. It returns at once if Start did not get as far as
// the ledger.
func (g *Gateway) Stop() {
	if g.ledgerDone != nil {
		<-g.ledgerDone
		g.lease.leave()
	}
}

// Addr and GRPCAddr are the gateway's listeners ("" until they listen).
func (g *Gateway) Addr() string     { return g.addr }
func (g *Gateway) GRPCAddr() string { return g.grpcAddr }
