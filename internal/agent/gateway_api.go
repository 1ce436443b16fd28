package agent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/gatewaypb"
	"github.com/stickyd/stickyd/internal/gateway/transport"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/internal/supervisor"
)

var randRead = rand.Read

// gatewayRoutes adds the gateway's admin routes: the cost counters and the
// deployments' health for operators, and the leader's side of a forwarded
// call.
func (a *Agent) gatewayRoutes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	if a.gw == nil {
		return
	}
	mux.HandleFunc("GET /v1/gateway/usage", wrap(func(w http.ResponseWriter, r *http.Request) error {
		c, source := a.gatewayUsage(r.Context())
		q := r.URL.Query()
		if s := q.Get("session"); s != "" {
			c.Sessions = map[string]gateway.Tally{s: c.Sessions[s]}
		}
		if k := q.Get("key"); k != "" {
			c.Keys = map[string]gateway.Tally{k: c.Keys[k]}
		}
		writeJSONTo(w, http.StatusOK, gateway.UsageAnswer{Counters: c, Source: source})
		return nil
	}))
	mux.HandleFunc("GET /v1/internal/gateway/usage", wrap(func(w http.ResponseWriter, r *http.Request) error {
		if !a.raft.IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		writeJSONTo(w, http.StatusOK, a.gw.ledger.Counters())
		return nil
	}))
	mux.HandleFunc("GET /v1/gateway/health", wrap(func(w http.ResponseWriter, r *http.Request) error {
		if !a.raft.IsLeader() {
			admin, err := a.gw.leaderAdmin(r.Context())
			if err != nil {
				return err
			}
			b, err := a.fetch(r.Context(), http.MethodGet, admin, "/v1/gateway/health", nil)
			if err != nil {
				return err
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(b)
			return nil
		}
		writeJSONTo(w, http.StatusOK, a.gw.router.Health())
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/complete", wrap(func(w http.ResponseWriter, r *http.Request) error {
		call, err := readCall(r)
		if err != nil {
			return err
		}
		if !a.raft.IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		resp, err := a.gw.router.Complete(r.Context(), call)
		if err != nil {
			return &api.Error{Status: gatewayStatus(err), Message: err.Error()}
		}
		writeJSONTo(w, http.StatusOK, resp)
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/stream", wrap(func(w http.ResponseWriter, r *http.Request) error {
		call, err := readCall(r)
		if err != nil {
			return err
		}
		if !a.raft.IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		ch, err := a.gw.router.Stream(r.Context(), call)
		if err != nil {
			return &api.Error{Status: gatewayStatus(err), Message: err.Error()}
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		for c := range ch {
			line := wireChunk{Chunk: c}
			if c.Err != nil {
				line.Error, line.Kind = c.Err.Error(), string(gateway.KindOf(c.Err))
			}
			if err := enc.Encode(line); err != nil {
				return nil // the follower left; the router sees the context end
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		return nil
	}))
}

// gatewayUsage is the cost counters as the leader's ledger has them, every
// finished call counted ("leader"); when the leader cannot be asked, this
// server's replica, which lags the leader by at most the charges' batch
// ("replica").
func (a *Agent) gatewayUsage(ctx context.Context) (gateway.Counters, string) {
	if a.raft.IsLeader() {
		return a.gw.ledger.Counters(), "leader"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if addr, _ := a.raft.Leader(); addr != "" {
		if admin := a.peers.adminOf(addr); admin != "" {
			var c gateway.Counters
			if err := a.call(ctx, http.MethodGet, admin, "/v1/internal/gateway/usage", nil, &c); err == nil {
				return c, "leader"
			}
		}
	}
	return a.fsm.GatewayCounters(), "replica"
}

// wireChunk is a chunk on the leader-to-follower stream.
type wireChunk struct {
	gateway.Chunk
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

func readCall(r *http.Request) (gateway.Call, error) {
	var call gateway.Call
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&call); err != nil {
		return call, &api.Error{Status: http.StatusBadRequest, Message: "decoding the call: " + err.Error()}
	}
	return call, nil
}

// gatewayStatus is the HTTP status of a gateway error.
func gatewayStatus(err error) int {
	var pe *gateway.ProviderError
	switch {
	case errors.Is(err, gateway.ErrUnknownModel), errors.Is(err, gateway.ErrNoJob):
		return http.StatusNotFound
	case errors.Is(err, gateway.ErrQueueFull), errors.Is(err, gateway.ErrBudget):
		return http.StatusTooManyRequests
	case errors.Is(err, gateway.ErrQueueTimeout):
		return http.StatusGatewayTimeout
	case errors.As(err, &pe) && pe.Kind == gateway.KindBadRequest:
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

// forwardStream streams a call through the leader.
func (g *gatewayNode) forwardStream(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	admin, err := g.leaderAdmin(ctx)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(call)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.a.adminURL(admin)+"/v1/internal/gateway/stream", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Stickyd-Token", g.a.token)
	resp, err := g.a.streamClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: reaching the leader: %v", gateway.ErrNoDeployment, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = json.Unmarshal(b, &e)
		return nil, gatewayError(&remoteErr{status: resp.StatusCode, err: errors.New(e.Error)})
	}
	out := make(chan gateway.Chunk, 16)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var wc wireChunk
			if err := json.Unmarshal(sc.Bytes(), &wc); err != nil {
				out <- gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindServer, Message: "a broken line from the leader"}}
				return
			}
			c := wc.Chunk
			if wc.Error != "" {
				c.Err = &gateway.ProviderError{Kind: gateway.ErrorKind(wc.Kind), Message: wc.Error}
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
			if c.Done || c.Err != nil {
				return
			}
		}
		out <- gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindServer, Message: "the leader's stream ended early"}}
	}()
	return out, nil
}

