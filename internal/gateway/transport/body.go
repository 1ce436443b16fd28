package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/stickyd/stickyd/internal/gateway"
)

// chatParams are the members of OpenAI's chat completion request the
// gateway reads into its own fields (gateway.Request); every other member
// the caller sends is named in Request.Extra and carried only in the
// caller's own request (gateway.Native), which an OpenAI-compatible
// deployment sends on as it is and any other refuses, naming it.
var chatParams = map[string]bool{
	"model": true, "messages": true, "max_tokens": true, "max_completion_tokens": true, "temperature": true, "top_p": true,
	"stop": true, "user": true, "n": true, "seed": true, "presence_penalty": true, "frequency_penalty": true, "logit_bias": true,
	"logprobs": true, "top_logprobs": true, "metadata": true, "service_tier": true, "reasoning_effort": true, "tools": true,
	"tool_choice": true, "parallel_tool_calls": true, "response_format": true, "stream": true, "stream_options": true,
}

// messageFields are the members of a message the gateway reads; others
// are named in Extra as messages[i].member.
var messageFields = map[string]bool{"role": true, "content": true, "name": true, "tool_calls": true, "tool_call_id": true, "refusal": true}

// completionBody is a completion request as HTTP callers send it: OpenAI's
// chat completion request, on both the REST and the OpenAI-compatible
// routes.
type completionBody struct {
	Model               string             `json:"model"`
	Messages            []bodyMessage      `json:"messages"`
	MaxTokens           *int               `json:"max_tokens"`
	MaxCompletionTokens *int               `json:"max_completion_tokens"`
	Temperature         *float64           `json:"temperature"`
	TopP                *float64           `json:"top_p"`
	Stop                stopList           `json:"stop"`
	User                string             `json:"user"`
	N                   *int               `json:"n"`
	Seed                *int64             `json:"seed"`
	PresencePenalty     *float64           `json:"presence_penalty"`
	FrequencyPenalty    *float64           `json:"frequency_penalty"`
	LogitBias           map[string]float64 `json:"logit_bias"`
	Logprobs            *bool              `json:"logprobs"`
	TopLogprobs         *int               `json:"top_logprobs"`
	Metadata            map[string]string  `json:"metadata"`
	ServiceTier         string             `json:"service_tier"`
	ReasoningEffort     string             `json:"reasoning_effort"`
	Tools               []bodyTool         `json:"tools"`
	ToolChoice          json.RawMessage    `json:"tool_choice"`
	ParallelToolCalls   *bool              `json:"parallel_tool_calls"`
	ResponseFormat      *bodyFormat        `json:"response_format"`

	// extra are the members of the body not read above (set by parse).
	extra []string
}

type bodyMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []bodyToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type bodyToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type bodyTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
}

type bodyFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// bodyPart is a content part of OpenAI's messages.
type bodyPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
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

// findExtra names the members of the body (and of its messages) the
// gateway's fields do not hold; skip are members a route reads itself.
// It reads the names alone (gateway.TokenDecoder: no value is decoded); a
// body it cannot read names nothing.
func findExtra(raw []byte, skip ...string) []string {
	dec := gateway.TokenDecoder(raw)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return nil
	}
	var extra, inMessages []string
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		k := tok.String()
		if k == "messages" {
			// The last messages member is the one (as encoding/json
			// reads it); messages that are not objects name nothing.
			inMessages, err = messageExtras(dec)
			if err != nil {
				return nil
			}
			continue
		}
		if !chatParams[k] && !contains(skip, k) {
			extra = append(extra, k)
		}
		if err := dec.SkipValue(); err != nil {
			return nil
		}
	}
	extra = append(extra, inMessages...)
	sortStrings(extra)
	return slices.Compact(extra)
}

