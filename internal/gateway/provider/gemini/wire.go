package gemini

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// The Gemini API's wire format: the request built from the gateway's
// fields (no caller speaks Gemini's shape to the gateway, so there is no
// native request to pass on), and the fields read of its answers.

type (
	generateRequest struct {
		Contents          []content         `json:"contents"`
		SystemInstruction *content          `json:"systemInstruction,omitempty"`
		Tools             []tool            `json:"tools,omitempty"`
		ToolConfig        *toolConfig       `json:"toolConfig,omitempty"`
		GenerationConfig  *generationConfig `json:"generationConfig,omitempty"`
	}
	content struct {
		Role  string `json:"role,omitempty"`
		Parts []part `json:"parts"`
	}
	part struct {
		Text             *string           `json:"text,omitempty"`
		Thought          bool              `json:"thought,omitempty"`
		ThoughtSignature string            `json:"thoughtSignature,omitempty"`
		InlineData       *blob             `json:"inlineData,omitempty"`
		FunctionCall     *functionCall     `json:"functionCall,omitempty"`
		FunctionResponse *functionResponse `json:"functionResponse,omitempty"`
	}
	blob struct {
		MimeType string `json:"mimeType"`
		Data     string `json:"data"`
	}
	functionCall struct {
		ID   string          `json:"id,omitempty"`
		Name string          `json:"name"`
		Args json.RawMessage `json:"args,omitempty"`
	}
	functionResponse struct {
		ID       string          `json:"id,omitempty"`
		Name     string          `json:"name"`
		Response json.RawMessage `json:"response"`
	}
	tool struct {
		FunctionDeclarations []functionDeclaration `json:"functionDeclarations"`
	}
	functionDeclaration struct {
		Name        string `json:"name"`
		Description string `json:"description,omitempty"`
		// ParametersJSONSchema takes JSON Schema as OpenAI's tools write
		// it (parameters, the older field, takes an OpenAPI subset only).
		ParametersJSONSchema json.RawMessage `json:"parametersJsonSchema,omitempty"`
	}
	toolConfig struct {
		FunctionCallingConfig functionCallingConfig `json:"functionCallingConfig"`
	}
	functionCallingConfig struct {
		Mode                 string   `json:"mode"`
		AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
	}
	generationConfig struct {
		Temperature      *float64 `json:"temperature,omitempty"`
		TopP             *float64 `json:"topP,omitempty"`
		TopK             *int     `json:"topK,omitempty"`
		MaxOutputTokens  int      `json:"maxOutputTokens,omitempty"`
		StopSequences    []string `json:"stopSequences,omitempty"`
		Seed             *int64   `json:"seed,omitempty"`
		PresencePenalty  *float64 `json:"presencePenalty,omitempty"`
		FrequencyPenalty *float64 `json:"frequencyPenalty,omitempty"`
		ResponseMimeType string   `json:"responseMimeType,omitempty"`
		// ResponseJSONSchema takes JSON Schema (responseSchema, the older
		// field, an OpenAPI subset only).
		ResponseJSONSchema json.RawMessage `json:"responseJsonSchema,omitempty"`
		MediaResolution    string          `json:"mediaResolution,omitempty"`
	}
)

// The answer of generateContent, and each event of streamGenerateContent.
type (
	generateResponse struct {
		Candidates     []candidate     `json:"candidates"`
		PromptFeedback *promptFeedback `json:"promptFeedback"`
		UsageMetadata  *usageMetadata  `json:"usageMetadata"`
		ModelVersion   string          `json:"modelVersion"`
		ResponseID     string          `json:"responseId"`
		// Error is set on an error event of a stream.
		Error *apiError `json:"error"`
	}
	candidate struct {
		Content      content `json:"content"`
		FinishReason string  `json:"finishReason"`
		Index        int     `json:"index"`
	}
	promptFeedback struct {
		BlockReason string `json:"blockReason"`
	}
	// usageMetadata counts the way Gemini does: promptTokenCount includes
	// the cached tokens, and the thinking tokens are apart from the
	// candidates' (both billed as output).
	usageMetadata struct {
		PromptTokenCount        int64 `json:"promptTokenCount"`
		CandidatesTokenCount    int64 `json:"candidatesTokenCount"`
		CachedContentTokenCount int64 `json:"cachedContentTokenCount"`
		ThoughtsTokenCount      int64 `json:"thoughtsTokenCount"`
		ToolUsePromptTokenCount int64 `json:"toolUsePromptTokenCount"`
	}
)

// first is the answer's first candidate (index 0), nil when it has none.
func (g *generateResponse) first() *candidate {
	for i := range g.Candidates {
		if g.Candidates[i].Index == 0 {
			return &g.Candidates[i]
		}
	}
	return nil
}