// streamClient makes calls that may last as long as an answer streams.
func (a *Agent) streamClient() *http.Client { return &http.Client{Transport: a.http.Transport} }

func writeJSONTo(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// serveGateway serves the gateway's transports: HTTP (async REST and the
// OpenAI-compatible API) and gRPC, with the API keys as bearer tokens.
func (a *Agent) serveGateway() error {
	g := a.cfg.Gateway
	keys := map[string]string{} // key → name
	for name, key := range g.APIKeys {
		keys[key] = name
	}
	name := func(auth string) (string, error) {
		if len(keys) == 0 {
			return "", nil
		}
		tok, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			return "", errors.New("an API key is required: Authorization: Bearer <key>")
		}
		for key, n := range keys {
			if subtle.ConstantTimeCompare([]byte(key), []byte(tok)) == 1 {
				return n, nil
			}
		}
		return "", errors.New("the API key is not known")
	}
	log := a.log.Named("gateway")
	h := transport.HTTPHandler(a.gw, transport.HTTPOptions{Logger: log,
		Auth: func(r *http.Request) (string, error) { return name(r.Header.Get("Authorization")) }})
	ln, err := net.Listen("tcp", g.Address)
	if err != nil {
		return fmt.Errorf("gateway: listening on %s: %w", g.Address, err)
	}
	hs := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	a.gwServers = append(a.gwServers, gwServer{drain: hs.Shutdown, close: hs.Close})
	a.gwAddr = ln.Addr().String()
	gln, err := net.Listen("tcp", g.GRPCAddress)
	if err != nil {
		return fmt.Errorf("gateway: listening for gRPC on %s: %w", g.GRPCAddress, err)
	}
	gs := grpc.NewServer()
	gatewaypb.RegisterGatewayServer(gs, transport.GRPCServer(a.gw, transport.GRPCOptions{Logger: log,
		Auth: func(ctx context.Context) (string, error) {
			md, _ := metadata.FromIncomingContext(ctx)
			auth := ""
			if v := md.Get("authorization"); len(v) > 0 {
				auth = v[0]
			}
			return name(auth)
		}}))
	go func() { _ = gs.Serve(gln) }()
	a.gwServers = append(a.gwServers, gwServer{
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
	a.gwGRPCAddr = gln.Addr().String()
	log.Info("gateway listening", "http", a.gwAddr, "grpc", a.gwGRPCAddr, "models", a.gw.router.Models())
	return nil
}

// gwServer is one of the gateway's listeners: drain stops taking calls
// and waits (within ctx) for those running to end; close cuts them.
type gwServer struct {
	drain func(context.Context) error
	close func() error
}

// drainGateway stops the gateway's transports from taking calls and lets
// the running ones finish, for at most call_timeout (and ctx): a graceful
// stop does not cut an answer under way. The channel is closed when they
// have, or the bound is reached and the rest are cut.
func (a *Agent) drainGateway(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	if len(a.gwServers) == 0 {
		close(done)
		return done
	}
	bound := duration(a.cfg.Gateway.CallTimeout)
	if bound <= 0 {
		bound = gatewayDrainDefault
	}
	dctx, cancel := context.WithTimeout(ctx, bound)
	servers := a.gwServers
	go func() {
		defer close(done)
		defer cancel()
		var wg sync.WaitGroup
		for _, s := range servers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.drain(dctx); err != nil {
					a.log.Warn("gateway calls still running at the end of the stop's bound were cut", "error", err)
					_ = s.close()
				}
			}()
		}
		wg.Wait()
	}()
	return done
}

// gatewayDrainDefault bounds the drain without a call_timeout (the
// router's default call timeout).
const gatewayDrainDefault = 2 * time.Minute

// GatewayAddr and GatewayGRPCAddr are the gateway's listeners ("" without
// a gateway block).
func (a *Agent) GatewayAddr() string     { return a.gwAddr }
func (a *Agent) GatewayGRPCAddr() string { return a.gwGRPCAddr }

// gatewayCollector publishes the gateway's replicated counters (the total
// and today; sessions are on the API, not here: unbounded labels) and, on
// the leader, each model's slots and each deployment's health.
type gatewayCollector struct {
	a                                            *Agent
	cost, calls, tokens, dayCost                 *prometheus.Desc
	inFlight, queued, capacity, degraded, reqWin *prometheus.Desc
}

