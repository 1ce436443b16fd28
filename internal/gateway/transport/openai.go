package transport

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stickyd/stickyd/internal/gateway"
)

// chatBody is OpenAI's chat completion request.
type chatBody struct {
	completionBody
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

// chatCompletion is OpenAI's chat completion answer ("chat.completion").
type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   chatUsage    `json:"usage"`
	// Stickyd names who served the answer and its cost, as a stream's
	// last chunk does (OpenAI's clients ignore a field they do not know).
	Stickyd *streamMeta `json:"stickyd,omitempty"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     *struct{}   `json:"logprobs"` // always null
	FinishReason string      `json:"finish_reason"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is null when the answer is tool calls only.
	Content   *string        `json:"content"`
	Refusal   *string        `json:"refusal"` // always null
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

type chatToolCall struct {
	// Index is set in a stream's deltas only.
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type,omitempty"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

// chatUsage is OpenAI's usage: prompt tokens count the cached ones, which
// prompt_tokens_details repeats.
type chatUsage struct {
	PromptTokens        int64              `json:"prompt_tokens"`
	CompletionTokens    int64              `json:"completion_tokens"`
	TotalTokens         int64              `json:"total_tokens"`
	PromptTokensDetails promptTokenDetails `json:"prompt_tokens_details"`
}

type promptTokenDetails struct {
	CachedTokens int64 `json:"cached_tokens"`
}

// chatChunk is one event of OpenAI's stream ("chat.completion.chunk").
type chatChunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	// Usage is absent without stream_options.include_usage; with it, it
	// is null on every chunk but the last, which has no choices.
	Usage any `json:"usage,omitempty"`
	// Stickyd, on the chunk with the finish reason, names who served the
	// stream and its cost (OpenAI's clients ignore a field they do not
	// know; the headers name the provider and deployment too, and the
	// X-Stickyd-Cost-Micros trailer the cost).
	Stickyd *streamMeta `json:"stickyd,omitempty"`
}

// streamMeta is the gateway's word on a stream, in its last chunk.
type streamMeta struct {
	Provider   string `json:"provider"`
	Deployment string `json:"deployment"`
	CostMicros int64  `json:"cost_micros"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     *struct{}  `json:"logprobs"` // always null
	FinishReason *string    `json:"finish_reason"`
}

type chunkDelta struct {
	Role      string         `json:"role,omitempty"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []chatToolCall `json:"tool_calls,omitempty"`
}

// jsonNull is a usage of null on a stream's chunks.
var jsonNull any = json.RawMessage("null")

// errStreamCut is a stream whose channel closed before its last chunk.
var errStreamCut = &gateway.ProviderError{Kind: gateway.KindServer, Message: "the stream ended without its last chunk"}

// chatCompletions serves POST /v1/chat/completions. The session is the
// X-Stickyd-Session header, else the body's user, else the caller's name.
func (h *httpServer) chatCompletions(w http.ResponseWriter, r *http.Request, caller string) error {
	var body chatBody
	raw, err := h.decodeBody(w, r, &body)
	if err != nil {
		return err
	}
	body.extra = findExtra(raw)
	req, err := body.toRequest()
	if err != nil {
		return err
	}
	// An OpenAI-compatible deployment gets the request as it came.
	req.Native = &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: raw}
	call := gateway.Call{
		Request:        req,
		Session:        sessionOf(caller, r.Header.Get(SessionHeader), req.User),
		Key:            caller,
		IdempotencyKey: r.Header.Get(idempotencyKey),
	}
	if body.Stream {
		return h.streamChat(w, r, call, body.StreamOptions != nil && body.StreamOptions.IncludeUsage)
	}
	resp, err := h.svc.Complete(r.Context(), call)
	if err != nil {
		return err
	}
	if resp.Provider != "" {
		w.Header().Set(providerHeader, resp.Provider)
	}
	if resp.Deployment != "" {
		w.Header().Set(deploymentHeader, resp.Deployment)
	}
	w.Header().Set(costTrailer, strconv.FormatInt(resp.CostMicros, 10)) // a header here: the answer is whole
	meta := &streamMeta{Provider: resp.Provider, Deployment: resp.Deployment, CostMicros: resp.CostMicros}
	if resp.Native != nil && resp.Native.Shape == gateway.ShapeOpenAIChat {
		// The provider's own answer, every choice and field, with the
		// gateway's word added.
		if b, err := gateway.SetJSONField(resp.Native.Body, "stickyd", meta); err == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b)
			return nil
		}
	}
	msg := chatMessage{Role: "assistant", Content: &resp.Content}
	for _, tc := range resp.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, chatToolCall{ID: tc.ID, Type: "function", Function: chatFunction{Name: tc.Name, Arguments: tc.Arguments}})
	}
	if len(msg.ToolCalls) > 0 && resp.Content == "" {
		msg.Content = nil
	}
	writeJSON(w, http.StatusOK, chatCompletion{
		ID:      firstOf(resp.ID, newChatID()),
		Object:  "chat.completion",
		Created: h.opts.Now().Unix(),
		Model:   firstOf(resp.Model, req.Model),
		Choices: []chatChoice{{
			Message:      msg,
			FinishReason: openAIFinish(resp.FinishReason),
		}},
		Usage:   openAIUsage(resp.Usage),
		Stickyd: meta,
	})
	return nil
}

