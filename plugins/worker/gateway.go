package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The AI gateway (docs/gateway.md) as an app sees it: a call goes to the
// host on the worker's channel and runs on the cluster's gateway, with its
// limits, failover and accounting; its cost is charged to the person whose
// handler made it (their user key; an anonymous connection's own key before
// login). The host needs a gateway block, else every call is refused
// UNAVAILABLE.
//
// A call made from a handler (Message, OpenPage, ServeHTTP) holds that
// person's mailbox while it waits: their later messages and pulls wait
// behind it, though nobody else's do. Keep such calls short (MaxTokens, a
// deadline on ctx), or stream a long answer into the page tree: a pull the
// page already has waiting takes the first pieces at once, and the rest
// arrive as soon as the handler returns. An answer a page needs from the
// start (a summary) can be asked for in OpenPage: it is then in the tree
// the page opens with.

// Gateway calls the AI gateway on behalf of one person. Its methods may be
// used from any goroutine while the worker runs.
type Gateway struct {
	rt      *runtime
	session string
}

// Gateway returns the AI gateway client that charges this connection's
// person (its user key as of this frame: a login takes effect from the
// connection's next frame).
func (s *Session) Gateway() *Gateway { return &Gateway{rt: s.rt, session: s.userKey()} }

// Gateway returns the AI gateway client that charges the page's person.
func (p *Page) Gateway() *Gateway { return p.session.Gateway() }

// GatewayMessage is one turn of a conversation.
type GatewayMessage struct {
	// Role is "system", "user" or "assistant".
	Role    string `json:"role"`
	Content string `json:"content"`
}

// GatewayRequest is a completion request.
type GatewayRequest struct {
	// Model is the gateway's name of the model (its configuration's model
	// block), not a provider's.
	Model    string           `json:"model"`
	Messages []GatewayMessage `json:"messages"`
	// MaxTokens bounds the answer (0: the provider's default).
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// GatewayUsage is what a call consumed, in tokens. Input excludes the
// cached input tokens (served from the provider's prompt cache, billed at
// their own price) and CacheWrite counts input written to that cache
// (billed as input).
type GatewayUsage struct {
	Input       int64 `json:"input_tokens"`
	CachedInput int64 `json:"cached_input_tokens"`
	CacheWrite  int64 `json:"cache_write_tokens,omitempty"`
	Output      int64 `json:"output_tokens"`
}

// GatewayResponse is a whole answer.
type GatewayResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Content string `json:"content"`
	// FinishReason is "stop", "length", "content_filter" or the
	// provider's own word, lower case.
	FinishReason string       `json:"finish_reason"`
	Usage        GatewayUsage `json:"usage"`
	// Provider and Deployment say who served it; CostMicros is what it
	// cost (millionths of a US dollar), as charged to the person.
	Provider   string `json:"provider,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	CostMicros int64  `json:"cost_micros"`
}

// GatewayChunk is one piece of a streamed answer. The last chunk of a
// stream carries Done (with FinishReason and Usage) or Err.
type GatewayChunk struct {
	// Delta is the text this chunk adds.
	Delta        string       `json:"delta,omitempty"`
	Done         bool         `json:"done,omitempty"`
	FinishReason string       `json:"finish_reason,omitempty"`
	Usage        GatewayUsage `json:"usage"`
	// Provider and Deployment name who serves the stream, on its first
	// chunk and its last; CostMicros, on the last, is its cost.
	Provider   string `json:"provider,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	CostMicros int64  `json:"cost_micros,omitempty"`
	// Err ends a stream that failed midway (a *GatewayError, or the
	// channel's or ctx's error).
	Err error `json:"-"`
}

// GatewayError is the gateway's refusal of a call.
type GatewayError struct {
	// Kind is the gateway's word for it: unknown_model, bad_request,
	// budget_exceeded, quota_exceeded, queue_full, queue_timeout,
	// no_deployment, rate_limited, overloaded, server, timeout...
	Kind    string
	Message string
	// Retryable says the same call may succeed later.
	Retryable bool
}

func (e *GatewayError) Error() string {
	if e.Kind == "" {
		return "gateway: " + e.Message
	}
	return fmt.Sprintf("gateway (%s): %s", e.Kind, e.Message)
}

// gatewayCall is the host's gateway.Call as JSON: the request, the
// idempotency key and the deadline (the session travels beside it).
type gatewayCall struct {
	Request        GatewayRequest `json:"request"`
	IdempotencyKey string         `json:"idempotency_key,omitempty"`
	Deadline       time.Time      `json:"deadline,omitzero"`
}

// Complete runs req and returns the whole answer. ctx's deadline bounds
// the call, its wait in the model's queue included.
func (g *Gateway) Complete(ctx context.Context, req GatewayRequest) (GatewayResponse, error) {
	env, err := g.envelope(ctx, req, false)
	if err != nil {
		return GatewayResponse{}, err
	}
	ans, err := g.rt.peer.Call(ctx, env)
	if err != nil {
		return GatewayResponse{}, gatewayErr(err)
	}
	r := ans.GetGatewayReply()
	if r == nil {
		return GatewayResponse{}, fmt.Errorf("calling the gateway: the host answered %T", ans.Body)
	}
	var resp GatewayResponse
	if err := json.Unmarshal(r.Response, &resp); err != nil {
		return GatewayResponse{}, fmt.Errorf("decoding the gateway's answer: %w", err)
	}
	return resp, nil
}

