package anthropic

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The request: a caller's own Messages request (gateway.Native in this
// shape) is sent as it is, its model replaced; any other is built from
// the gateway's fields, and what the Messages API cannot carry is refused
// with gateway.Unsupported naming the parameter, never dropped.

type (
	messagesRequest struct {
		Model         string           `json:"model"`
		System        string           `json:"system,omitempty"`
		Messages      []wireMessage    `json:"messages"`
		MaxTokens     int              `json:"max_tokens"`
		Temperature   *float64         `json:"temperature,omitempty"`
		TopP          *float64         `json:"top_p,omitempty"`
		TopK          *int             `json:"top_k,omitempty"`
		StopSequences []string         `json:"stop_sequences,omitempty"`
		Metadata      *requestMetadata `json:"metadata,omitempty"`
		Tools         []wireTool       `json:"tools,omitempty"`
		ToolChoice    *wireToolChoice  `json:"tool_choice,omitempty"`
		ServiceTier   string           `json:"service_tier,omitempty"`
		Stream        bool             `json:"stream,omitempty"`
	}
	wireMessage struct {
		Role string `json:"role"`
		// Content is a string or an array of blocks.
		Content any `json:"content"`
	}
	wireBlock struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"`
		// image
		Source *imageSource `json:"source,omitempty"`
		// tool_use
		ID    string          `json:"id,omitempty"`
		Name  string          `json:"name,omitempty"`
		Input json.RawMessage `json:"input,omitempty"`
		// tool_result
		ToolUseID string `json:"tool_use_id,omitempty"`
		Content   string `json:"content,omitempty"`
	}
	imageSource struct {
		Type      string `json:"type"` // base64 or url
		MediaType string `json:"media_type,omitempty"`
		Data      string `json:"data,omitempty"`
		URL       string `json:"url,omitempty"`
	}
	wireTool struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}
	wireToolChoice struct {
		Type                   string `json:"type"`
		Name                   string `json:"name,omitempty"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
	}
	requestMetadata struct {
		UserID string `json:"user_id"`
	}
)

// native reports whether req is the caller's own Messages request.
func native(req gateway.Request) bool {
	return req.Native != nil && req.Native.Shape == gateway.ShapeAnthropicMessages
}

// requestBody is the body to send for req.
func (a *Adapter) requestBody(req gateway.Request, stream bool) ([]byte, error) {
	if native(req) {
		b, err := gateway.SetJSONField(req.Native.Body, "model", req.Model)
		if err != nil {
			return nil, gateway.Unsupported("", "the request is not a JSON object: %v", err)
		}
		if v, _ := gateway.JSONField(b, "stream"); (string(v) == "true") != stream && (stream || len(v) > 0) {
			return gateway.SetJSONField(b, "stream", stream)
		}
		return b, nil
	}
	mr, err := a.buildRequest(req, stream)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(mr)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	return b, nil
}

// buildRequest turns req into Anthropic's shape: system (and OpenAI's
// "developer") messages go, joined, into the top-level system field; tool
// answers ("tool" messages) become tool_result blocks of a user turn.
func (a *Adapter) buildRequest(req gateway.Request, stream bool) (messagesRequest, error) {
	if err := refuseUncarried(req); err != nil {
		return messagesRequest{}, err
	}
	mr := messagesRequest{
		Model:         req.Model,
		Messages:      make([]wireMessage, 0, len(req.Messages)),
		MaxTokens:     cmp.Or(req.MaxCompletionTokens, req.MaxTokens, a.maxTokens),
		Temperature:   req.Temperature,
		TopP:          req.TopP,
		TopK:          req.TopK,
		StopSequences: req.Stop,
		ServiceTier:   req.ServiceTier,
		Stream:        stream,
	}
	var system []string
	for i, m := range req.Messages {
		if m.Name != "" {
			return mr, gateway.Unsupported(fmt.Sprintf("messages[%d].name", i), "Anthropic's Messages API has no name for a message's author")
		}
		switch m.Role {
		case "system", "developer":
			for j, p := range m.Parts {
				if p.Type != gateway.PartText {
					return mr, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "Anthropic's system prompt takes text only")
				}
			}
			system = append(system, m.Text())
		case "user":
			content, err := userContent(i, m)
			if err != nil {
				return mr, err
			}
			mr.Messages = append(mr.Messages, wireMessage{Role: "user", Content: content})
		case "assistant":
			content, err := assistantContent(i, m)
			if err != nil {
				return mr, err
			}
			mr.Messages = append(mr.Messages, wireMessage{Role: "assistant", Content: content})
		case "tool":
			if len(m.Parts) > 0 {
				for j, p := range m.Parts {
					if p.Type != gateway.PartText {
						return mr, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "a tool's answer is sent to Anthropic as text only")
					}
				}
			}
			block := wireBlock{Type: "tool_result", ToolUseID: m.ToolCallID, Content: m.Text()}
			// Answers to one turn's calls go together in one user turn.
			if n := len(mr.Messages); n > 0 && mr.Messages[n-1].Role == "user" {
				if blocks, ok := mr.Messages[n-1].Content.([]wireBlock); ok && len(blocks) > 0 && blocks[0].Type == "tool_result" {
					mr.Messages[n-1].Content = append(blocks, block)
					continue
				}
			}
			mr.Messages = append(mr.Messages, wireMessage{Role: "user", Content: []wireBlock{block}})
		default:
			return mr, &gateway.ProviderError{Kind: gateway.KindBadRequest, Type: "invalid_request_error", Param: fmt.Sprintf("messages[%d].role", i),
				Message: fmt.Sprintf("message %d: unknown role %q", i, m.Role)}
		}
	}
	mr.System = strings.Join(system, systemSeparator)
	if req.User != "" {
		mr.Metadata = &requestMetadata{UserID: req.User}
	}
	for i, t := range req.Tools {
		if t.Strict != nil && *t.Strict {
			return mr, gateway.Unsupported(fmt.Sprintf("tools[%d].function.strict", i), "Anthropic's Messages API does not promise to follow a tool's schema strictly")
		}
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		mr.Tools = append(mr.Tools, wireTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Mode {
		case "auto", "none":
			mr.ToolChoice = &wireToolChoice{Type: tc.Mode}
		case "required":
			mr.ToolChoice = &wireToolChoice{Type: "any"}
		case "tool":
			mr.ToolChoice = &wireToolChoice{Type: "tool", Name: tc.Name}
		default:
			return mr, gateway.Unsupported("tool_choice", "tool_choice %q is not one Anthropic's Messages API has", tc.Mode)
		}
	}
	if p := req.ParallelToolCalls; p != nil && !*p {
		switch {
		case mr.ToolChoice == nil:
			mr.ToolChoice = &wireToolChoice{Type: "auto", DisableParallelToolUse: true}
		case mr.ToolChoice.Type != "none":
			mr.ToolChoice.DisableParallelToolUse = true
		}
	}
	return mr, nil
}

// refuseUncarried refuses the parameters the Messages API has no
// equivalent of.
func refuseUncarried(req gateway.Request) error {
	const api = "Anthropic's Messages API"
	switch {
	case len(req.Extra) > 0:
		return gateway.Unsupported(req.Extra[0], "%s is not a parameter of %s, which this deployment speaks", req.Extra[0], api)
	case req.N > 1:
		return gateway.Unsupported("n", "%s makes one answer per request: n must be 1", api)
	case req.Seed != nil:
		return gateway.Unsupported("seed", "%s has no seed", api)
	case req.PresencePenalty != nil && *req.PresencePenalty != 0:
		return gateway.Unsupported("presence_penalty", "%s has no presence penalty", api)
	case req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0:
		return gateway.Unsupported("frequency_penalty", "%s has no frequency penalty", api)
	case len(req.LogitBias) > 0:
		return gateway.Unsupported("logit_bias", "%s has no logit bias", api)
	case req.Logprobs || req.TopLogprobs != nil:
		return gateway.Unsupported("logprobs", "%s returns no log probabilities", api)
	case len(req.Metadata) > 0:
		return gateway.Unsupported("metadata", "%s's metadata holds only a user id (send user)", api)
	case req.ReasoningEffort != "":
		return gateway.Unsupported("reasoning_effort", "%s has no reasoning effort (its extended thinking takes a token budget: call /v1/messages with thinking)", api)
	case req.ServiceTier != "" && req.ServiceTier != "auto":
		return gateway.Unsupported("service_tier", "%s's service tiers are not OpenAI's: only \"auto\" is carried", api)
	case req.ResponseFormat != nil && req.ResponseFormat.Type != "text":
		return gateway.Unsupported("response_format", "%s has no JSON mode this adapter can promise: response_format %q is refused rather than answered with plain text", api, req.ResponseFormat.Type)
	}
	return nil
}

// userContent is a user message's content: its text, or its parts as
// blocks.
func userContent(i int, m gateway.Message) (any, error) {
	if len(m.Parts) == 0 {
		return m.Content, nil
	}
	blocks := make([]wireBlock, 0, len(m.Parts))
	for j, p := range m.Parts {
		switch p.Type {
		case gateway.PartText:
			blocks = append(blocks, wireBlock{Type: "text", Text: p.Text})
		case gateway.PartImage:
			if p.Detail != "" && p.Detail != "auto" {
				return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d].image_url.detail", i, j),
					"Anthropic's Messages API has no image detail: send \"auto\" or none")
			}
			src, err := imageFrom(p.URL)
			if err != nil {
				return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d].image_url.url", i, j), "%v", err)
			}
			blocks = append(blocks, wireBlock{Type: "image", Source: src})
		default:
			return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j),
				"a content part of type %q cannot be sent to Anthropic's Messages API", p.Type)
		}
	}
	return blocks, nil
}

// assistantContent is an assistant message's content: its text, then its
// tool calls as tool_use blocks.
func assistantContent(i int, m gateway.Message) (any, error) {
	if len(m.ToolCalls) == 0 && len(m.Parts) == 0 {
		return m.Content, nil
	}
	var blocks []wireBlock
	for j, p := range m.Parts {
		if p.Type != gateway.PartText {
			return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "an assistant's content is sent to Anthropic as text only")
		}
	}
	if text := m.Text(); text != "" {
		blocks = append(blocks, wireBlock{Type: "text", Text: text})
	}
	for j, tc := range m.ToolCalls {
		input := json.RawMessage(tc.Arguments)
		if strings.TrimSpace(tc.Arguments) == "" {
			input = json.RawMessage("{}")
		}
		if !json.Valid(input) {
			return nil, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j),
				Message: "a tool call's arguments must be JSON"}
		}
		blocks = append(blocks, wireBlock{Type: "tool_use", ID: tc.ID, Name: tc.Name, Input: input})
	}
	return blocks, nil
}

// imageFrom is an image's source: a data: URL's bytes, or an http(s) URL
// Anthropic fetches.
func imageFrom(url string) (*imageSource, error) {
	if rest, ok := strings.CutPrefix(url, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		media, enc, _ := strings.Cut(meta, ";")
		if !ok || enc != "base64" || media == "" {
			return nil, fmt.Errorf("an image's data: URL must be base64 with its media type (data:image/png;base64,...)")
		}
		return &imageSource{Type: "base64", MediaType: media, Data: data}, nil
	}
	if strings.HasPrefix(url, "https://") || strings.HasPrefix(url, "http://") {
		return &imageSource{Type: "url", URL: url}, nil
	}
	return nil, fmt.Errorf("an image's URL must be http(s) or a data: URL")
}
