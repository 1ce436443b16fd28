package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// streamEvent is the data of every event of a Messages stream (one
// struct for all: each type fills only its own fields).
type streamEvent struct {
	Type string `json:"type"`
	// message_start
	Message struct {
		ID    string    `json:"id"`
		Model string    `json:"model"`
		Usage wireUsage `json:"usage"`
	} `json:"message"`
	// content_block_start, _delta and _stop: the block's place
	Index int `json:"index"`
	// content_block_start
	ContentBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
		// tool_use
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"content_block"`
	// content_block_delta (Type, Text, PartialJSON) and message_delta
	// (StopReason)
	Delta struct {
		Type        string `json:"type"`
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		StopReason  string `json:"stop_reason"`
	} `json:"delta"`
	// message_delta: cumulative counts
	Usage wireUsage `json:"usage"`
	// error
	Error wireError `json:"error"`
}

// Stream sends req with "stream": true and returns the answer's chunks as
// they come. A refusal, or no response headers within Timeout, is
// returned at once, as by Complete. Once the stream has started, its last
// chunk carries Done (with the usage, the finish reason, the id and the
// model) or Err, a *gateway.ProviderError: an error event (overloaded_error
// is KindOverloaded), a stream that ends or breaks before message_stop, a
// malformed event or an over-long line (KindServer), no byte for
// StallTimeout (KindTimeout). Cancelling ctx closes the body and the
// channel; a last chunk, if the reader still takes one, then carries an
// error wrapping ctx.Err(). The caller must read the channel until it is
// closed, or cancel ctx: the stream's goroutine waits for one or the other.
func (a *Adapter) Stream(ctx context.Context, req gateway.Request) (<-chan gateway.Chunk, error) {
	mr, err := a.requestBody(req, true)
	if err != nil {
		return nil, err
	}
	// sctx lives as long as the stream; the header timer and the stall
	// watchdog cancel it.
	sctx, cancel := context.WithCancel(ctx)
	hr, err := a.newRequest(sctx, http.MethodPost, messagesPath, mr)
	if err != nil {
		cancel()
		return nil, err
	}
	hr.Header.Set("accept", contentTypeEventStream)
	headerTimer := time.AfterFunc(a.timeout, cancel)
	resp, err := a.client.Do(hr)
	if !headerTimer.Stop() { // it fired: sctx is cancelled
		cancel()
		if err == nil {
			resp.Body.Close()
		}
		if ctx.Err() != nil {
			return nil, transportError(ctx, "sending request", ctx.Err())
		}
		return nil, &gateway.ProviderError{Kind: gateway.KindTimeout,
			Message: fmt.Sprintf("no response headers within %s", a.timeout)}
	}
	if err != nil {
		cancel()
		return nil, transportError(ctx, "sending request", err)
	}
	if resp.StatusCode/100 != 2 {
		defer cancel()
		defer resp.Body.Close()
		return nil, a.statusError(resp)
	}

	ch := make(chan gateway.Chunk)
	go func() {
		defer close(ch)
		defer cancel()
		defer resp.Body.Close()
		body := newStallReader(resp.Body, a.stallTimeout, cancel)
		defer body.stop()

		last, reported := readEvents(ctx, newSSEReader(body, maxEventLineBytes), ch, native(req))
		switch {
		case last.Err == nil:
		case ctx.Err() != nil:
			last = gateway.Chunk{Err: fmt.Errorf("streaming: %w", ctx.Err())}
		case body.stalled.Load():
			last = gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindTimeout,
				Message: fmt.Sprintf("stream stalled: no byte for %s", a.stallTimeout)}}
		}
		if last.Err != nil && reported != (gateway.Usage{}) {
			// What the provider reported before the stream failed (the
			// input at message_start, the output so far): the gateway
			// charges it.
			last.Usage = &reported
		}
		select {
		case ch <- last:
		case <-ctx.Done():
		}
	}()
	return ch, nil
}

// readEvents sends the text and tool-call deltas of the events in r to
// ch, and returns the stream's last chunk: Done at message_stop, or Err,
// with the usage the events reported so far. From message_start on, every
// chunk carries that usage (the input counted at the start, the output at
// the last message_delta), so that a caller who leaves is charged what the
// provider reported. With native, every event is passed on as it came
// (Chunk.Native), message_stop's on the Done chunk. It returns when ctx is
// cancelled too (the Err chunk then says nothing: the caller replaces it).
func readEvents(ctx context.Context, r *sseReader, ch chan<- gateway.Chunk, native bool) (last gateway.Chunk, reported gateway.Usage) {
	var (
		id, model, stopReason string
		usage                 gateway.Usage
		started               bool
		tools                 = map[int]*toolBlock{} // by the block's index
	)
	var sentUsage gateway.Usage
	send := func(c gateway.Chunk) bool {
		if !started {
			return true // nothing before message_start
		}
		if c.Delta == "" && len(c.ToolCalls) == 0 && c.Native == nil && usage == sentUsage {
			return true // a ping, a block's stop: nothing new
		}
		u := usage
		c.Usage, sentUsage = &u, u
		select {
		case ch <- c:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		raw, err := r.next()
		if err != nil {
			return gateway.Chunk{Err: readError(err)}, usage
		}
		var ev streamEvent
		if err := json.Unmarshal(raw.data, &ev); err != nil {
			return gateway.Chunk{Err: &gateway.ProviderError{Kind: gateway.KindServer,
				Message: fmt.Sprintf("malformed %s event: %v", raw.name, err)}}, usage
		}
		typ := ev.Type
		if typ == "" {
			typ = raw.name
		}
		var c gateway.Chunk
		if native {
			c.Native = &gateway.NativeEvent{Event: raw.name, Data: raw.data}
		}
		switch typ {
		case "message_start":
			id, model = ev.Message.ID, ev.Message.Model
			ev.Message.Usage.mergeInto(&usage)
			started = true
		case "content_block_start":
			switch ev.ContentBlock.Type {
			case "text":
				c.Delta = ev.ContentBlock.Text
			case "tool_use":
				tb := &toolBlock{index: len(tools)}
				tools[ev.Index] = tb
				c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, ID: ev.ContentBlock.ID, Name: ev.ContentBlock.Name}}
			}
		case "content_block_delta":
			// Other deltas (thinking_delta, citations_delta...) are not
			// what the gateway's fields carry; a native caller gets them.
			switch ev.Delta.Type {
			case "text_delta":
				c.Delta = ev.Delta.Text
			case "input_json_delta":
				if tb := tools[ev.Index]; tb != nil && ev.Delta.PartialJSON != "" {
					tb.args = true
					c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, Arguments: ev.Delta.PartialJSON}}
				}
			}
		case "content_block_stop":
			if tb := tools[ev.Index]; tb != nil && !tb.args {
				// A call without arguments: its input is {}.
				c.ToolCalls = []gateway.ToolCallDelta{{Index: tb.index, Arguments: "{}"}}
			}
		case "message_delta":
			if ev.Delta.StopReason != "" {
				stopReason = ev.Delta.StopReason
			}
			// The counts are cumulative: the latest replaces, never adds.
			ev.Usage.mergeInto(&usage)
		case "message_stop":
			u := usage
			return gateway.Chunk{Done: true, FinishReason: finishReason(stopReason), Usage: &u, ID: id, Model: model, Native: c.Native}, usage
		case "error":
			return gateway.Chunk{Err: &gateway.ProviderError{Kind: streamErrorKind(ev.Error.Type),
				Type: ev.Error.Type, Message: ev.Error.Message}}, usage
		default:
			// ping, and the event types Anthropic may add (its versioning
			// policy says clients must ignore the ones they do not know);
			// a native caller gets them as they came.
		}
		if !send(c) {
			return gateway.Chunk{Err: ctx.Err()}, usage
		}
	}
}

// toolBlock is a tool_use block of a stream: its place among the answer's
// tool calls, and whether it sent arguments.
type toolBlock struct {
	index int
	args  bool
}

// readError classifies why a stream could not be read to message_stop.
func readError(err error) error {
	switch {
	case errors.Is(err, io.EOF):
		return &gateway.ProviderError{Kind: gateway.KindServer, Message: "stream ended before message_stop"}
	case errors.Is(err, errEventTooLong):
		return &gateway.ProviderError{Kind: gateway.KindServer, Message: err.Error()}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("stream cut before message_stop: %v", err)}
	}
	return &gateway.ProviderError{Kind: gateway.KindNetwork, Message: fmt.Sprintf("reading stream: %v", err)}
}

// stallReader reads a body and calls stall (which cancels the request,
// so that the blocked Read returns) when no byte came for d.
type stallReader struct {
	r       io.Reader
	d       time.Duration
	timer   *time.Timer
	stalled atomic.Bool // set before stall is called
}

func newStallReader(r io.Reader, d time.Duration, stall func()) *stallReader {
	s := &stallReader{r: r, d: d}
	s.timer = time.AfterFunc(d, func() {
		s.stalled.Store(true)
		stall()
	})
	return s
}

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if n > 0 {
		s.timer.Reset(s.d)
	}
	return n, err
}

// stop stops the watchdog; the stream is over.
func (s *stallReader) stop() { s.timer.Stop() }
