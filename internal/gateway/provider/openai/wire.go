package openai

import (
	"bytes"
	"encoding/json"

	"github.com/stickyd/stickyd/internal/gateway"
)

// The Chat Completions wire format: only the fields the adapter sends or
// reads. Unknown fields (system_fingerprint, logprobs, tool_calls...) are
// ignored on the way in.

// chatRequest is the body of POST /chat/completions.
type chatRequest struct {
	Model       string        `json:"model"`
	Messages    []chatMessage `json:"messages"`
	MaxTokens   int           `json:"max_tokens,omitempty"`
	Temperature *float64      `json:"temperature,omitempty"`
	TopP        *float64      `json:"top_p,omitempty"`
	Stop        []string      `json:"stop,omitempty"`
	User        string        `json:"user,omitempty"`
	Stream      bool          `json:"stream,omitempty"`
	// StreamOptions asks for the final usage chunk of a stream.
	StreamOptions *streamOptions `json:"stream_options,omitempty"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

func newChatRequest(req gateway.Request, stream bool) chatRequest {
	msgs := make([]chatMessage, len(req.Messages))
	for i, m := range req.Messages {
		msgs[i] = chatMessage{Role: m.Role, Content: m.Content}
	}
	cr := chatRequest{
		Model:       req.Model,
		Messages:    msgs,
		MaxTokens:   req.MaxTokens,
		Temperature: req.Temperature,
		TopP:        req.TopP,
		Stop:        req.Stop,
		User:        req.User,
	}
	if stream {
		cr.Stream = true
		cr.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	return cr
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
			Content string `json:"content"`
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
			Content string `json:"content"`
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
