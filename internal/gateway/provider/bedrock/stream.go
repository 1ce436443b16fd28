package bedrock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"
	"github.com/aws/smithy-go"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Stream sends req to ConverseStream and returns the answer's chunks as
// the event stream brings them (messageStart, contentBlockStart with a
// toolUse's id and name, contentBlockDelta with text or a toolUse's input,
// contentBlockStop, messageStop with the stop reason, metadata with the
// usage). The stream ends well when the event stream does after
// messageStop; an exception event (throttling, modelStreamError...), a
// cut, an end before messageStop, or no event for StallTimeout ends it
// with an Err chunk carrying the usage reported so far. A refusal, or no
// answer headers within Timeout, is returned at once.
func (a *Adapter) Stream(ctx context.Context, req gateway.Request) (<-chan gateway.Chunk, error) {
	in, err := buildInput(req)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	headers := time.AfterFunc(a.timeout, cancel)
	out, err := a.client.ConverseStream(sctx, in.converseStream())
	if !headers.Stop() {
		cancel()
		if err == nil {
			out.GetStream().Close()
		}
		if ctx.Err() != nil {
			return nil, classify(ctx, "calling ConverseStream", ctx.Err())
		}
		return nil, &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("no answer headers within %s", a.timeout)}
	}
	if err != nil {
		cancel()
		return nil, classify(ctx, "calling ConverseStream", err)
	}
	id, _ := awsmiddleware.GetRequestIDMetadata(out.ResultMetadata)
	ch := make(chan gateway.Chunk)
	go func() {
		defer close(ch)
		defer cancel()
		es := out.GetStream()
		defer es.Close()
		s := &stream{ctx: ctx, ch: ch, tools: map[int32]*toolBlock{}}
		s.stall = time.AfterFunc(a.stallTimeout, func() {
			s.stalled.Store(true)
			cancel()
		})
		defer s.stall.Stop()
		last := s.read(es.Events(), a.stallTimeout)
		if last.Err == nil {
			// The events ended: well only if the event stream did.
			es.Close()
			switch err := es.Err(); {
			case err != nil:
				last = gateway.Chunk{Err: s.streamError(err)}
			case !s.stopped:
				last = gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindServer, Message: "stream ended, or was cut, before messageStop"}}
			default:
				if s.usage == nil {
					a.log.Warn("stream ended without its usage", "model", req.Model)
				}
				u := usage(s.usage)
				last = gateway.Chunk{Done: true, FinishReason: finishReason(s.reason), Usage: &u, ID: id, Model: req.Model}
			}
		}
		switch {
		case last.Err == nil:
		case ctx.Err() != nil:
			last = gateway.Chunk{Err: fmt.Errorf("streaming: %w", ctx.Err())}
		case s.stalled.Load():
			last = gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("stream stalled: no event for %s", a.stallTimeout)}}
		}
		if last.Err != nil {
			a.log.Warn("stream failed", "model", req.Model, "error", last.Err)
			if s.usage != nil {
				u := usage(s.usage)
				last.Usage = &u // what Bedrock reported before the failure: charged
			}
		}
		select {
		case ch <- last:
		case <-ctx.Done():
		}
	}()
	return ch, nil
}

// stream reads one streamed answer; the Stream goroutine owns it.
type stream struct {
	ctx     context.Context
	ch      chan<- gateway.Chunk
	stall   *time.Timer
	stalled atomic.Bool

	tools   map[int32]*toolBlock // by content block index
	calls   int
	stopped bool
	reason  types.StopReason
	usage   *types.TokenUsage
}

// toolBlock is a toolUse block of a stream: its place among the answer's
// tool calls, and whether it sent input.
type toolBlock struct {
	index int
	input bool
}

// read sends the events' text and tool-call pieces until the events end
// (a zero chunk: the caller looks at the stream's error) or the caller
// leaves (an Err chunk).
func (s *stream) read(events <-chan types.ConverseStreamOutput, stallTimeout time.Duration) gateway.Chunk {
	for ev := range events {
		s.stall.Reset(stallTimeout)
		var c gateway.Chunk
		switch e := ev.(type) {
		case *types.ConverseStreamOutputMemberContentBlockStart:
			if tu, ok := e.Value.Start.(*types.ContentBlockStartMemberToolUse); ok {
				tb := &toolBlock{index: s.calls}
				s.calls++
				s.tools[aws.ToInt32(e.Value.ContentBlockIndex)] = tb
				c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, ID: aws.ToString(tu.Value.ToolUseId), Name: aws.ToString(tu.Value.Name)}}
			}
		case *types.ConverseStreamOutputMemberContentBlockDelta:
			switch d := e.Value.Delta.(type) {
			case *types.ContentBlockDeltaMemberText:
				c.Delta = d.Value
			case *types.ContentBlockDeltaMemberToolUse:
				if tb := s.tools[aws.ToInt32(e.Value.ContentBlockIndex)]; tb != nil && aws.ToString(d.Value.Input) != "" {
					tb.input = true
					c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, Arguments: aws.ToString(d.Value.Input)}}
				}
			}
		case *types.ConverseStreamOutputMemberContentBlockStop:
			if tb := s.tools[aws.ToInt32(e.Value.ContentBlockIndex)]; tb != nil && !tb.input {
				c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, Arguments: "{}"}}
			}
		case *types.ConverseStreamOutputMemberMessageStop:
			s.stopped, s.reason = true, e.Value.StopReason
		case *types.ConverseStreamOutputMemberMetadata:
			if e.Value.Usage != nil {
				s.usage = e.Value.Usage
				u := usage(s.usage)
				c.Usage = &u
			}
		}
		if c.Delta == "" && len(c.ToolCalls) == 0 && c.Usage == nil {
			continue
		}
		s.stall.Stop() // a slow reader is not a stalled provider
		select {
		case s.ch <- c:
			s.stall.Reset(stallTimeout)
		case <-s.ctx.Done():
			return gateway.Chunk{Err: s.ctx.Err()}
		}
	}
	return gateway.Chunk{}
}

// streamError classifies the event stream's error: an exception event by
// its code, anything else (a message cut short, a broken frame) as a
// broken answer.
func (s *stream) streamError(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return classify(s.ctx, "streaming", err)
	}
	return &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("stream cut: %v", err)}
}