// usage converts u to the gateway's terms: Input excludes the cached
// tokens; Output counts the thinking tokens too.
func (u *usageMetadata) usage() gateway.Usage {
	if u == nil {
		return gateway.Usage{}
	}
	return gateway.Usage{
		Input:       max(u.PromptTokenCount+u.ToolUsePromptTokenCount-u.CachedContentTokenCount, 0),
		CachedInput: u.CachedContentTokenCount,
		Output:      u.CandidatesTokenCount + u.ThoughtsTokenCount,
	}
}

// signatureSep joins a function call's id and its thought signature in
// the id the gateway gives the caller: Gemini 3 wants the signature of
// each of its function calls back with the conversation, and an OpenAI
// or Anthropic caller sends back only the call's id.
const signatureSep = "~sig~"

// toolCall is the gateway's tool call for the i-th function call of an
// answer: Gemini's id (call_<i> when it gave none), with the part's
// thought signature.
func (f *functionCall) toolCall(i int, signature string) gateway.ToolCall {
	id := cmp.Or(f.ID, fmt.Sprintf("call_%d", i))
	if signature != "" {
		id += signatureSep + signature
	}
	var args bytes.Buffer
	if json.Compact(&args, f.Args) != nil || args.String() == "null" {
		args.Reset()
		args.WriteString("{}")
	}
	return gateway.ToolCall{ID: id, Name: f.Name, Arguments: args.String()}
}

// splitID undoes toolCall's id: Gemini's id ("" when the gateway made it
// up) and the thought signature.
func splitID(id string) (geminiID, signature string) {
	id, signature, _ = strings.Cut(id, signatureSep)
	if strings.HasPrefix(id, "call_") && isDigits(id[len("call_"):]) {
		id = ""
	}
	return id, signature
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// requestBody builds generateContent's body from req, refusing what the
// Gemini API cannot carry.
func requestBody(req gateway.Request) ([]byte, error) {
	gr, err := buildRequest(req)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(gr)
	if err != nil {
		return nil, fmt.Errorf("encoding request: %w", err)
	}
	return b, nil
}

func buildRequest(req gateway.Request) (generateRequest, error) {
	var gr generateRequest
	if err := refuseUncarried(req); err != nil {
		return gr, err
	}
	gc := generationConfig{
		Temperature:      req.Temperature,
		TopP:             req.TopP,
		TopK:             req.TopK,
		MaxOutputTokens:  cmp.Or(req.MaxCompletionTokens, req.MaxTokens),
		StopSequences:    req.Stop,
		Seed:             req.Seed,
		PresencePenalty:  req.PresencePenalty,
		FrequencyPenalty: req.FrequencyPenalty,
	}
	var system []part
	for i, m := range req.Messages {
		if m.Name != "" {
			return gr, gateway.Unsupported(fmt.Sprintf("messages[%d].name", i), "%s has no name for a message's author", api)
		}
		switch m.Role {
		case "system", "developer":
			for j, p := range m.Parts {
				if p.Type != gateway.PartText {
					return gr, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "%s's system instruction takes text only", api)
				}
			}
			system = append(system, textPart(m.Text()))
		case "user":
			parts, err := userParts(i, m, &gc)
			if err != nil {
				return gr, err
			}
			gr.Contents = appendTurn(gr.Contents, "user", parts...)
		case "assistant":
			parts, err := modelParts(i, m)
			if err != nil {
				return gr, err
			}
			gr.Contents = appendTurn(gr.Contents, "model", parts...)
		case "tool":
			for j, p := range m.Parts {
				if p.Type != gateway.PartText {
					return gr, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "a tool's answer is sent to %s as text only", api)
				}
			}
			name, ok := translate.ToolName(req.Messages, i, m.ToolCallID)
			if !ok {
				return gr, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].tool_call_id", i),
					Message: fmt.Sprintf("message %d answers tool call %q, which no earlier assistant message made (Gemini wants the function's name)", i, m.ToolCallID)}
			}
			id, _ := splitID(m.ToolCallID)
			gr.Contents = appendTurn(gr.Contents, "user", part{FunctionResponse: &functionResponse{ID: id, Name: name, Response: translate.ToolOutput(m.Text())}})
		default:
			return gr, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].role", i),
				Message: fmt.Sprintf("message %d: unknown role %q", i, m.Role)}
		}
	}
	if len(system) > 0 {
		gr.SystemInstruction = &content{Parts: system}
	}
	if len(req.Tools) > 0 {
		decls := make([]functionDeclaration, len(req.Tools))
		for i, t := range req.Tools {
			if t.Strict != nil && *t.Strict {
				return gr, gateway.Unsupported(fmt.Sprintf("tools[%d].function.strict", i), "%s does not promise to follow a tool's schema strictly", api)
			}
			decls[i] = functionDeclaration{Name: t.Name, Description: t.Description, ParametersJSONSchema: t.Parameters}
		}
		gr.Tools = []tool{{FunctionDeclarations: decls}}
	}
	if tc := req.ToolChoice; tc != nil {
		fc := functionCallingConfig{}
		switch tc.Mode {
		case "auto":
			fc.Mode = "AUTO"
		case "none":
			fc.Mode = "NONE"
		case "required":
			fc.Mode = "ANY"
		case "tool":
			fc.Mode, fc.AllowedFunctionNames = "ANY", []string{tc.Name}
		default:
			return gr, gateway.Unsupported("tool_choice", "tool_choice %q is not one %s has", tc.Mode, api)
		}
		gr.ToolConfig = &toolConfig{FunctionCallingConfig: fc}
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_object":
			gc.ResponseMimeType = "application/json"
		case "json_schema":
			gc.ResponseMimeType = "application/json"
			gc.ResponseJSONSchema = rf.Schema
		default:
			return gr, gateway.Unsupported("response_format", "response_format %q is not one %s has", rf.Type, api)
		}
	}
	if b, _ := json.Marshal(gc); string(b) != "{}" {
		gr.GenerationConfig = &gc
	}
	return gr, nil
}