// openStream starts call's stream and waits for its first chunk before the
// first byte, so that a stream that fails at once still gets its status;
// then it writes the head of an event stream (served-by headers, the cost
// trailer). done cancels the stream and drains it (the Service closes the
// channel once cancelled, its contract; draining lets its sender finish):
// defer it.
func (h *httpServer) openStream(w http.ResponseWriter, r *http.Request, call gateway.Call) (first gateway.Chunk, ch <-chan gateway.Chunk, sse sseWriter, done func(), err error) {
	ctx, cancel := context.WithCancel(r.Context())
	ch, err = h.svc.Stream(ctx, call)
	if err != nil {
		cancel()
		return first, nil, sse, nil, err
	}
	c, ok := <-ch
	switch {
	case !ok:
		cancel()
		return first, nil, sse, nil, errStreamCut
	case c.Err != nil:
		cancel()
		for range ch {
		}
		return first, nil, sse, nil, c.Err
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream; charset=utf-8")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no") // no proxy buffering of the events
	setServedBy(hdr, c.Provider, c.Deployment)
	hdr.Set("Trailer", costTrailer)
	w.WriteHeader(http.StatusOK)
	sse = sseWriter{w: w, rc: http.NewResponseController(w)}
	done = func() {
		_ = sse.flush() // what the stream's last events left in the buffer
		cancel()
		for range ch {
		}
	}
	return c, ch, sse, done, nil
}

// streamChat answers call as OpenAI's server-sent events: a chunk with the
// role, the content deltas, a chunk with the finish reason, the usage chunk
// when asked for, then [DONE]; the events ready together leave together. A
// stream that fails before its first chunk gets a plain error answer; one
// that fails later gets an error event and no [DONE].
func (h *httpServer) streamChat(w http.ResponseWriter, r *http.Request, call gateway.Call, includeUsage bool) error {
	c, ch, sse, done, err := h.openStream(w, r, call)
	if err != nil {
		return err
	}
	defer done()
	hdr, ok := w.Header(), true // the trailer is set at the end; ok is each next chunk's
	id, created, model := newChatID(), h.opts.Now().Unix(), call.Request.Model
	var usage any
	if includeUsage {
		usage = jsonNull
	}
	event := func(choices []chunkChoice, usage any) error {
		return sse.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: choices, Usage: usage})
	}
	gone := func(err error) error {
		h.log.Debug("gateway stream's caller left", "model", model, "error", err)
		return nil
	}

	// A stream in the caller's own shape (the provider speaks it too)
	// passes the provider's events on as they came; the event that ends
	// it (a finish reason, or the usage) is held until the stream's cost
	// is known, and carries the gateway's word.
	native := c.Native != nil
	var held []byte
	if !native {
		empty := ""
		if err := event([]chunkChoice{{Delta: chunkDelta{Role: "assistant", Content: &empty}}}, usage); err != nil {
			return gone(err)
		}
	}
	for {
		switch {
		case c.Native != nil:
			if held != nil {
				if err := sse.write(held); err != nil {
					return gone(err)
				}
				held = nil
			}
			if endsChat(c.Native.Data) {
				held = c.Native.Data
			} else if err := sse.write(c.Native.Data); err != nil {
				return gone(err)
			}
		case native:
		case c.Delta != "" || len(c.ToolCalls) > 0:
			d := chunkDelta{}
			if c.Delta != "" {
				d.Content = &c.Delta
			}
			for _, tc := range c.ToolCalls {
				d.ToolCalls = append(d.ToolCalls, chatToolCall{Index: &tc.Index, ID: tc.ID, Type: typeIfID(tc.ID),
					Function: chatFunction{Name: tc.Name, Arguments: tc.Arguments}})
			}
			if err := event([]chunkChoice{{Delta: d}}, usage); err != nil {
				return gone(err)
			}
		}
		switch {
		case c.Err != nil:
			if held != nil {
				if err := sse.write(held); err != nil {
					return gone(err)
				}
			}
			ae := toAPIError(c.Err)
			h.log.Warn("gateway stream failed midway", "model", model, "session", call.Session, "error", c.Err)
			if err := sse.event(newErrorBody(ae)); err != nil {
				return gone(err)
			}
			return nil
		case c.Done:
			meta := &streamMeta{Provider: c.Provider, Deployment: c.Deployment, CostMicros: c.CostMicros}
			hdr.Set(costTrailer, strconv.FormatInt(c.CostMicros, 10))
			if native {
				last, err := gateway.SetJSONField(held, "stickyd", meta)
				if held == nil || err != nil {
					last, _ = json.Marshal(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model, Choices: []chunkChoice{}, Stickyd: meta})
				}
				if err := sse.write(last); err != nil {
					return gone(err)
				}
				if err := sse.write([]byte("[DONE]")); err != nil {
					return gone(err)
				}
				return nil
			}
			finish := openAIFinish(c.FinishReason)
			if err := sse.event(chatChunk{ID: id, Object: "chat.completion.chunk", Created: created, Model: model,
				Choices: []chunkChoice{{Delta: chunkDelta{}, FinishReason: &finish}}, Usage: usage, Stickyd: meta}); err != nil {
				return gone(err)
			}
			if includeUsage {
				var u gateway.Usage
				if c.Usage != nil {
					u = *c.Usage
				}
				if err := event([]chunkChoice{}, openAIUsage(u)); err != nil {
					return gone(err)
				}
			}
			if err := sse.write([]byte("[DONE]")); err != nil {
				return gone(err)
			}
			return nil
		}
		if c, ok = sse.next(ch); !ok {
			c = gateway.Chunk{Err: errStreamCut}
		}
	}
}

