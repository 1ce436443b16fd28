package openai

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The causes with which the adapter cancels a stream's request, and the
// reader's own failure.
var (
	errHeaderTimeout = errors.New("no answer headers in time")
	errStalled       = errors.New("stream stalled")
	errLineTooLong   = fmt.Errorf("stream line longer than %d bytes", maxLine)
)

// Stream sends req with "stream": true and include_usage, and returns the
// answer's chunks as server-sent events bring them. Errors before the
// first byte of the answer (a refusal, no connection) are returned as
// from Complete; after that the last chunk carries Done or Err (see
// gateway.Adapter). The stream's goroutine ends, and the channel closes,
// when the stream ends or ctx is cancelled.
func (a *Adapter) Stream(ctx context.Context, req gateway.Request) (<-chan gateway.Chunk, error) {
	body, usageAsked, err := a.requestBody(req, true)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancelCause(ctx)
	headers := time.AfterFunc(a.timeout, func() { cancel(errHeaderTimeout) })
	resp, err := a.do(sctx, http.MethodPost, a.url("/chat/completions", req.Model), "text/event-stream", body)
	fired := !headers.Stop()
	if err != nil || fired {
		if err == nil {
			resp.Body.Close()
		}
		cancel(nil)
		var pe *gateway.ProviderError
		if fired && ctx.Err() == nil && !(errors.As(err, &pe) && pe.Status != 0) {
			return nil, &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("no answer within %v", a.timeout)}
		}
		return nil, err
	}

	ch := make(chan gateway.Chunk)
	s := &stream{
		log:          a.log.With("model", req.Model),
		stallTimeout: a.stallTimeout,
		ctx:          ctx,
		sctx:         sctx,
		cancel:       cancel,
		body:         resp.Body,
		ch:           ch,
		native:       native(req),
		usageAsked:   usageAsked,
	}
	go s.run()
	return ch, nil
}

// stream reads one streamed answer; its run goroutine owns every field.
type stream struct {
	log          hclog.Logger
	stallTimeout time.Duration
	ctx          context.Context // the caller's
	sctx         context.Context // the request's: ctx, or the adapter's cancel
	cancel       context.CancelCauseFunc
	body         io.ReadCloser
	ch           chan<- gateway.Chunk
	stall        *time.Timer // cancels sctx with errStalled
	line         []byte      // scratch for lines longer than the read buffer
	// native passes each event on as it came (the caller speaks this
	// API), but the usage chunk the adapter asked for unless usageAsked.
	native, usageAsked bool

	// What the chunks said so far.
	id, model, finish string
	usage             *gateway.Usage
}

// run reads the stream to its end, then closes the body and the channel.
func (s *stream) run() {
	defer close(s.ch)
	defer s.cancel(nil)
	defer s.body.Close()
	s.stall = time.AfterFunc(s.stallTimeout, func() { s.cancel(errStalled) })
	defer s.stall.Stop()

	r := bufio.NewReaderSize(activityReader{s.body, s.stall, s.stallTimeout}, 64<<10)
	if err := s.read(r); err != nil {
		s.fail(err)
	}
}

