package openai

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The Chat Completions wire format: the request the adapter builds from
// the gateway's fields (when the caller's request is not in this shape),
// and the fields it reads of the answers. A caller's request in this
// shape (gateway.Native) is sent as it is, apart from the model (and, on
// a stream, stream_options.include_usage), and its answers are returned
// as they are.

// chatRequest is the body of POST /chat/completions.
type chatRequest struct {
	Model               string             `json:"model"`
	Messages            []chatMessage      `json:"messages"`
	MaxTokens           int                `json:"max_tokens,omitempty"`
	MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	TopP                *float64           `json:"top_p,omitempty"`
	Stop                []string           `json:"stop,omitempty"`
	User                string             `json:"user,omitempty"`
	Seed                *int64             `json:"seed,omitempty"`
	PresencePenalty     *float64           `json:"presence_penalty,omitempty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty,omitempty"`
	LogitBias           map[string]float64 `json:"logit_bias,omitempty"`
	Metadata            map[string]string  `json:"metadata,omitempty"`
	ServiceTier         string             `json:"service_tier,omitempty"`
	ReasoningEffort     string             `json:"reasoning_effort,omitempty"`
	Tools               []chatTool         `json:"tools,omitempty"`
	ToolChoice          any                `json:"tool_choice,omitempty"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls,omitempty"`
	ResponseFormat      *responseFormat    `json:"response_format,omitempty"`
	Stream              bool               `json:"stream,omitempty"`
	// StreamOptions asks for the final usage chunk of a stream.
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is a string, an array of parts, or null (an assistant's
	// message with tool calls only).
	Content    any            `json:"content"`
	Name       string         `json:"name,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatPart struct {
	Type     string        `json:"type"`
	Text     string        `json:"text,omitempty"`
	ImageURL *chatImageURL `json:"image_url,omitempty"`
}

type chatImageURL struct {
	URL    string `json:"url"`
	Detail string `json:"detail,omitempty"`
}

type chatToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string         `json:"type"`
	Function chatToolSchema `json:"function"`
}

type chatToolSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type responseFormat struct {
	Type       string      `json:"type"`
	JSONSchema *jsonSchema `json:"json_schema,omitempty"`
}

type jsonSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats is vLLM's: the usage on every chunk.
	ContinuousUsageStats bool `json:"continuous_usage_stats,omitempty"`
}

// requestBody is the body to send for req: the caller's own (Native in
// this shape) with the model set and, on a stream, include_usage (the
// gateway counts the usage); or one built from the gateway's fields.
// usageAsked says whether the caller asked for the usage chunk itself
// (false: the adapter added it, and does not pass it on).
func (a *Adapter) requestBody(req gateway.Request, stream bool) (body []byte, usageAsked bool, err error) {
	if req.Native != nil && req.Native.Shape == gateway.ShapeOpenAIChat {
		return a.nativeBody(req.Native.Body, req.Model, stream)
	}
	cr, err := newChatRequest(req, stream)
	if err != nil {
		return nil, false, err
	}
	switch {
	case cr.StreamOptions == nil:
	case a.noStreamOptions:
		cr.StreamOptions = nil
	case a.continuousUsage:
		cr.StreamOptions.ContinuousUsageStats = true
	}
	b, err := json.Marshal(cr)
	if err != nil {
		return nil, false, fmt.Errorf("encoding request: %w", err)
	}
	return b, false, nil
}

// nativeBody edits a caller's Chat Completions request in place: model
// becomes the deployment's; a stream gets "stream": true and
// stream_options.include_usage true (the other stream_options kept), and
// continuous_usage_stats with Config.ContinuousUsage; with
// Config.NoStreamOptions, stream_options is taken out instead.
func (a *Adapter) nativeBody(body []byte, model string, stream bool) ([]byte, bool, error) {
	b, err := gateway.SetJSONField(body, "model", model)
	if err != nil {
		return nil, false, gateway.Unsupported("", "the request is not a JSON object: %v", err)
	}
	v, _ := gateway.JSONField(b, "stream")
	if isTrue := string(v) == "true"; isTrue != stream && (stream || len(v) > 0) {
		if b, err = gateway.SetJSONField(b, "stream", stream); err != nil {
			return nil, false, err
		}
	}
	if !stream {
		return b, false, nil
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := gateway.JSONField(b, "stream_options"); ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &opts); err != nil {
			return nil, false, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: "stream_options", Message: "stream_options must be an object"}
		}
	}
	asked := string(opts["include_usage"]) == "true"
	if a.noStreamOptions {
		b, err := deleteJSONField(b, "stream_options")
		return b, asked, err
	}
	_, continuous := opts["continuous_usage_stats"]
	if asked && (continuous || !a.continuousUsage) {
		return b, true, nil
	}
	opts["include_usage"] = json.RawMessage("true")
	if a.continuousUsage && !continuous {
		opts["continuous_usage_stats"] = json.RawMessage("true")
	}
	b, err = gateway.SetJSONField(b, "stream_options", opts)
	return b, asked, err
}

// deleteJSONField returns body without its top-level member key (body
// itself when it has none); every other byte is kept.
func deleteJSONField(body []byte, key string) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("removing %s: not a JSON object", key)
	}
	first := true
	for dec.More() {
		start := int(dec.InputOffset()) // after '{' or the previous value
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("removing %s: %w", key, err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("removing %s: %w", key, err)
		}
		end := int(dec.InputOffset())
		if name, _ := tok.(string); name != key {
			first = false
			continue
		}
		rest := body[end:]
		if first {
			// The first member: its comma follows it (if another does).
			trimmed := bytes.TrimLeft(rest, " \t\r\n")
			if len(trimmed) > 0 && trimmed[0] == ',' {
				rest = bytes.TrimLeft(trimmed[1:], " \t\r\n")
			}
		}
		out := make([]byte, 0, len(body))
		return append(append(out, body[:start]...), rest...), nil
	}
	return body, nil
}

// newChatRequest builds the body from the gateway's fields, refusing what
// this API cannot take, or what the gateway's answer could not bring
// back (n > 1 and logprobs: a caller in this API's own shape gets them).
func newChatRequest(req gateway.Request, stream bool) (chatRequest, error) {
	if len(req.Extra) > 0 {
		return chatRequest{}, gateway.Unsupported(req.Extra[0], "%s is not a parameter of OpenAI's Chat Completions API, which this deployment speaks", req.Extra[0])
	}
	switch {
	case req.N > 1:
		return chatRequest{}, gateway.Unsupported("n", "n > 1 is carried only for requests in OpenAI's Chat Completions shape")
	case req.Logprobs || req.TopLogprobs != nil:
		return chatRequest{}, gateway.Unsupported("logprobs", "logprobs are carried only for requests in OpenAI's Chat Completions shape")
	case req.TopK != nil:
		return chatRequest{}, gateway.Unsupported("top_k", "top_k is not a parameter of OpenAI's Chat Completions API")
	}
	msgs := make([]chatMessage, len(req.Messages))
	for i, m := range req.Messages {
		cm := chatMessage{Role: m.Role, Content: m.Content, Name: m.Name, ToolCallID: m.ToolCallID}
		if len(m.Parts) > 0 {
			parts := make([]chatPart, len(m.Parts))
			for j, p := range m.Parts {
				switch p.Type {
				case gateway.PartText:
					parts[j] = chatPart{Type: "text", Text: p.Text}
				case gateway.PartImage:
					parts[j] = chatPart{Type: "image_url", ImageURL: &chatImageURL{URL: p.URL, Detail: p.Detail}}
				default:
					return chatRequest{}, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j),
						"a content part of type %q cannot be sent to OpenAI's Chat Completions API", p.Type)
				}
			}
			cm.Content = parts
		}
		for _, tc := range m.ToolCalls {
			cm.ToolCalls = append(cm.ToolCalls, chatToolCall{ID: tc.ID, Type: "function", Function: chatFunction{Name: tc.Name, Arguments: tc.Arguments}})
		}
		if len(cm.ToolCalls) > 0 && m.Content == "" && len(m.Parts) == 0 {
			cm.Content = nil
		}
		msgs[i] = cm
	}
	cr := chatRequest{
		Model:               req.Model,
		Messages:            msgs,
		MaxTokens:           req.MaxTokens,
		MaxCompletionTokens: req.MaxCompletionTokens,
		Temperature:         req.Temperature,
		TopP:                req.TopP,
		Stop:                req.Stop,
		User:                req.User,
		Seed:                req.Seed,
		PresencePenalty:     req.PresencePenalty,
		FrequencyPenalty:    req.FrequencyPenalty,
		LogitBias:           req.LogitBias,
		Metadata:            req.Metadata,
		ServiceTier:         req.ServiceTier,
		ReasoningEffort:     req.ReasoningEffort,
		ParallelToolCalls:   req.ParallelToolCalls,
	}
	for _, t := range req.Tools {
		cr.Tools = append(cr.Tools, chatTool{Type: "function", Function: chatToolSchema{Name: t.Name, Description: t.Description, Parameters: t.Parameters, Strict: t.Strict}})
	}
	if tc := req.ToolChoice; tc != nil {
		switch tc.Mode {
		case "tool":
			cr.ToolChoice = map[string]any{"type": "function", "function": map[string]string{"name": tc.Name}}
		default:
			cr.ToolChoice = tc.Mode
		}
	}
	if rf := req.ResponseFormat; rf != nil {
		cr.ResponseFormat = &responseFormat{Type: rf.Type}
		if rf.Type == "json_schema" {
			cr.ResponseFormat.JSONSchema = &jsonSchema{Name: rf.Name, Description: rf.Description, Schema: rf.Schema, Strict: rf.Strict}
		}
	}
	if stream {
		cr.Stream = true
		cr.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return cr, nil
}

// chatCompletion is the answer of a non-streamed call (object
// "chat.completion"). A 2xx answer may still carry only an error (some
// OpenAI-compatible servers do that).
type chatCompletion struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index   int `json:"index"`
		Message struct {
			// Content is null when the model answered with tool calls
			// or a refusal only; it then decodes as "".
			Content   string         `json:"content"`
			ToolCalls []chatToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// chatChunk is one event of a streamed call (object
// "chat.completion.chunk"). With include_usage the last chunk before
// [DONE] has no choices ([] from OpenAI, null from some compatible
// servers: both decode as an empty slice) and carries the usage.
type chatChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Content   string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *wireUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// wireUsage counts tokens the OpenAI way: prompt_tokens includes the
// cached ones.
type wireUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// usage converts u to the gateway's terms, where Input excludes the
// cached input tokens.
func (u *wireUsage) usage() gateway.Usage {
	if u == nil {
		return gateway.Usage{}
	}
	var cached int64
	if u.PromptTokensDetails != nil {
		cached = u.PromptTokensDetails.CachedTokens
	}
	return gateway.Usage{
		Input:       max(u.PromptTokens-cached, 0),
		CachedInput: cached,
		Output:      u.CompletionTokens,
	}
}

// apiError is the provider's error object, from {"error": {...}}.
type apiError struct {
	Message string
	Type    string
	// Code is error.code as text: OpenAI sends a string or null,
	// vLLM a number.
	Code string
}

// ident is the most specific word the provider gave for the error: its
// code, or its type when it gave no code.
func (e apiError) ident() string {
	if e.Code != "" {
		return e.Code
	}
	return e.Type
}

// hasError reports whether raw (the "error" member of a body) is set.
func hasError(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && !bytes.Equal(raw, []byte("null"))
}

// parseAPIError reads the error out of an error body. It takes the
// shapes servers use: OpenAI's {"error": {"message", "type", "code"}},
// {"error": "text"} (Ollama), and a bare {"message", "type", "code"}
// object (older vLLM). ok is false when body is none of them.
func parseAPIError(body []byte) (e apiError, ok bool) {
	var outer struct {
		Error json.RawMessage `json:"error"`
		errorFields
	}
	if err := json.Unmarshal(body, &outer); err != nil {
		return apiError{}, false
	}
	if hasError(outer.Error) {
		return errorObject(outer.Error)
	}
	if outer.Message != "" {
		return outer.errorFields.apiError(), true
	}
	return apiError{}, false
}

// errorObject reads the value of an "error" member: an object or a
// string.
func errorObject(raw json.RawMessage) (apiError, bool) {
	var text string
	if err := json.Unmarshal(raw, &text); err == nil {
		return apiError{Message: text}, true
	}
	var f errorFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return apiError{}, false
	}
	return f.apiError(), true
}

type errorFields struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
}

func (f errorFields) apiError() apiError {
	e := apiError{Message: f.Message, Type: f.Type}
	code := bytes.TrimSpace(f.Code)
	var s string
	switch {
	case len(code) == 0 || bytes.Equal(code, []byte("null")):
	case json.Unmarshal(code, &s) == nil:
		e.Code = s
	default:
		e.Code = string(code) // a number
	}
	return e
}
