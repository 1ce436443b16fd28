package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The AI gateway's calls from this agent's workers (GatewayCall on their
// channel): the worker names the person who pays, its user key, and the
// call runs through the Gateway like any transport's (the leader runs it, with the
// same limits, failover and accounting), so its cost is the person's. A
// stream's pieces go back as GatewayChunk notices, in order, before the
// request is answered.

// gatewayCallLimit bounds a worker's gateway call on this agent, queueing
// and a long stream included; the router's own limits (queue timeout, call
// timeout, the call's deadline) are usually shorter.
const gatewayCallLimit = 15 * time.Minute

// notifier is a Replier that can also send notices (a *channel.Peer can):
// a stream's chunks are notices.
type notifier interface {
	Notify(env *protocol.Envelope) error
}

// channelEnd is a Replier that says when the worker's channel ended (a
// *channel.Peer does): the worker's calls stop then.
type channelEnd interface {
	Done() <-chan struct{}
}

// FromWorker serves one GatewayCall of worker, answering on r. It runs
// until the call ends, so the agent starts it on its own goroutine: the
// worker's channel reader never waits for a model. gw is nil while the
// gateway starts, and configured false without a gateway block; log is
// the agent's, and stop closes when the agent stops (the call ends then).
func FromWorker(gw *Gateway, configured bool, log hclog.Logger, stop <-chan struct{}, worker string, env *protocol.Envelope, r host.Replier) {
	gc := env.GetGatewayCall()
	if gc == nil {
		return
	}
	if env.Id == 0 {
		log.Warn("a worker sent a gateway call as a notice; nothing to answer it with", "worker", worker)
		return
	}
	refuse := func(code protocol.Error_Code, kind, msg string) {
		_ = r.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_Error{Error: &protocol.Error{Code: code, Message: msg, Kind: kind}}})
	}
	if !configured {
		refuse(protocol.Error_UNAVAILABLE, "", "this agent has no gateway block")
		return
	}
	if gw == nil {
		// The front starts before the gateway: a call may come in between.
		refuse(protocol.Error_UNAVAILABLE, "starting", "the gateway is starting; retry")
		return
	}
	var call gateway.Call
	if err := json.Unmarshal(gc.Call, &call); err != nil {
		refuse(protocol.Error_BAD_REQUEST, string(gateway.KindBadRequest), fmt.Sprintf("decoding the gateway call: %v", err))
		return
	}
	if gc.Session == "" {
		refuse(protocol.Error_BAD_REQUEST, string(gateway.KindBadRequest), "a gateway call needs a session: the person who pays")
		return
	}
	// The worker names who pays; a session inside the JSON is ignored.
	call.Session = gc.Session

	ctx, cancel := context.WithTimeout(context.Background(), gatewayCallLimit)
	defer cancel()
	var ended <-chan struct{}
	if e, ok := r.(channelEnd); ok {
		ended = e.Done()
	}
	go func() {
		select {
		case <-ended: // the worker is gone: nobody reads the answer
		case <-stop: // the agent is stopping
		case <-ctx.Done():
		}
		cancel()
	}()

	if !gc.Stream {
		resp, err := gw.Complete(ctx, call)
		if err != nil {
			refuse(gatewayFailure(err))
			return
		}
		b, err := json.Marshal(resp)
		if err != nil {
			refuse(protocol.Error_INTERNAL, "", fmt.Sprintf("encoding the gateway's answer: %v", err))
			return
		}
		_ = r.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{Response: b}}})
		return
	}

	n, ok := r.(notifier)
	if !ok {
		refuse(protocol.Error_INTERNAL, "", "this host cannot stream to its workers")
		return
	}
	ch, err := gw.Stream(ctx, call)
	if err != nil {
		refuse(gatewayFailure(err))
		return
	}
	var last bool
	var failed error
	for c := range ch {
		gch := &protocol.GatewayChunk{CallId: env.Id, Last: c.Done || c.Err != nil}
		if c.Err != nil {
			failed = c.Err
			_, gch.ErrorKind, gch.Error = gatewayFailure(c.Err)
		}
		if gch.Chunk, err = json.Marshal(c); err != nil {
			failed = fmt.Errorf("encoding a gateway chunk: %w", err)
			gch = &protocol.GatewayChunk{CallId: env.Id, Last: true, Error: failed.Error()}
		}
		if err := n.Notify(&protocol.Envelope{Body: &protocol.Envelope_GatewayChunk{GatewayChunk: gch}}); err != nil {
			// The worker is gone: stop the provider's stream, and drain
			// what is already on its way.
			cancel()
			for range ch {
			}
			return
		}
		last = gch.Last
		if last {
			break
		}
	}
	switch {
	case failed != nil:
		refuse(gatewayFailure(failed))
	case !last:
		// The stream stopped without its last chunk (its context ended).
		if ctx.Err() != nil {
			refuse(gatewayFailure(ctx.Err()))
		} else {
			refuse(protocol.Error_UNAVAILABLE, string(gateway.KindServer), "the stream ended without its last chunk")
		}
	default:
		_ = r.Reply(env.Id, &protocol.Envelope{Body: &protocol.Envelope_GatewayReply{GatewayReply: &protocol.GatewayReply{}}})
	}
	for range ch {
	}
}

