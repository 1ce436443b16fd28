package gemini

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// Stream sends req to streamGenerateContent?alt=sse and returns the
// answer's chunks as its events bring them: each event is a whole
// GenerateContentResponse holding the next text, whole function calls,
// and usageMetadata so far. The stream ends well at the end of the body
// after an event with a finishReason; a body that ends without one, is
// cut, stalls for StallTimeout, holds a malformed event or an error event
// ends with an Err chunk carrying the usage reported so far. A refusal,
// or no answer headers within Timeout, is returned at once.
func (a *Adapter) Stream(ctx context.Context, req gateway.Request) (<-chan gateway.Chunk, error) {
	body, err := requestBody(req)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(ctx)
	headers := time.AfterFunc(a.timeout, cancel)
	resp, err := a.do(sctx, http.MethodPost, a.method(req.Model, "streamGenerateContent")+"?alt=sse", body)
	if !headers.Stop() {
		cancel()
		if err == nil {
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return nil, translate.TransportError(ctx, "sending request", ctx.Err())
		}
		return nil, &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("no answer headers within %s", a.timeout)}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	ch := make(chan gateway.Chunk)
	go func() {
		defer close(ch)
		defer cancel()
		defer resp.Body.Close()
		body := translate.NewStallReader(resp.Body, a.stallTimeout, cancel)
		defer body.Stop()
		s := &stream{ctx: ctx, ch: ch, body: body}
		last := s.read(translate.NewSSEReader(body, maxEvent))
		switch {
		case last.Err == nil:
		case ctx.Err() != nil:
			last = gateway.Chunk{Err: fmt.Errorf("streaming: %w", ctx.Err())}
		case body.Stalled():
			last = gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("stream stalled: no byte for %s", a.stallTimeout)}}
		}
		if last.Err != nil {
			a.log.Warn("stream failed", "model", req.Model, "error", last.Err)
			if s.usage != nil {
				u := s.usage.usage()
				last.Usage = &u // what Gemini reported before it failed: charged
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
	ctx  context.Context
	ch   chan<- gateway.Chunk
	body *translate.StallReader

	id, model, reason string
	calls             int
	usage             *usageMetadata
}

// read sends each event's text and function calls, and returns the
// stream's last chunk: Done, or Err.
func (s *stream) read(r *translate.SSEReader) gateway.Chunk {
	for {
		data, err := r.Next()
		switch {
		case errors.Is(err, io.EOF) && s.reason != "":
			u := s.usage.usage()
			return gateway.Chunk{Done: true, FinishReason: finishReason(s.reason, s.calls > 0), Usage: &u, ID: s.id, Model: s.model}
		case errors.Is(err, io.EOF):
			return gateway.Chunk{Err: serverError("stream ended without a finishReason")}
		case errors.Is(err, io.ErrUnexpectedEOF):
			return gateway.Chunk{Err: serverError("stream cut inside an event")}
		case errors.Is(err, translate.ErrEventTooLong):
			return gateway.Chunk{Err: serverError("%v", err)}
		case err != nil:
			return gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindNetwork, Message: fmt.Sprintf("reading stream: %v", err)}}
		}
		var ev generateResponse
		if err := json.Unmarshal(data, &ev); err != nil {
			return gateway.Chunk{Err: serverError("malformed stream event: %v", err)}
		}
		if ev.Error != nil {
			return gateway.Chunk{Err: ev.Error.providerError(0, nil)}
		}
		if !s.event(&ev) {
			return gateway.Chunk{Err: s.ctx.Err()}
		}
	}
}

// event sends what one event adds; false when the caller is gone.
func (s *stream) event(ev *generateResponse) bool {
	if ev.ResponseID != "" {
		s.id = ev.ResponseID
	}
	if ev.ModelVersion != "" {
		s.model = ev.ModelVersion
	}
	var c gateway.Chunk
	if ev.UsageMetadata != nil {
		s.usage = ev.UsageMetadata
		u := s.usage.usage()
		c.Usage = &u
	}
	if cand := ev.first(); cand != nil {
		for _, p := range cand.Content.Parts {
			switch {
			case p.Thought:
			case p.FunctionCall != nil:
				tc := p.FunctionCall.toolCall(s.calls, p.ThoughtSignature)
				c.ToolCalls = append(c.ToolCalls, gateway.ToolCallDelta{Index: s.calls, ID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
				s.calls++
			case p.Text != nil:
				c.Delta += *p.Text
			}
		}
		if cand.FinishReason != "" {
			s.reason = cand.FinishReason
		}
	} else if ev.PromptFeedback != nil && ev.PromptFeedback.BlockReason != "" {
		s.reason = "SAFETY"
	}
	if c.Delta == "" && len(c.ToolCalls) == 0 && c.Usage == nil {
		return true
	}
	s.body.Pause()
	defer s.body.Resume()
	select {
	case s.ch <- c:
		return true
	case <-s.ctx.Done():
		return false
	}
}
