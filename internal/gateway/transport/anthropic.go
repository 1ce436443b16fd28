package transport

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Anthropic's Messages API (POST /v1/messages), so that @anthropic-ai/sdk
// and the tools built on it call the gateway unchanged. The request is
// read into the gateway's fields and kept as it came (gateway.Native): an
// Anthropic deployment gets it byte for byte, another is given the
// gateway's fields and refuses, naming it, what it cannot carry. The
// answer is the provider's own (Anthropic) or written in Anthropic's shape
// from the gateway's (any other); errors are in Anthropic's shape.

// messagesParams are the members of a Messages request read into the
// gateway's fields; the others are named in Request.Extra.
var messagesParams = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "system": true, "temperature": true, "top_p": true, "top_k": true,
	"stop_sequences": true, "stream": true, "metadata": true, "tools": true, "tool_choice": true, "service_tier": true,
}

type messagesBody struct {
	Model         string            `json:"model"`
	Messages      []messagesMessage `json:"messages"`
	MaxTokens     *int              `json:"max_tokens"`
	System        json.RawMessage   `json:"system"`
	Temperature   *float64          `json:"temperature"`
	TopP          *float64          `json:"top_p"`
	TopK          *int              `json:"top_k"`
	StopSequences []string          `json:"stop_sequences"`
	Stream        bool              `json:"stream"`
	Metadata      map[string]any    `json:"metadata"`
	Tools         []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
	ToolChoice *struct {
		Type                   string `json:"type"`
		Name                   string `json:"name"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use"`
	} `json:"tool_choice"`
	ServiceTier string `json:"service_tier"`
}

type messagesMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// messagesBlock is a content block of a request.
type messagesBlock struct {
	Type   string `json:"type"`
	Text   string `json:"text"`
	Source *struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type"`
		Data      string `json:"data"`
		URL       string `json:"url"`
	} `json:"source"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
}

// blockFields are the members of a block read into the gateway's fields.
var blockFields = map[string]bool{"type": true, "text": true, "source": true, "id": true, "name": true, "input": true, "tool_use_id": true, "content": true}

// messages serves POST /v1/messages.
func (h *httpServer) messages(w http.ResponseWriter, r *http.Request, caller string) error {
	var body messagesBody
	raw, err := h.decodeBody(w, r, &body)
	if err != nil {
		return err
	}
	req, err := body.toRequest(raw)
	if err != nil {
		return err
	}
	req.Native = &gateway.Native{Shape: gateway.ShapeAnthropicMessages, Body: raw}
	call := gateway.Call{
		Request:        req,
		Session:        sessionOf(caller, r.Header.Get(SessionHeader), req.User),
		Key:            caller,
		IdempotencyKey: r.Header.Get(idempotencyKey),
	}
	if body.Stream {
		return h.streamMessages(w, r, call)
	}
	resp, err := h.svc.Complete(r.Context(), call)
	if err != nil {
		return err
	}
	setServedBy(w.Header(), resp.Provider, resp.Deployment)
	w.Header().Set(costTrailer, strconv.FormatInt(resp.CostMicros, 10))
	meta := &streamMeta{Provider: resp.Provider, Deployment: resp.Deployment, CostMicros: resp.CostMicros}
	if resp.Native != nil && resp.Native.Shape == gateway.ShapeAnthropicMessages {
		if b, err := gateway.SetJSONField(resp.Native.Body, "stickyd", meta); err == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b)
			return nil
		}
	}
	content := []any{}
	if resp.Content != "" {
		content = append(content, map[string]string{"type": "text", "text": resp.Content})
	}
	for _, tc := range resp.ToolCalls {
		content = append(content, map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": toolInput(tc.Arguments)})
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": firstOf(resp.ID, newMessageID()), "type": "message", "role": "assistant", "model": firstOf(resp.Model, req.Model),
		"content": content, "stop_reason": anthropicStop(resp.FinishReason), "stop_sequence": nil,
		"usage": anthropicUsage(resp.Usage), "stickyd": meta,
	})
	return nil
}

// toRequest reads the body into the gateway's request.
func (b *messagesBody) toRequest(raw []byte) (gateway.Request, error) {
	if b.MaxTokens == nil || *b.MaxTokens < 1 {
		return gateway.Request{}, badRequest("max_tokens", "max_tokens is required, at least 1")
	}
	req := gateway.Request{Model: b.Model, MaxTokens: *b.MaxTokens, Temperature: b.Temperature, TopP: b.TopP, TopK: b.TopK,
		Stop: b.StopSequences, ServiceTier: b.ServiceTier}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top)
	for k := range top {
		if !messagesParams[k] {
			req.Extra = append(req.Extra, k)
		}
	}
	for k, v := range b.Metadata {
		if s, ok := v.(string); k == "user_id" && ok {
			req.User = s
		} else {
			req.Extra = append(req.Extra, "metadata."+k)
		}
	}
	if present(b.System) {
		var text string
		if json.Unmarshal(b.System, &text) != nil {
			var blocks []json.RawMessage
			if err := json.Unmarshal(b.System, &blocks); err != nil {
				return gateway.Request{}, badRequest("system", "system must be a string or an array of text blocks")
			}
			for j, rb := range blocks {
				var blk messagesBlock
				_ = json.Unmarshal(rb, &blk)
				if blk.Type != "text" {
					return gateway.Request{}, badRequest(fmt.Sprintf("system[%d].type", j), "system blocks must be text")
				}
				req.Extra = append(req.Extra, extraMembers(rb, fmt.Sprintf("system[%d]", j))...)
				text += blk.Text
			}
		}
		req.Messages = append(req.Messages, gateway.Message{Role: "system", Content: text})
	}
	for i, m := range b.Messages {
		msgs, extra, err := fromAnthropic(i, m)
		if err != nil {
			return gateway.Request{}, err
		}
		req.Messages = append(req.Messages, msgs...)
		req.Extra = append(req.Extra, extra...)
	}
	for i, t := range b.Tools {
		if t.Type != "" && t.Type != "custom" {
			req.Extra = append(req.Extra, fmt.Sprintf("tools[%d]", i)) // a server tool (web search, bash...)
			continue
		}
		req.Tools = append(req.Tools, gateway.Tool{Name: t.Name, Description: t.Description, Parameters: nullToNil(t.InputSchema)})
	}
	var tools []json.RawMessage
	if json.Unmarshal(top["tools"], &tools) == nil {
		for i, rt := range tools {
			req.Extra = append(req.Extra, extraMembers(rt, fmt.Sprintf("tools[%d]", i), "type", "name", "description", "input_schema")...)
		}
	}
	if tc := b.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "none":
			req.ToolChoice = &gateway.ToolChoice{Mode: tc.Type}
		case "any":
			req.ToolChoice = &gateway.ToolChoice{Mode: "required"}
		case "tool":
			req.ToolChoice = &gateway.ToolChoice{Mode: "tool", Name: tc.Name}
		default:
			return gateway.Request{}, badRequest("tool_choice.type", "tool_choice.type %q: want auto, any, tool or none", tc.Type)
		}
		if tc.DisableParallelToolUse {
			no := false
			req.ParallelToolCalls = &no
		}
	}
	sortStrings(req.Extra)
	if err := checkRequest(req); err != nil {
		return gateway.Request{}, err
	}
	return req, nil
}

// fromAnthropic reads one message: its text and images, an assistant's
// tool_use blocks as tool calls, a user's tool_result blocks as "tool"
// messages (before the rest of the turn, as Anthropic orders them).
func fromAnthropic(i int, m messagesMessage) ([]gateway.Message, []string, error) {
	if m.Role != "user" && m.Role != "assistant" {
		return nil, nil, badRequest(fmt.Sprintf("messages[%d].role", i), "messages[%d].role is %q: want user or assistant", i, m.Role)
	}
	var text string
	if json.Unmarshal(m.Content, &text) == nil {
		return []gateway.Message{{Role: m.Role, Content: text}}, nil, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(m.Content, &raws); err != nil {
		return nil, nil, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of blocks", i)
	}
	var out []gateway.Message
	var extra []string
	msg := gateway.Message{Role: m.Role}
	for j, rb := range raws {
		at := fmt.Sprintf("messages[%d].content[%d]", i, j)
		var b messagesBlock
		if err := json.Unmarshal(rb, &b); err != nil {
			return nil, nil, badRequest(at, "%s: %v", at, err)
		}
		extra = append(extra, extraMembers(rb, at)...)
		switch {
		case b.Type == "text":
			msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartText, Text: b.Text})
		case b.Type == "image" && b.Source != nil && b.Source.Type == "base64":
			msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartImage, URL: "data:" + b.Source.MediaType + ";base64," + b.Source.Data})
		case b.Type == "image" && b.Source != nil && b.Source.Type == "url":
			msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartImage, URL: b.Source.URL})
		case b.Type == "tool_use" && m.Role == "assistant":
			args := string(b.Input)
			if !present(b.Input) {
				args = "{}"
			}
			msg.ToolCalls = append(msg.ToolCalls, gateway.ToolCall{ID: b.ID, Name: b.Name, Arguments: args})
		case b.Type == "tool_result" && m.Role == "user":
			content, err := toolResultText(b.Content)
			if err != nil {
				return nil, nil, badRequest(at+".content", "%s.content: %v", at, err)
			}
			if content == nil {
				extra = append(extra, at+".content") // images in a tool's answer
			}
			if b.IsError {
				extra = append(extra, at+".is_error")
			}
			out = append(out, gateway.Message{Role: "tool", ToolCallID: b.ToolUseID, Content: deref(content)})
		case m.Role == "user":
			// A document, a search result...: carried only to Anthropic.
			msg.Parts = append(msg.Parts, gateway.Part{Type: b.Type})
		default:
			// An assistant's thinking, a server tool's use...
			extra = append(extra, at)
		}
	}
	if len(msg.Parts) > 0 || len(msg.ToolCalls) > 0 || len(out) == 0 {
		if len(msg.Parts) == 1 && msg.Parts[0].Type == gateway.PartText {
			msg.Content, msg.Parts = msg.Parts[0].Text, nil
		}
		out = append(out, msg)
	}
	return out, extra, nil
}

// toolResultText is a tool_result's content as text (nil when it holds
// more than text).
func toolResultText(raw json.RawMessage) (*string, error) {
	s := ""
	if !present(raw) {
		return &s, nil
	}
	if json.Unmarshal(raw, &s) == nil {
		return &s, nil
	}
	var blocks []messagesBlock
	if err := json.Unmarshal(raw, &blocks); err != nil {
		return nil, fmt.Errorf("want a string or an array of blocks")
	}
	for _, b := range blocks {
		if b.Type != "text" {
			return nil, nil
		}
		s += b.Text
	}
	return &s, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// extraMembers names the members of a JSON object not in blockFields (or
// in known, when given), prefixed with at.
func extraMembers(raw json.RawMessage, at string, known ...string) []string {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil {
		return nil
	}
	var out []string
	for k := range m {
		if (len(known) == 0 && !blockFields[k]) || (len(known) > 0 && !contains(known, k)) {
			out = append(out, at+"."+k)
		}
	}
	return out
}

// streamMessages answers call as Anthropic's server-sent events. A stream
// from an Anthropic deployment passes its events on as they came, its
// message_delta held until the cost is known (it carries the gateway's
// word); any other is written as Anthropic writes one: message_start,
// content blocks (text_delta, tool_use's input_json_delta),
// message_delta with the usage, message_stop.
func (h *httpServer) streamMessages(w http.ResponseWriter, r *http.Request, call gateway.Call) error {
	c, ch, sse, done, err := h.openStream(w, r, call)
	if err != nil {
		return err
	}
	defer done()
	hdr, ok := w.Header(), true // the trailer is set at the end; ok is each next chunk's
	gone := func(err error) error {
		h.log.Debug("gateway stream's caller left", "model", call.Request.Model, "error", err)
		return nil
	}
	native := c.Native != nil && c.Native.Event != ""
	m := &messageStream{sse: sse, model: call.Request.Model}
	var held *gateway.NativeEvent // a native message_delta
	for {
		switch {
		case native && c.Native != nil:
			if held != nil && !c.Done {
				if err := sse.named(held.Event, held.Data); err != nil {
					return gone(err)
				}
				held = nil
			}
			if c.Native.Event == "message_delta" {
				held = c.Native
			} else if !c.Done {
				if err := sse.named(c.Native.Event, c.Native.Data); err != nil {
					return gone(err)
				}
			}
		case !native:
			if err := m.chunk(c); err != nil {
				return gone(err)
			}
		}
		switch {
		case c.Err != nil:
			h.log.Warn("gateway stream failed midway", "model", call.Request.Model, "session", call.Session, "error", c.Err)
			if held != nil {
				_ = sse.named(held.Event, held.Data)
			}
			ae := toAPIError(c.Err)
			if err := sse.event2("error", anthropicError(ae)); err != nil {
				return gone(err)
			}
			return nil
		case c.Done:
			meta := &streamMeta{Provider: c.Provider, Deployment: c.Deployment, CostMicros: c.CostMicros}
			hdr.Set(costTrailer, strconv.FormatInt(c.CostMicros, 10))
			if !native {
				if err := m.end(c, meta); err != nil {
					return gone(err)
				}
				return nil
			}
			if held != nil {
				data, err := gateway.SetJSONField(held.Data, "stickyd", meta)
				if err != nil {
					data = held.Data
				}
				if err := sse.named(held.Event, data); err != nil {
					return gone(err)
				}
			}
			if c.Native != nil {
				if err := sse.named(c.Native.Event, c.Native.Data); err != nil {
					return gone(err)
				}
			}
			return nil
		}
		if c, ok = sse.next(ch); !ok {
			c = gateway.Chunk{Err: errStreamCut}
		}
	}
}

// messageStream writes the gateway's chunks as Anthropic's events.
type messageStream struct {
	sse     sseWriter
	model   string
	started bool
	// open is the index of the block being written (-1: none), blocks
	// the count so far; tools maps a tool call's index to its block.
	open, blocks int
	openText     bool
	tools        map[int]int
}

func (m *messageStream) start(c gateway.Chunk) error {
	m.started, m.open, m.tools = true, -1, map[int]int{}
	var u gateway.Usage
	if c.Usage != nil {
		u = *c.Usage
	}
	return m.sse.event2("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": newMessageID(), "type": "message", "role": "assistant", "model": m.model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": anthropicUsage(u)}})
}

func (m *messageStream) closeBlock() error {
	if m.open < 0 {
		return nil
	}
	err := m.sse.event2("content_block_stop", map[string]any{"type": "content_block_stop", "index": m.open})
	m.open, m.openText = -1, false
	return err
}

func (m *messageStream) chunk(c gateway.Chunk) error {
	if !m.started {
		if err := m.start(c); err != nil {
			return err
		}
	}
	if c.Delta != "" {
		if !m.openText {
			if err := m.closeBlock(); err != nil {
				return err
			}
			m.open, m.openText = m.blocks, true
			m.blocks++
			if err := m.sse.event2("content_block_start", map[string]any{"type": "content_block_start", "index": m.open,
				"content_block": map[string]string{"type": "text", "text": ""}}); err != nil {
				return err
			}
		}
		if err := m.sse.event2("content_block_delta", map[string]any{"type": "content_block_delta", "index": m.open,
			"delta": map[string]string{"type": "text_delta", "text": c.Delta}}); err != nil {
			return err
		}
	}
	for _, tc := range c.ToolCalls {
		block, ok := m.tools[tc.Index]
		if !ok {
			if err := m.closeBlock(); err != nil {
				return err
			}
			block = m.blocks
			m.blocks++
			m.tools[tc.Index], m.open = block, block
			if err := m.sse.event2("content_block_start", map[string]any{"type": "content_block_start", "index": block,
				"content_block": map[string]any{"type": "tool_use", "id": tc.ID, "name": tc.Name, "input": map[string]any{}}}); err != nil {
				return err
			}
		}
		if tc.Arguments != "" {
			if err := m.sse.event2("content_block_delta", map[string]any{"type": "content_block_delta", "index": block,
				"delta": map[string]string{"type": "input_json_delta", "partial_json": tc.Arguments}}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *messageStream) end(c gateway.Chunk, meta *streamMeta) error {
	if err := m.closeBlock(); err != nil {
		return err
	}
	var u gateway.Usage
	if c.Usage != nil {
		u = *c.Usage
	}
	if err := m.sse.event2("message_delta", map[string]any{"type": "message_delta",
		"delta": map[string]any{"stop_reason": anthropicStop(c.FinishReason), "stop_sequence": nil},
		"usage": anthropicUsage(u), "stickyd": meta}); err != nil {
		return err
	}
	return m.sse.event2("message_stop", map[string]string{"type": "message_stop"})
}

// named writes an event with its name and data as they are.
func (s sseWriter) named(event string, data []byte) error {
	var b bytes.Buffer
	if event != "" {
		fmt.Fprintf(&b, "event: %s\n", event)
	}
	fmt.Fprintf(&b, "data: %s\n\n", data)
	_, err := s.w.Write(b.Bytes())
	return err
}

// event2 writes a named event with v as its data.
func (s sseWriter) event2(event string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encoding an event: %w", err)
	}
	return s.named(event, b)
}

// anthropicUsage words the gateway's usage as Anthropic's, whose input
// tokens exclude the cache's reads and writes.
func anthropicUsage(u gateway.Usage) map[string]int64 {
	return map[string]int64{"input_tokens": u.Input, "output_tokens": u.Output,
		"cache_read_input_tokens": u.CachedInput, "cache_creation_input_tokens": u.CacheWrite}
}

// anthropicStop words a finish reason as Anthropic's stop_reason.
func anthropicStop(reason string) string {
	switch reason {
	case "length", "max_tokens":
		return "max_tokens"
	case "tool_calls", "tool_use":
		return "tool_use"
	case "content_filter":
		return "refusal"
	case "stop_sequence", "pause_turn", "refusal":
		return reason
	}
	return "end_turn"
}

// toolInput is a tool call's arguments as the JSON object Anthropic's
// input is ({} when they are none or not JSON).
func toolInput(args string) json.RawMessage {
	if json.Valid([]byte(args)) && len(bytes.TrimSpace([]byte(args))) > 0 {
		return json.RawMessage(args)
	}
	return json.RawMessage("{}")
}

// anthropicError is an error in Anthropic's shape.
func anthropicError(ae *apiError) map[string]any {
	typ := "api_error"
	switch {
	case ae.Status == http.StatusBadRequest:
		typ = "invalid_request_error"
	case ae.Status == http.StatusUnauthorized:
		typ = "authentication_error"
	case ae.Status == http.StatusForbidden:
		typ = "permission_error"
	case ae.Status == http.StatusNotFound:
		typ = "not_found_error"
	case ae.Status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case ae.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case ae.Status == http.StatusServiceUnavailable:
		typ = "overloaded_error"
	case ae.Status >= 400 && ae.Status < 500:
		typ = "invalid_request_error"
	}
	msg := ae.Message
	if ae.Param != "" && !bytes.Contains([]byte(msg), []byte(ae.Param)) {
		msg = ae.Param + ": " + msg
	}
	return map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}}
}

func newMessageID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return "msg_" + hex.EncodeToString(b)
}

// setServedBy names who serves an answer in its headers.
func setServedBy(h http.Header, provider, deployment string) {
	if provider != "" {
		h.Set(providerHeader, provider)
	}
	if deployment != "" {
		h.Set(deploymentHeader, deployment)
	}
}
