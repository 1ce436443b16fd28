package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
)

// completionBody is a completion request as HTTP callers send it: the
// fields of OpenAI's chat completion request the gateway serves, on both
// the REST and the OpenAI-compatible routes. Other fields are ignored, as
// OpenAI-compatible servers do, except those whose loss would change the
// answer's meaning (n > 1, tools), which are refused.
type completionBody struct {
	Model    string        `json:"model"`
	Messages []bodyMessage `json:"messages"`
	// MaxCompletionTokens is OpenAI's newer name for MaxTokens; it wins
	// when both are set.
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	Stop                stopList        `json:"stop"`
	User                string          `json:"user"`
	N                   *int            `json:"n"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
}

type bodyMessage struct {
	Role    string      `json:"role"`
	Content bodyContent `json:"content"`
}

// bodyContent is a message's content: a string, null, or an array of text
// parts, which are joined by newlines.
type bodyContent string

func (c *bodyContent) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*c = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = bodyContent(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("a message's content must be a string or an array of text parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("a message's content part of type %q is not supported: only text", p.Type)
		}
		texts = append(texts, p.Text)
	}
	*c = bodyContent(strings.Join(texts, "\n"))
	return nil
}

// stopList is OpenAI's stop: a string, an array of strings, or null.
type stopList []string

func (s *stopList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stopList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("stop must be a string or an array of strings")
	}
	*s = many
	return nil
}

// toRequest turns the body into the gateway's request, or refuses it with a
// 400 naming the field at fault.
func (b *completionBody) toRequest() (gateway.Request, error) {
	if b.N != nil && *b.N != 1 {
		return gateway.Request{}, badRequest("n", "n must be 1: the gateway returns one choice")
	}
	if present(b.Tools) || present(b.Functions) {
		return gateway.Request{}, badRequest("tools", "tools and functions are not supported by the gateway")
	}
	req := gateway.Request{Model: b.Model, Temperature: b.Temperature, TopP: b.TopP, Stop: b.Stop, User: b.User}
	switch {
	case b.MaxCompletionTokens != nil:
		if *b.MaxCompletionTokens < 0 {
			return gateway.Request{}, badRequest("max_completion_tokens", "max_completion_tokens must not be negative")
		}
		req.MaxTokens = *b.MaxCompletionTokens
	case b.MaxTokens != nil:
		req.MaxTokens = *b.MaxTokens
	}
	for _, m := range b.Messages {
		role := m.Role
		if role == "developer" {
			// OpenAI's newer name for system instructions.
			role = "system"
		}
		req.Messages = append(req.Messages, gateway.Message{Role: role, Content: string(m.Content)})
	}
	if err := checkRequest(req); err != nil {
		return gateway.Request{}, err
	}
	return req, nil
}

// present reports whether a raw JSON field holds something other than
// null or an empty array.
func present(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "[]"
}
