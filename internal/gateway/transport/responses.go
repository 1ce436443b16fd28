package transport

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stickyd/stickyd/internal/gateway"
)

// OpenAI's Responses API (POST /v1/responses): text, images and function
// tools, whole and streamed, read into the gateway's fields (any
// deployment serves it; an OpenAI-compatible one through its Chat
// Completions API). The gateway keeps no responses: previous_response_id
// and store: true are refused; members it does not read are named in
// Request.Extra, which every adapter refuses naming them.

var responsesParams = map[string]bool{
	"model": true, "input": true, "instructions": true, "tools": true, "tool_choice": true, "max_output_tokens": true,
	"temperature": true, "top_p": true, "text": true, "reasoning": true, "metadata": true, "user": true,
	"parallel_tool_calls": true, "service_tier": true, "stream": true, "store": true,
}

type responsesBody struct {
	Model        string          `json:"model"`
	Input        json.RawMessage `json:"input"`
	Instructions string          `json:"instructions"`
	Tools        []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"tools"`
	ToolChoice      json.RawMessage `json:"tool_choice"`
	MaxOutputTokens *int            `json:"max_output_tokens"`
	Temperature     *float64        `json:"temperature"`
	TopP            *float64        `json:"top_p"`
	Text            *struct {
		Format *struct {
			Type        string          `json:"type"`
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			Strict      *bool           `json:"strict"`
		} `json:"format"`
	} `json:"text"`
	Reasoning *struct {
		Effort string `json:"effort"`
	} `json:"reasoning"`
	Metadata          map[string]string `json:"metadata"`
	User              string            `json:"user"`
	ParallelToolCalls *bool             `json:"parallel_tool_calls"`
	ServiceTier       string            `json:"service_tier"`
	Stream            bool              `json:"stream"`
	Store             *bool             `json:"store"`
}

// responsesItem is an item of input: a message, a function call or a
// function call's output.
type responsesItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Output    json.RawMessage `json:"output"`
}

func (b *responsesBody) toRequest(raw []byte) (gateway.Request, error) {
	if b.Store != nil && *b.Store {
		return gateway.Request{}, badRequest("store", "the gateway keeps no responses: send store: false, or none")
	}
	req := gateway.Request{Model: b.Model, Temperature: b.Temperature, TopP: b.TopP, Metadata: b.Metadata, User: b.User,
		ParallelToolCalls: b.ParallelToolCalls, ServiceTier: b.ServiceTier}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top)
	for k := range top {
		if !responsesParams[k] {
			req.Extra = append(req.Extra, k)
		}
	}
	if b.MaxOutputTokens != nil {
		req.MaxCompletionTokens = *b.MaxOutputTokens
	}
	if b.Reasoning != nil {
		req.ReasoningEffort = b.Reasoning.Effort
	}
	if b.Text != nil && b.Text.Format != nil {
		f := b.Text.Format
		req.ResponseFormat = &gateway.ResponseFormat{Type: f.Type, Name: f.Name, Description: f.Description, Schema: nullToNil(f.Schema), Strict: f.Strict}
	}
	for i, t := range b.Tools {
		if t.Type != "function" {
			req.Extra = append(req.Extra, fmt.Sprintf("tools[%d]", i)) // a hosted tool (web search, file search...)
			continue
		}
		req.Tools = append(req.Tools, gateway.Tool{Name: t.Name, Description: t.Description, Parameters: nullToNil(t.Parameters), Strict: t.Strict})
	}
	if present(b.ToolChoice) {
		var named struct {
			Type string `json:"type"`
			Name string `json:"name"`
		}
		var mode string
		switch {
		case json.Unmarshal(b.ToolChoice, &mode) == nil && (mode == "auto" || mode == "none" || mode == "required"):
			req.ToolChoice = &gateway.ToolChoice{Mode: mode}
		case json.Unmarshal(b.ToolChoice, &named) == nil && named.Type == "function" && named.Name != "":
			req.ToolChoice = &gateway.ToolChoice{Mode: "tool", Name: named.Name}
		default:
			return gateway.Request{}, badRequest("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"name\": ...}")
		}
	}
	if b.Instructions != "" {
		req.Messages = append(req.Messages, gateway.Message{Role: "system", Content: b.Instructions})
	}
	var text string
	if json.Unmarshal(b.Input, &text) == nil {
		req.Messages = append(req.Messages, gateway.Message{Role: "user", Content: text})
	} else {
		var items []responsesItem
		if err := json.Unmarshal(b.Input, &items); err != nil {
			return gateway.Request{}, badRequest("input", "input must be a string or an array of items")
		}
		for i, it := range items {
			if err := addItem(&req, i, it); err != nil {
				return gateway.Request{}, err
			}
		}
	}
	sortStrings(req.Extra)
	if err := checkRequest(req); err != nil {
		return gateway.Request{}, err
	}
	return req, nil
}

// addItem adds an input item to req's messages.
func addItem(req *gateway.Request, i int, it responsesItem) error {
	at := fmt.Sprintf("input[%d]", i)
	switch it.Type {
	case "function_call":
		call := gateway.ToolCall{ID: it.CallID, Name: it.Name, Arguments: it.Arguments}
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "assistant" && len(req.Messages[n-1].ToolCalls) > 0 {
			req.Messages[n-1].ToolCalls = append(req.Messages[n-1].ToolCalls, call)
		} else {
			req.Messages = append(req.Messages, gateway.Message{Role: "assistant", ToolCalls: []gateway.ToolCall{call}})
		}
		return nil
	case "function_call_output":
		var out string
		if json.Unmarshal(it.Output, &out) != nil {
			req.Extra = append(req.Extra, at+".output") // parts, not text
		}
		req.Messages = append(req.Messages, gateway.Message{Role: "tool", ToolCallID: it.CallID, Content: out})
		return nil
	case "", "message":
	default:
		req.Extra = append(req.Extra, at) // reasoning, a hosted tool's call...
		return nil
	}
	role := it.Role
	if role == "developer" {
		role = "system"
	}
	msg := gateway.Message{Role: role}
	if json.Unmarshal(it.Content, &msg.Content) == nil {
		req.Messages = append(req.Messages, msg)
		return nil
	}
	var parts []struct {
		Type     string `json:"type"`
		Text     string `json:"text"`
		ImageURL string `json:"image_url"`
		Detail   string `json:"detail"`
	}
	if err := json.Unmarshal(it.Content, &parts); err != nil {
		return badRequest(at+".content", "%s.content must be a string or an array of parts", at)
	}
	for j, p := range parts {
		switch p.Type {
		case "input_text", "output_text":
			msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartText, Text: p.Text})
		case "input_image":
			if p.ImageURL == "" {
				req.Extra = append(req.Extra, fmt.Sprintf("%s.content[%d].file_id", at, j))
				continue
			}
			msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartImage, URL: p.ImageURL, Detail: p.Detail})
		default:
			req.Extra = append(req.Extra, fmt.Sprintf("%s.content[%d]", at, j))
		}
	}
	req.Messages = append(req.Messages, msg)
	return nil
}

// responses serves POST /v1/responses.
func (h *httpServer) responses(w http.ResponseWriter, r *http.Request, caller string) error {
	var body responsesBody
	raw, err := h.decodeBody(w, r, &body)
	if err != nil {
		return err
	}
	if v, ok := gateway.JSONField(raw, "previous_response_id"); ok && string(v) != "null" {
		return badRequest("previous_response_id", "the gateway keeps no responses: send the whole conversation as input")
	}
	req, err := body.toRequest(raw)
	if err != nil {
		return err
	}
	call := gateway.Call{Request: req, Session: sessionOf(caller, r.Header.Get(SessionHeader), req.User), Key: caller,
		IdempotencyKey: r.Header.Get(idempotencyKey)}
	rs := &responseState{id: "resp_" + randHex(), created: h.opts.Now().Unix(), model: req.Model, body: &body}
	if body.Stream {
		return h.streamResponse(w, r, call, rs)
	}
	resp, err := h.svc.Complete(r.Context(), call)
	if err != nil {
		return err
	}
	setServedBy(w.Header(), resp.Provider, resp.Deployment)
	w.Header().Set(costTrailer, strconv.FormatInt(resp.CostMicros, 10))
	if resp.Content != "" {
		rs.text = &outputItem{Type: "message", ID: "msg_" + randHex(), Status: "completed", Role: "assistant", text: resp.Content}
		rs.items = append(rs.items, rs.text)
	}
	for _, tc := range resp.ToolCalls {
		rs.items = append(rs.items, &outputItem{Type: "function_call", ID: "fc_" + randHex(), Status: "completed", CallID: tc.ID, Name: tc.Name, Arguments: tc.Arguments})
	}
	writeJSON(w, http.StatusOK, rs.response(resp.FinishReason, resp.Usage, &streamMeta{Provider: resp.Provider, Deployment: resp.Deployment, CostMicros: resp.CostMicros}))
	return nil
}

// responseState is a response being written.
type responseState struct {
	id      string
	created int64
	model   string
	body    *responsesBody
	items   []*outputItem
	text    *outputItem // the message being written, if any
	seq     int
}

// outputItem is an item of a response's output.
type outputItem struct {
	Type      string `json:"type"`
	ID        string `json:"id"`
	Status    string `json:"status"`
	Role      string `json:"role,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
	text      string
	// done marks an item whose done events were sent.
	done bool
}

