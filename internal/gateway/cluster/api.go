package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"

	"github.com/stickyd/stickyd/internal/api"
	"github.com/stickyd/stickyd/internal/gateway"
)

// Routes adds the gateway's admin routes: the cost counters, the
// deployments' health, the keys and tenants for operators, and the
// leader's side of a forwarded call. wrap turns a handler that returns an
// error into the admin API's. A nil Gateway (an agent without a gateway
// block) adds none.
func (g *Gateway) Routes(mux *http.ServeMux, wrap func(func(http.ResponseWriter, *http.Request) error) http.HandlerFunc) {
	if g == nil {
		return
	}
	mux.HandleFunc("GET /v1/gateway/usage", wrap(func(w http.ResponseWriter, r *http.Request) error {
		c, source := g.usage(r.Context())
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
		if !g.srv.Raft().IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		if key := r.URL.Query().Get("key"); key != "" {
			u := g.keyUsage(g.ledger.Counters(), key, g.ledger.HeldIn)
			u.Source = "leader"
			writeJSONTo(w, http.StatusOK, u)
			return nil
		}
		writeJSONTo(w, http.StatusOK, g.ledger.Counters())
		return nil
	}))
	mux.HandleFunc("GET /v1/internal/gateway/applied", wrap(g.serveApplied))
	g.accessRoutes(mux, wrap)
	// Calls run where they arrive: each server keeps its own view of the
	// deployments' health and its own share of each model's slots.
	mux.HandleFunc("GET /v1/gateway/health", wrap(func(w http.ResponseWriter, r *http.Request) error {
		writeJSONTo(w, http.StatusOK, g.router.Health())
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/complete", wrap(func(w http.ResponseWriter, r *http.Request) error {
		call, err := readCall(r)
		if err != nil {
			return err
		}
		if !g.srv.Raft().IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		resp, err := g.completeHere(r.Context(), call)
		if err != nil {
			return &api.Error{Status: gatewayStatus(err), Message: gateway.EncodeFailure(err)}
		}
		writeJSONTo(w, http.StatusOK, resp)
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/lease", wrap(func(w http.ResponseWriter, r *http.Request) error {
		var ask leaseAsk
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&ask); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: "decoding the renewal: " + err.Error()}
		}
		if ask.Server == "" || ask.Process == "" {
			return &api.Error{Status: http.StatusBadRequest, Message: "a renewal names its server and its process"}
		}
		grant, err := g.leaseFor(ask)
		switch {
		case errors.Is(err, errNoShares):
			return &api.Error{Status: http.StatusNotFound, Message: err.Error()}
		case err != nil:
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		writeJSONTo(w, http.StatusOK, grant)
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/reserve", wrap(func(w http.ResponseWriter, r *http.Request) error {
		// Decoded as encoding/json would (go-json-experiment's v1
		// options), in less than half its time: the leader reads a
		// batch of every server's for each of their calls.
		var items []remoteItem
		if err := jsonv2.UnmarshalRead(io.LimitReader(r.Body, 16<<20), &items, jsonv1.DefaultOptionsV1()); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: "decoding the reservations: " + err.Error()}
		}
		if !g.srv.Raft().IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		// The limits first: a call they refuse reserves nothing.
		ans := remoteAnswer{Errors: make([]string, len(items))}
		g.limitKeeper.take(items, &ans)
		g.ledger.reserveFor(r.Context(), items, &ans)
		writeJSONTo(w, http.StatusOK, ans)
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/embed", wrap(func(w http.ResponseWriter, r *http.Request) error {
		var call gateway.EmbedCall
		if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&call); err != nil {
			return &api.Error{Status: http.StatusBadRequest, Message: "decoding the call: " + err.Error()}
		}
		if !g.srv.Raft().IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		out, err := g.embedHere(r.Context(), call)
		if err != nil {
			return &api.Error{Status: gatewayStatus(err), Message: gateway.EncodeFailure(err)}
		}
		writeJSONTo(w, http.StatusOK, out)
		return nil
	}))
	mux.HandleFunc("POST /v1/internal/gateway/stream", wrap(func(w http.ResponseWriter, r *http.Request) error {
		call, err := readCall(r)
		if err != nil {
			return err
		}
		if !g.srv.Raft().IsLeader() {
			return &api.Error{Status: http.StatusMisdirectedRequest, Message: "not the leader"}
		}
		ch, err := g.streamHere(r.Context(), call)
		if err != nil {
			return &api.Error{Status: gatewayStatus(err), Message: gateway.EncodeFailure(err)}
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		for c := range ch {
			line := wireChunk{Chunk: c}
			if c.Err != nil {
				line.Error, line.Kind = c.Err.Error(), string(gateway.KindOf(c.Err))
				line.Failure = gateway.EncodeFailure(c.Err)
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

// usage is the cost counters as the leader's ledger has them, every
// finished call counted ("leader"); when the leader cannot be asked, this
// server's replica, which lags the leader by at most the charges' batch
// ("replica").
func (g *Gateway) usage(ctx context.Context) (gateway.Counters, string) {
	if g.srv.Raft().IsLeader() {
		return g.ledger.Counters(), "leader"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if addr, id := g.srv.Raft().Leader(); addr != "" {
		if admin := g.srv.AdminOf(id, addr); admin != "" {
			var c gateway.Counters
			if err := g.call(ctx, http.MethodGet, admin, "/v1/internal/gateway/usage", &c); err == nil {
				return c, "leader"
			}
		}
	}
	return g.maps.GatewayCounters(), "replica"
}

// call calls another agent's admin API and decodes its JSON answer into
// out.
func (g *Gateway) call(ctx context.Context, method, addr, path string, out any) error {
	b, err := g.srv.Fetch(ctx, method, addr, path, nil)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Sessions are the named sessions' counters with every charge taken on
// this server counted (the people's gateway cost, in the admin API and
// the monitor).
func (g *Gateway) Sessions(names iter.Seq[string]) map[string]gateway.Tally {
	return g.ledger.Sessions(names)
}

// wireChunk is a chunk on the leader-to-follower stream.
type wireChunk struct {
	gateway.Chunk
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	// Failure is the error as gateway.EncodeFailure words it (what an
	// older leader does not send: Error and Kind then do).
	Failure string `json:"failure,omitempty"`
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
	case errors.Is(err, gateway.ErrQueueFull), errors.Is(err, gateway.ErrBudget), errors.Is(err, gateway.ErrRateLimit):
		return http.StatusTooManyRequests
	case errors.Is(err, gateway.ErrModelNotAllowed):
		return http.StatusForbidden
	case errors.Is(err, gateway.ErrQueueTimeout):
		return http.StatusGatewayTimeout
	case errors.As(err, &pe) && (pe.Kind == gateway.KindBadRequest || pe.Kind == gateway.KindUnsupported):
		return http.StatusBadRequest
	}
	return http.StatusBadGateway
}

// forwardStream streams a call through the leader.
func (g *Gateway) forwardStream(ctx context.Context, call gateway.Call) (<-chan gateway.Chunk, error) {
	body, err := json.Marshal(call)
	if err != nil {
		return nil, err
	}
	var resp *http.Response
	for deadline := time.Now().Add(electionWait); ; {
		admin, err := g.leaderAdmin(ctx)
		if err != nil {
			return nil, err
		}
		req, err := g.srv.AdminRequest(ctx, http.MethodPost, admin, "/v1/internal/gateway/stream", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		resp, err = g.srv.StreamClient().Do(req)
		if err != nil {
			return nil, fmt.Errorf("%w: reaching the leader: %v", gateway.ErrNoDeployment, err)
		}
		if resp.StatusCode != http.StatusMisdirectedRequest || time.Now().After(deadline) {
			break
		}
		// Deposed since this server last heard: to the new leader.
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		_ = json.Unmarshal(b, &e)
		return nil, refused(resp.StatusCode, e.Error)
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
				if err, ok := gateway.DecodeFailure(wc.Failure); ok {
					c.Err = err
				}
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

func writeJSONTo(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