// gatewayFailure maps a gateway error to what the worker is told: the
// code (BAD_REQUEST for the call's fault, UNAVAILABLE when retrying may
// work, EXHAUSTED when a budget or quota is spent), the gateway's kind of
// error and the message. Like the transports, it does not pass on a
// provider's own words unless the request was at fault: they may name the
// gateway's provider account.
func gatewayFailure(err error) (protocol.Error_Code, string, string) {
	var pe *gateway.ProviderError
	switch {
	case errors.Is(err, gateway.ErrUnknownModel):
		return protocol.Error_BAD_REQUEST, "unknown_model", err.Error()
	case errors.Is(err, gateway.ErrQueueFull):
		return protocol.Error_UNAVAILABLE, "queue_full", err.Error()
	case errors.Is(err, gateway.ErrQueueTimeout):
		return protocol.Error_UNAVAILABLE, "queue_timeout", err.Error()
	case errors.Is(err, gateway.ErrBudget):
		return protocol.Error_EXHAUSTED, "budget_exceeded", err.Error()
	case errors.Is(err, gateway.ErrNoDeployment):
		return protocol.Error_UNAVAILABLE, "no_deployment", gateway.ErrNoDeployment.Error()
	case errors.Is(err, gateway.ErrInterrupted):
		return protocol.Error_UNAVAILABLE, "interrupted", gateway.ErrInterrupted.Error()
	case errors.As(err, &pe):
		kind := string(pe.Kind)
		switch {
		case pe.Kind == gateway.KindUnsupported:
			return protocol.Error_BAD_REQUEST, kind, pe.Message
		case pe.Kind == gateway.KindBadRequest:
			msg := "the provider refused the request"
			if pe.Message != "" {
				msg += ": " + pe.Message
			}
			return protocol.Error_BAD_REQUEST, kind, msg
		case pe.Retryable():
			return protocol.Error_UNAVAILABLE, kind, "the provider did not answer: " + kind
		case pe.Kind == gateway.KindQuotaExceeded:
			return protocol.Error_EXHAUSTED, kind, "the gateway's quota at the provider is spent"
		case pe.Kind == gateway.KindAuth:
			return protocol.Error_INTERNAL, kind, "the provider refused the gateway's credentials"
		}
		return protocol.Error_INTERNAL, kind, "the provider refused the call: " + kind
	case errors.Is(err, context.DeadlineExceeded):
		return protocol.Error_UNAVAILABLE, string(gateway.KindTimeout), "the call ran out of time"
	case errors.Is(err, context.Canceled):
		return protocol.Error_UNAVAILABLE, "cancelled", "the call was cancelled"
	}
	return protocol.Error_INTERNAL, "internal", err.Error()
}