func (o *outputItem) MarshalJSON() ([]byte, error) {
	type plain outputItem
	if o.Type != "message" {
		return json.Marshal((*plain)(o))
	}
	content := []any{}
	if o.Status == "completed" || o.text != "" {
		content = append(content, outputText(o.text))
	}
	return json.Marshal(map[string]any{"type": o.Type, "id": o.ID, "status": o.Status, "role": o.Role, "content": content})
}

func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}

// response is the response object: in progress (finish "") or ended.
func (rs *responseState) response(finish string, u gateway.Usage, meta *streamMeta) map[string]any {
	status := "in_progress"
	var incomplete any
	switch {
	case finish == "length" || finish == "max_tokens":
		status, incomplete = "incomplete", map[string]string{"reason": "max_output_tokens"}
	case finish != "":
		status = "completed"
	}
	out := make([]any, len(rs.items))
	for i, it := range rs.items {
		if status != "in_progress" {
			it.Status = "completed"
		}
		out[i] = it
	}
	r := map[string]any{"id": rs.id, "object": "response", "created_at": rs.created, "status": status, "model": rs.model,
		"output": out, "error": nil, "incomplete_details": incomplete, "instructions": nilIfEmpty(rs.body.Instructions),
		"metadata": orEmpty(rs.body.Metadata), "parallel_tool_calls": rs.body.ParallelToolCalls == nil || *rs.body.ParallelToolCalls,
		"temperature": rs.body.Temperature, "top_p": rs.body.TopP, "tool_choice": rawOr(rs.body.ToolChoice, `"auto"`),
		"tools": rawOr(mustJSON(rs.body.Tools), "[]"), "previous_response_id": nil, "store": false, "truncation": "disabled",
		"max_output_tokens": rs.body.MaxOutputTokens, "user": nilIfEmpty(rs.body.User)}
	if finish != "" {
		r["usage"] = map[string]any{"input_tokens": u.Input + u.CachedInput + u.CacheWrite, "input_tokens_details": map[string]int64{"cached_tokens": u.CachedInput},
			"output_tokens": u.Output, "output_tokens_details": map[string]int64{"reasoning_tokens": 0},
			"total_tokens": u.Input + u.CachedInput + u.CacheWrite + u.Output}
	}
	if meta != nil {
		r["stickyd"] = meta
	}
	return r
}