// endsChat reports whether a chat.completion.chunk ends its stream's
// text: one with a finish reason, or with no choice (the usage chunk).
func endsChat(data []byte) bool {
	var probe struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(data, &probe) != nil {
		return false
	}
	if len(probe.Choices) == 0 {
		return true
	}
	for _, c := range probe.Choices {
		if c.FinishReason != nil && *c.FinishReason != "" {
			return true
		}
	}
	return false
}

// typeIfID is a streamed tool call's type, on its first delta (the one
// with its id).
func typeIfID(id string) string {
	if id == "" {
		return ""
	}
	return "function"
}

// sseWriter writes server-sent events into the response's buffer; next
// flushes them when it finds no chunk ready, and the stream's done at its
// end (events that come together leave in one write, none waits for a
// later one).
type sseWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

// next is the stream's next chunk, the events written before it flushed
// first unless it is ready.
func (s sseWriter) next(ch <-chan gateway.Chunk) (gateway.Chunk, bool) {
	select {
	case c, ok := <-ch:
		return c, ok
	default:
	}
	_ = s.flush() // a caller gone fails the next write
	c, ok := <-ch
	return c, ok
}

func (s sseWriter) event(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding an event: %w", err)
	}
	return s.write(b)
}

func (s sseWriter) write(data []byte) error {
	for _, b := range [][]byte{dataPrefix, data, eventEnd} {
		if _, err := s.w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

var dataPrefix, eventEnd = []byte("data: "), []byte("\n\n")

func (s sseWriter) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// openAIUsage words the gateway's usage as OpenAI's, whose prompt tokens
// include the cached ones and those written to the cache.
func openAIUsage(u gateway.Usage) chatUsage {
	prompt := u.Input + u.CachedInput + u.CacheWrite
	return chatUsage{
		PromptTokens:        prompt,
		CompletionTokens:    u.Output,
		TotalTokens:         prompt + u.Output,
		PromptTokensDetails: promptTokenDetails{CachedTokens: u.CachedInput},
	}
}

// openAIFinish words a finish reason as OpenAI does, for the providers
// whose adapters pass their own word through.
func openAIFinish(reason string) string {
	switch reason {
	case "", "end_turn", "stop_sequence":
		return "stop"
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool_calls"
	case "safety", "recitation":
		return "content_filter"
	}
	return reason
}

// newChatID makes an answer's id when the provider gave none, and a
// stream's (its chunks share one, known before the provider's).
func newChatID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "chatcmpl-" + hex.EncodeToString(b)
}