// Stream runs req and returns its answer as it is produced. It returns once
// the first piece has come (a refusal, such as an unknown model or a spent
// budget, is its error). The channel is closed after the last chunk, which
// carries Done or Err; read it to the end, or cancel ctx, which stops the
// stream and closes the channel.
func (g *Gateway) Stream(ctx context.Context, req GatewayRequest) (<-chan GatewayChunk, error) {
	env, err := g.envelope(ctx, req, true)
	if err != nil {
		return nil, err
	}
	st := &gatewayStream{kick: make(chan struct{}, 1)}
	c, err := g.rt.gw.start(g.rt.peer, env, st)
	if err != nil {
		return nil, gatewayErr(err)
	}
	answer := make(chan error, 1)
	go func() {
		_, err := c.Wait(ctx)
		answer <- err
		st.wake()
	}()
	out := make(chan GatewayChunk, 1)
	first := make(chan error, 1)
	go st.pump(ctx, g.rt, env.Id, answer, out, first)
	if err := <-first; err != nil {
		return nil, err
	}
	return out, nil
}

func (g *Gateway) envelope(ctx context.Context, req GatewayRequest, stream bool) (*protocol.Envelope, error) {
	if g.rt == nil || g.rt.peer == nil {
		return nil, errors.New("calling the gateway: not connected to a stickyd host")
	}
	call := gatewayCall{Request: req, IdempotencyKey: newCallKey()}
	if d, ok := ctx.Deadline(); ok {
		call.Deadline = d
	}
	b, err := json.Marshal(call)
	if err != nil {
		return nil, fmt.Errorf("encoding the gateway call: %w", err)
	}
	return &protocol.Envelope{Body: &protocol.Envelope_GatewayCall{GatewayCall: &protocol.GatewayCall{
		Session: g.session, Call: b, Stream: stream}}}, nil
}

// newCallKey names one call: the gateway charges each key once.
func newCallKey() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "wk-" + hex.EncodeToString(b[:])
}

// gatewayErr turns the host's refusal into a *GatewayError.
func gatewayErr(err error) error {
	var re *channel.RemoteError
	if errors.As(err, &re) {
		return &GatewayError{Kind: re.Kind, Message: re.Message, Retryable: re.Code == protocol.Error_UNAVAILABLE}
	}
	return fmt.Errorf("calling the gateway: %w", err)
}

// gatewayStreams routes the chunks of the worker's streams, which arrive
// as notices on the channel, to the streams waiting for them.
type gatewayStreams struct {
	// mu guards byID. It is held while a stream's call is sent, so that
	// its first chunk cannot arrive before the stream is known.
	mu   sync.Mutex
	byID map[uint64]*gatewayStream
}

// start sends env and records st under its id.
func (s *gatewayStreams) start(peer *channel.Peer, env *protocol.Envelope, st *gatewayStream) (*channel.Call, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := peer.Start(env)
	if err != nil {
		return nil, err
	}
	if s.byID == nil {
		s.byID = map[uint64]*gatewayStream{}
	}
	s.byID[env.Id] = st
	return c, nil
}

func (s *gatewayStreams) forget(id uint64) {
	s.mu.Lock()
	delete(s.byID, id)
	s.mu.Unlock()
}

// deliver hands a chunk to its stream; called from the channel's reader,
// it never blocks on the app. A chunk of a forgotten stream is dropped.
func (s *gatewayStreams) deliver(c *protocol.GatewayChunk) {
	s.mu.Lock()
	st := s.byID[c.CallId]
	s.mu.Unlock()
	if st != nil {
		st.push(c)
	}
}

// gatewayStream is one stream's chunks, queued until the app takes them.
type gatewayStream struct {
	mu    sync.Mutex // guards queue
	queue []*protocol.GatewayChunk
	kick  chan struct{} // one token when something arrived
}

func (st *gatewayStream) push(c *protocol.GatewayChunk) {
	st.mu.Lock()
	st.queue = append(st.queue, c)
	st.mu.Unlock()
	st.wake()
}

func (st *gatewayStream) wake() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

func (st *gatewayStream) take() []*protocol.GatewayChunk {
	st.mu.Lock()
	defer st.mu.Unlock()
	q := st.queue
	st.queue = nil
	return q
}

// pump moves the stream's chunks to out until the host answers the call;
// every chunk reaches the worker before that answer does. first gets nil
// with the first piece, or the refusal that came instead. The answer, not
// a chunk, says how the stream ended: a chunk's error is the answer's too.
func (st *gatewayStream) pump(ctx context.Context, rt *runtime, id uint64, answer <-chan error, out chan<- GatewayChunk, first chan<- error) {
	defer close(out)
	defer rt.gw.forget(id)
	started, done := false, false
	var failed *protocol.GatewayChunk
	finish := func(err error) {
		if !started {
			first <- err
			return
		}
		if err != nil {
			select {
			case out <- GatewayChunk{Err: err}:
			case <-ctx.Done():
			}
		}
	}
	answered := false
	var ansErr error
	for {
		for _, pc := range st.take() {
			if pc.Error != "" {
				failed = pc
				continue
			}
			var c GatewayChunk
			if err := json.Unmarshal(pc.Chunk, &c); err != nil {
				finish(fmt.Errorf("decoding a gateway chunk: %w", err))
				return
			}
			if !started {
				started = true
				first <- nil
			}
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
			done = done || c.Done
		}
		if answered {
			switch {
			case ansErr != nil:
				finish(gatewayErr(ansErr))
			case failed != nil:
				finish(&GatewayError{Kind: failed.ErrorKind, Message: failed.Error})
			case !done:
				finish(&GatewayError{Kind: "server", Message: "the stream ended without its last chunk", Retryable: true})
			default:
				finish(nil)
			}
			return
		}
		select {
		case <-st.kick:
		case ansErr = <-answer:
			answered = true // the chunks before it are queued: take them first
		case <-ctx.Done():
			finish(fmt.Errorf("calling the gateway: %w", ctx.Err()))
			return
		}
	}
}