func newGatewayCollector(a *Agent) *gatewayCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &gatewayCollector{a: a,
		cost:     d("stickyd_gateway_cost_dollars_total", "What the gateway's answers cost, all sessions and days."),
		calls:    d("stickyd_gateway_calls_total", "Answers charged."),
		tokens:   d("stickyd_gateway_tokens_total", "Tokens charged, by kind (input, cached_input, cache_write, output).", "kind"),
		dayCost:  d("stickyd_gateway_day_cost_dollars", "What today's answers cost (the gateway's day zone).", "day"),
		inFlight: d("stickyd_gateway_in_flight", "Calls of a model running now (leader).", "model"),
		queued:   d("stickyd_gateway_queued", "Calls of a model waiting for a slot (leader).", "model"),
		capacity: d("stickyd_gateway_concurrency_limit", "A model's aggregate concurrency limit.", "model"),
		degraded: d("stickyd_gateway_deployment_degraded", "1 while a deployment is degraded (skipped and probed).", "model", "deployment"),
		reqWin:   d("stickyd_gateway_deployment_failure_ratio", "A deployment's failures over its outcomes in the health window.", "model", "deployment"),
	}
}

func (c *gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.cost, c.calls, c.tokens, c.dayCost, c.inFlight, c.queued, c.capacity, c.degraded, c.reqWin} {
		ch <- d
	}
}

func (c *gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	k := c.a.fsm.GatewayCounters()
	ch <- prometheus.MustNewConstMetric(c.cost, prometheus.CounterValue, float64(k.Total.Micros)/1e6)
	ch <- prometheus.MustNewConstMetric(c.calls, prometheus.CounterValue, float64(k.Total.Calls))
	u := k.Total.Usage
	for kind, n := range map[string]int64{"input": u.Input, "cached_input": u.CachedInput, "cache_write": u.CacheWrite, "output": u.Output} {
		ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.CounterValue, float64(n), kind)
	}
	day := time.Now().In(c.a.gatewayZone()).Format(time.DateOnly)
	ch <- prometheus.MustNewConstMetric(c.dayCost, prometheus.GaugeValue, float64(k.Days[day].Micros)/1e6, day)
	for model, h := range c.a.gw.router.Health() {
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(h.Slots.Capacity), model)
		if !c.a.raft.IsLeader() {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(h.Slots.InFlight), model)
		ch <- prometheus.MustNewConstMetric(c.queued, prometheus.GaugeValue, float64(h.Slots.Queued), model)
		for dep, s := range h.Deployments {
			v, ratio := 0.0, 0.0
			if s.Degraded {
				v = 1
			}
			if s.Requests > 0 {
				ratio = float64(s.Failures) / float64(s.Requests)
			}
			ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.GaugeValue, v, model, dep)
			ch <- prometheus.MustNewConstMetric(c.reqWin, prometheus.GaugeValue, ratio, model, dep)
		}
	}
}

// gatewayZone is the calendar of the day counters.
func (a *Agent) gatewayZone() *time.Location {
	if z := a.cfg.Gateway.DayZone; z != "" {
		if loc, err := time.LoadLocation(z); err == nil {
			return loc
		}
	}
	return time.UTC
}

// people is the supervisor as the admin API and the monitor show it: each
// person with what their calls to the gateway cost (a worker's calls pay
// from the person's session, named by the user).
type people struct{ a *Agent }

func (p people) Users() []placement.UserInfo {
	us := p.a.sup.Users()
	if p.a.gw == nil {
		return us
	}
	tallies := p.a.gw.ledger.Sessions(func(yield func(string) bool) {
		for _, u := range us {
			if !yield(u.User) {
				return
			}
		}
	})
	for i := range us {
		t := tallies[us[i].User]
		us[i].GatewayMicros, us[i].GatewayCalls = t.Micros, t.Calls
	}
	return us
}

func (p people) User(user string) (placement.UserInfo, bool) {
	u, ok := p.a.sup.User(user)
	if ok && p.a.gw != nil {
		t := p.a.gw.ledger.Sessions(func(yield func(string) bool) { yield(user) })[user]
		u.GatewayMicros, u.GatewayCalls = t.Micros, t.Calls
	}
	return u, ok
}

func (p people) Move(ctx context.Context, user, to, reason string) (move.Result, error) {
	return p.a.sup.Move(ctx, user, to, reason)
}

func (p people) MoveToGroup(ctx context.Context, user, group, reason string) (move.Result, error) {
	return p.a.sup.MoveToGroup(ctx, user, group, reason)
}

func (p people) Drain(ctx context.Context, worker string, parallel int, progress func(move.Result, error)) (supervisor.DrainResult, error) {
	return p.a.sup.Drain(ctx, worker, parallel, progress)
}

func (p people) ForgetUser(ctx context.Context, user string) (move.Forgotten, error) {
	return p.a.sup.ForgetUser(ctx, user)
}