// read parses server-sent events (data lines up to a blank line;
// comments and other fields ignored) until [DONE] or the caller leaves,
// which return nil, or a failure.
func (s *stream) read(r *bufio.Reader) error {
	var data []byte
	pending := false // the current event has a data line
	for {
		line, err := s.readLine(r)
		if err == io.EOF && pending {
			// The last event lacks its blank line: take it anyway.
			if done, err := s.event(data); done || err != nil {
				return err
			}
			return io.EOF
		}
		if err != nil {
			return err
		}
		if len(line) == 0 {
			if pending {
				if done, err := s.event(data); done || err != nil {
					return err
				}
				data, pending = data[:0], false
			}
			continue
		}
		if line[0] == ':' {
			continue // a comment: a keep-alive
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" {
			continue // event:, id:, retry:
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if pending {
			data = append(data, '\n')
		}
		if len(data)+len(value) > maxLine {
			return errLineTooLong
		}
		data = append(data, value...)
		pending = true
	}
}

// event handles one event's data. done is true once the stream is over
// for this reader: [DONE] handled, or the caller gone.
func (s *stream) event(data []byte) (done bool, err error) {
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		s.done()
		return true, nil
	}
	var c chatChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return false, serverError("malformed stream chunk: %v", err)
	}
	if hasError(c.Error) {
		e, _ := errorObject(c.Error)
		return false, &gateway.ProviderError{Kind: gateway.KindServer, Type: e.ident(), Message: e.Message}
	}
	if c.ID != "" {
		s.id = c.ID
	}
	if c.Model != "" {
		s.model = c.Model
	}
	if c.Usage != nil {
		u := c.Usage.usage()
		s.usage = &u
	}
	var out gateway.Chunk
	for _, choice := range c.Choices {
		if choice.Index != 0 {
			continue
		}
		if choice.FinishReason != "" {
			s.finish = choice.FinishReason
		}
		out.Delta = choice.Delta.Content
		for _, tc := range choice.Delta.ToolCalls {
			out.ToolCalls = append(out.ToolCalls, gateway.ToolCallDelta{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
	}
	if s.native && (len(c.Choices) > 0 || s.usageAsked || c.Usage == nil) {
		// An event with no choice is the usage chunk: passed on only if
		// the caller asked for it.
		out.Native = &gateway.NativeEvent{Data: bytes.Clone(data)}
	}
	if out.Delta == "" && len(out.ToolCalls) == 0 && out.Native == nil {
		return false, nil
	}
	return !s.send(out), nil
}

// done sends the last chunk of a stream that ended well.
func (s *stream) done() {
	var u gateway.Usage
	if s.usage != nil {
		u = *s.usage
	} else {
		// The server ignored include_usage: the call is counted as free.
		s.log.Warn("stream ended without usage", "id", s.id)
	}
	s.send(gateway.Chunk{Done: true, FinishReason: s.finish, Usage: &u, ID: s.id, Model: s.model})
}

// fail ends a stream that failed midway with an Err chunk.
func (s *stream) fail(err error) {
	if cerr := s.ctx.Err(); cerr != nil {
		// The caller cancelled or timed out: the channel just closes, but
		// a reader still waiting on it learns of a deadline.
		if cerr == context.DeadlineExceeded {
			select {
			case s.ch <- gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindTimeout, Message: "stream: " + cerr.Error()}}:
			default:
			}
		}
		return
	}
	var pe *gateway.ProviderError
	switch {
	case errors.As(err, &pe):
	case context.Cause(s.sctx) == errStalled:
		pe = &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("stream stalled: no data for %v", s.stallTimeout)}
	case err == io.EOF:
		pe = serverError("stream ended before [DONE]")
	case errors.Is(err, io.ErrUnexpectedEOF):
		pe = serverError("stream cut: %v", err)
	case err == errLineTooLong:
		pe = serverError("%v", err)
	default:
		pe = serverError("reading stream: %v", err)
	}
	s.log.Warn("stream failed", "id", s.id, "kind", pe.Kind, "error", pe.Message)
	// The usage a server reported before failing (one that sends it on
	// every chunk, as vLLM's continuous_usage_stats does): the gateway
	// charges it.
	s.send(gateway.Chunk{Err: pe, Usage: s.usage})
}

// send hands c to the caller; false when the caller is gone. The stall
// timer is paused meanwhile: a slow reader is not a stalled provider.
func (s *stream) send(c gateway.Chunk) bool {
	s.stall.Stop()
	select {
	case s.ch <- c:
		s.stall.Reset(s.stallTimeout)
		return true
	case <-s.ctx.Done():
		return false
	}
}

// readLine returns the next line without its end of line (\n or \r\n),
// valid until the next call. It returns io.EOF at the end of the body,
// io.ErrUnexpectedEOF when the body ends mid-line, and errLineTooLong
// past maxLine bytes.
func (s *stream) readLine(r *bufio.Reader) ([]byte, error) {
	frag, err := r.ReadSlice('\n')
	if err == nil {
		return trimEOL(frag), nil // the common case: no copy
	}
	s.line = append(s.line[:0], frag...)
	for err == bufio.ErrBufferFull {
		if len(s.line) > maxLine+2 {
			return nil, errLineTooLong
		}
		frag, err = r.ReadSlice('\n')
		s.line = append(s.line, frag...)
	}
	switch {
	case err == nil:
		if len(s.line) > maxLine+2 {
			return nil, errLineTooLong
		}
		return trimEOL(s.line), nil
	case err == io.EOF && len(s.line) == 0:
		return nil, io.EOF
	case err == io.EOF:
		return nil, io.ErrUnexpectedEOF
	}
	return nil, err
}

func trimEOL(line []byte) []byte {
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r"))
}

// activityReader restarts the stall timer whenever bytes arrive.
type activityReader struct {
	r     io.Reader
	stall *time.Timer
	d     time.Duration
}

func (a activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.stall.Reset(a.d)
	}
	return n, err
}