// refuseUncarried refuses the parameters the Gemini API has no
// equivalent of (through the gateway's one-choice answer).
func refuseUncarried(req gateway.Request) error {
	if err := translate.Common(req, api); err != nil {
		return err
	}
	switch {
	case req.User != "":
		return gateway.Unsupported("user", "%s has no end-user id", api)
	case len(req.Metadata) > 0:
		return gateway.Unsupported("metadata", "%s has no request metadata", api)
	case req.ServiceTier != "" && req.ServiceTier != "auto":
		return gateway.Unsupported("service_tier", "%s has no service tiers: only \"auto\" is carried", api)
	case req.ParallelToolCalls != nil && !*req.ParallelToolCalls:
		return gateway.Unsupported("parallel_tool_calls", "%s cannot be told to call one function at a time", api)
	}
	return nil
}

// appendTurn adds parts to the last turn when it is role's (Gemini wants
// a turn's function responses together, and turns that alternate), or
// as a new turn.
func appendTurn(turns []content, role string, parts ...part) []content {
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Parts = append(turns[n-1].Parts, parts...)
		return turns
	}
	return append(turns, content{Role: role, Parts: parts})
}

func textPart(s string) part { return part{Text: &s} }

// userParts is a user message's parts: its text, inline images (data:
// URLs; an image's detail becomes the request's mediaResolution).
func userParts(i int, m gateway.Message, gc *generationConfig) ([]part, error) {
	if len(m.Parts) == 0 {
		return []part{textPart(m.Content)}, nil
	}
	parts := make([]part, 0, len(m.Parts))
	for j, p := range m.Parts {
		param := fmt.Sprintf("messages[%d].content[%d]", i, j)
		switch p.Type {
		case gateway.PartText:
			parts = append(parts, textPart(p.Text))
		case gateway.PartImage:
			media, data, ok := translate.DataURL(p.URL)
			if !ok {
				return nil, gateway.Unsupported(param+".image_url.url", "%s takes images inline: send a data: URL (data:image/png;base64,...), not a link", api)
			}
			if err := setResolution(gc, p.Detail, param+".image_url.detail"); err != nil {
				return nil, err
			}
			parts = append(parts, part{InlineData: &blob{MimeType: media, Data: data}})
		default:
			return nil, gateway.Unsupported(param, "a content part of type %q cannot be sent to %s", p.Type, api)
		}
	}
	return parts, nil
}

// setResolution carries an image's detail as the request's
// mediaResolution: Gemini has one for all its images.
func setResolution(gc *generationConfig, detail, param string) error {
	var res string
	switch detail {
	case "", "auto":
		return nil
	case "low":
		res = "MEDIA_RESOLUTION_LOW"
	case "high":
		res = "MEDIA_RESOLUTION_HIGH"
	default:
		return gateway.Unsupported(param, "image detail %q is not one of auto, low, high", detail)
	}
	if gc.MediaResolution != "" && gc.MediaResolution != res {
		return gateway.Unsupported(param, "%s has one resolution for all the request's images: their details differ", api)
	}
	gc.MediaResolution = res
	return nil
}

// modelParts is an assistant message's parts: its text, then its tool
// calls as functionCall parts (with their thought signatures).
func modelParts(i int, m gateway.Message) ([]part, error) {
	var parts []part
	for j, p := range m.Parts {
		if p.Type != gateway.PartText {
			return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "an assistant's content is sent to %s as text only", api)
		}
	}
	if text := m.Text(); text != "" || len(m.ToolCalls) == 0 {
		parts = append(parts, textPart(text))
	}
	for j, tc := range m.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if strings.TrimSpace(tc.Arguments) == "" {
			args = json.RawMessage("{}")
		}
		if !json.Valid(args) {
			return nil, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j),
				Message: "a tool call's arguments must be JSON"}
		}
		id, sig := splitID(tc.ID)
		parts = append(parts, part{FunctionCall: &functionCall{ID: id, Name: tc.Name, Args: args}, ThoughtSignature: sig})
	}
	return parts, nil
}