// messageExtras reads the messages' value and names the members of each
// message the gateway's fields do not hold (none when it is not an array
// of objects).
func messageExtras(dec *jsontext.Decoder) ([]string, error) {
	if dec.PeekKind() != '[' {
		return nil, dec.SkipValue()
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	var extra []string
	objects := true
	for i := 0; dec.PeekKind() != ']'; i++ {
		if dec.PeekKind() != '{' {
			objects = false
			if err := dec.SkipValue(); err != nil {
				return nil, err
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			if k := tok.String(); !messageFields[k] {
				extra = append(extra, fmt.Sprintf("messages[%d].%s", i, k))
			}
			if err := dec.SkipValue(); err != nil {
				return nil, err
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, err
	}
	if !objects {
		return nil, nil
	}
	return extra, nil
}

// toRequest turns the body into the gateway's request, or refuses it with a
// 400 naming the field at fault.
func (b *completionBody) toRequest() (gateway.Request, error) {
	req := gateway.Request{Model: b.Model, Temperature: b.Temperature, TopP: b.TopP, Stop: b.Stop, User: b.User,
		Seed: b.Seed, PresencePenalty: b.PresencePenalty, FrequencyPenalty: b.FrequencyPenalty, LogitBias: b.LogitBias,
		TopLogprobs: b.TopLogprobs, Metadata: b.Metadata, ServiceTier: b.ServiceTier, ReasoningEffort: b.ReasoningEffort,
		ParallelToolCalls: b.ParallelToolCalls, Extra: b.extra}
	if b.N != nil {
		if *b.N < 1 {
			return gateway.Request{}, badRequest("n", "n must be at least 1")
		}
		req.N = *b.N
	}
	if b.Logprobs != nil {
		req.Logprobs = *b.Logprobs
	}
	if b.MaxTokens != nil {
		if *b.MaxTokens < 0 {
			return gateway.Request{}, badRequest("max_tokens", "max_tokens must not be negative")
		}
		req.MaxTokens = *b.MaxTokens
	}
	if b.MaxCompletionTokens != nil {
		if *b.MaxCompletionTokens < 0 {
			return gateway.Request{}, badRequest("max_completion_tokens", "max_completion_tokens must not be negative")
		}
		req.MaxCompletionTokens = *b.MaxCompletionTokens
	}
	for i, t := range b.Tools {
		if t.Type != "function" {
			req.Extra = append(req.Extra, fmt.Sprintf("tools[%d]", i))
			continue
		}
		req.Tools = append(req.Tools, gateway.Tool{Name: t.Function.Name, Description: t.Function.Description,
			Parameters: nullToNil(t.Function.Parameters), Strict: t.Function.Strict})
	}
	tc, err := toolChoice(b.ToolChoice)
	if err != nil {
		return gateway.Request{}, err
	}
	req.ToolChoice = tc
	if f := b.ResponseFormat; f != nil {
		switch f.Type {
		case "text", "json_object", "json_schema":
		default:
			return gateway.Request{}, badRequest("response_format.type", "response_format.type %q: want text, json_object or json_schema", f.Type)
		}
		req.ResponseFormat = &gateway.ResponseFormat{Type: f.Type}
		if s := f.JSONSchema; s != nil {
			req.ResponseFormat.Name, req.ResponseFormat.Description = s.Name, s.Description
			req.ResponseFormat.Schema, req.ResponseFormat.Strict = nullToNil(s.Schema), s.Strict
		}
	}
	for i, m := range b.Messages {
		msg, err := toMessage(i, m)
		if err != nil {
			return gateway.Request{}, err
		}
		req.Messages = append(req.Messages, msg)
	}
	if err := checkRequest(req); err != nil {
		return gateway.Request{}, err
	}
	return req, nil
}

// toolChoice reads OpenAI's tool_choice: "auto", "none", "required" or
// {"type": "function", "function": {"name"}}.
func toolChoice(raw json.RawMessage) (*gateway.ToolChoice, error) {
	if !present(raw) {
		return nil, nil
	}
	var mode string
	if json.Unmarshal(raw, &mode) == nil {
		switch mode {
		case "auto", "none", "required":
			return &gateway.ToolChoice{Mode: mode}, nil
		}
		return nil, badRequest("tool_choice", "tool_choice %q: want auto, none, required or a function", mode)
	}
	var named struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &named) != nil || named.Type != "function" || named.Function.Name == "" {
		return nil, badRequest("tool_choice", "tool_choice must be auto, none, required or {\"type\": \"function\", \"function\": {\"name\": ...}}")
	}
	return &gateway.ToolChoice{Mode: "tool", Name: named.Function.Name}, nil
}

// toMessage reads one of OpenAI's messages; its content is a string, null,
// or an array of parts (text and images read; other types named by their
// type, which only an OpenAI-compatible deployment carries).
func toMessage(i int, m bodyMessage) (gateway.Message, error) {
	role := m.Role
	if role == "developer" {
		// OpenAI's newer name for system instructions.
		role = "system"
	}
	msg := gateway.Message{Role: role, Name: m.Name, ToolCallID: m.ToolCallID}
	for _, tc := range m.ToolCalls {
		msg.ToolCalls = append(msg.ToolCalls, gateway.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	c := bytes.TrimSpace(m.Content)
	switch {
	case len(c) == 0 || bytes.Equal(c, []byte("null")):
	case c[0] == '"':
		if err := json.Unmarshal(c, &msg.Content); err != nil {
			return msg, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content: %v", i, err)
		}
	default:
		var parts []bodyPart
		if err := json.Unmarshal(c, &parts); err != nil {
			return msg, badRequest(fmt.Sprintf("messages[%d].content", i), "messages[%d].content must be a string or an array of parts", i)
		}
		for j, p := range parts {
			switch p.Type {
			case "text":
				msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartText, Text: p.Text})
			case "image_url":
				if p.ImageURL == nil || p.ImageURL.URL == "" {
					return msg, badRequest(fmt.Sprintf("messages[%d].content[%d].image_url", i, j), "an image_url part needs its url")
				}
				msg.Parts = append(msg.Parts, gateway.Part{Type: gateway.PartImage, URL: p.ImageURL.URL, Detail: p.ImageURL.Detail})
			case "":
				return msg, badRequest(fmt.Sprintf("messages[%d].content[%d].type", i, j), "a content part needs its type")
			default:
				msg.Parts = append(msg.Parts, gateway.Part{Type: p.Type})
			}
		}
	}
	return msg, nil
}

// present reports whether a raw JSON field holds something other than
// null or an empty array.
func present(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != "[]"
}

func nullToNil(raw json.RawMessage) json.RawMessage {
	if !present(raw) {
		return nil
	}
	return raw
}

func contains(ss []string, s string) bool { return slices.Contains(ss, s) }

func sortStrings(ss []string) { slices.Sort(ss) }