// streamResponse answers call as the Responses API's events.
func (h *httpServer) streamResponse(w http.ResponseWriter, r *http.Request, call gateway.Call, rs *responseState) error {
	c, ch, sse, done, err := h.openStream(w, r, call)
	if err != nil {
		return err
	}
	defer done()
	hdr, ok := w.Header(), true // the trailer is set at the end; ok is each next chunk's
	emit := func(typ string, fields map[string]any) error {
		fields["type"], fields["sequence_number"] = typ, rs.seq
		rs.seq++
		return sse.event2(typ, fields)
	}
	gone := func(err error) error {
		h.log.Debug("gateway stream's caller left", "model", call.Request.Model, "error", err)
		return nil
	}
	if err := emit("response.created", map[string]any{"response": rs.response("", gateway.Usage{}, nil)}); err != nil {
		return gone(err)
	}
	if err := emit("response.in_progress", map[string]any{"response": rs.response("", gateway.Usage{}, nil)}); err != nil {
		return gone(err)
	}
	calls := map[int]*outputItem{} // by the tool call's index
	closeItem := func(it *outputItem) error {
		if it == nil || it.done {
			return nil
		}
		it.done, it.Status = true, "completed"
		at := rs.index(it)
		if it.Type == "message" {
			if err := emit("response.output_text.done", map[string]any{"item_id": it.ID, "output_index": at, "content_index": 0, "text": it.text, "logprobs": []any{}}); err != nil {
				return err
			}
			if err := emit("response.content_part.done", map[string]any{"item_id": it.ID, "output_index": at, "content_index": 0, "part": outputText(it.text)}); err != nil {
				return err
			}
		} else if err := emit("response.function_call_arguments.done", map[string]any{"item_id": it.ID, "output_index": at, "name": it.Name, "arguments": it.Arguments}); err != nil {
			return err
		}
		return emit("response.output_item.done", map[string]any{"output_index": at, "item": it})
	}
	for {
		if c.Delta != "" {
			if rs.text == nil || rs.text.done {
				rs.text = &outputItem{Type: "message", ID: "msg_" + randHex(), Status: "in_progress", Role: "assistant"}
				rs.items = append(rs.items, rs.text)
				at := rs.index(rs.text)
				if err := emit("response.output_item.added", map[string]any{"output_index": at, "item": rs.text}); err != nil {
					return gone(err)
				}
				if err := emit("response.content_part.added", map[string]any{"item_id": rs.text.ID, "output_index": at, "content_index": 0, "part": outputText("")}); err != nil {
					return gone(err)
				}
			}
			rs.text.text += c.Delta
			if err := emit("response.output_text.delta", map[string]any{"item_id": rs.text.ID, "output_index": rs.index(rs.text), "content_index": 0, "delta": c.Delta, "logprobs": []any{}}); err != nil {
				return gone(err)
			}
		}
		for _, tc := range c.ToolCalls {
			it, ok := calls[tc.Index]
			if !ok {
				if err := closeItem(rs.text); err != nil {
					return gone(err)
				}
				it = &outputItem{Type: "function_call", ID: "fc_" + randHex(), Status: "in_progress", CallID: tc.ID, Name: tc.Name}
				calls[tc.Index] = it
				rs.items = append(rs.items, it)
				if err := emit("response.output_item.added", map[string]any{"output_index": rs.index(it), "item": it}); err != nil {
					return gone(err)
				}
			}
			if tc.Arguments != "" {
				it.Arguments += tc.Arguments
				if err := emit("response.function_call_arguments.delta", map[string]any{"item_id": it.ID, "output_index": rs.index(it), "delta": tc.Arguments}); err != nil {
					return gone(err)
				}
			}
		}
		switch {
		case c.Err != nil:
			h.log.Warn("gateway stream failed midway", "model", call.Request.Model, "session", call.Session, "error", c.Err)
			ae := toAPIError(c.Err)
			if err := emit("error", map[string]any{"code": ae.ErrCode, "message": ae.Message, "param": nilIfEmpty(ae.Param)}); err != nil {
				return gone(err)
			}
			return nil
		case c.Done:
			for _, it := range rs.items {
				if err := closeItem(it); err != nil {
					return gone(err)
				}
			}
			hdr.Set(costTrailer, strconv.FormatInt(c.CostMicros, 10))
			var u gateway.Usage
			if c.Usage != nil {
				u = *c.Usage
			}
			finish := c.FinishReason
			if finish == "" {
				finish = "stop"
			}
			meta := &streamMeta{Provider: c.Provider, Deployment: c.Deployment, CostMicros: c.CostMicros}
			typ := "response.completed"
			if finish == "length" || finish == "max_tokens" {
				typ = "response.incomplete"
			}
			if err := emit(typ, map[string]any{"response": rs.response(finish, u, meta)}); err != nil {
				return gone(err)
			}
			return nil
		}
		if c, ok = sse.next(ch); !ok {
			c = gateway.Chunk{Err: errStreamCut}
		}
	}
}

func (rs *responseState) index(it *outputItem) int {
	for i, x := range rs.items {
		if x == it {
			return i
		}
	}
	return -1
}

func randHex() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func rawOr(raw json.RawMessage, def string) json.RawMessage {
	if !present(raw) {
		return json.RawMessage(def)
	}
	return raw
}

func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}
