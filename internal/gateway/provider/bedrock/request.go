package bedrock

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// input is a Converse request built from the gateway's fields (no caller
// speaks Converse's shape to the gateway): what Converse and
// ConverseStream share.
type input struct {
	model     string
	messages  []types.Message
	system    []types.SystemContentBlock
	inference *types.InferenceConfiguration
	tools     *types.ToolConfiguration
	output    *types.OutputConfig
	metadata  map[string]string
	tier      *types.ServiceTier
}

func (in *input) converse() *bedrockruntime.ConverseInput {
	return &bedrockruntime.ConverseInput{ModelId: aws.String(in.model), Messages: in.messages, System: in.system, InferenceConfig: in.inference,
		ToolConfig: in.tools, OutputConfig: in.output, RequestMetadata: in.metadata, ServiceTier: in.tier}
}

func (in *input) converseStream() *bedrockruntime.ConverseStreamInput {
	return &bedrockruntime.ConverseStreamInput{ModelId: aws.String(in.model), Messages: in.messages, System: in.system, InferenceConfig: in.inference,
		ToolConfig: in.tools, OutputConfig: in.output, RequestMetadata: in.metadata, ServiceTier: in.tier}
}

// buildInput turns req into Converse's shape: system messages into
// system blocks, images into their bytes, an assistant's tool calls into
// toolUse blocks, tools' answers into toolResult blocks of a user turn
// (consecutive turns of one role are merged: Converse wants them to
// alternate). What Converse cannot carry is refused, naming it.
func buildInput(req gateway.Request) (*input, error) {
	if err := refuseUncarried(req); err != nil {
		return nil, err
	}
	in := &input{model: req.Model}
	inf := types.InferenceConfiguration{StopSequences: req.Stop}
	if n := cmp.Or(req.MaxCompletionTokens, req.MaxTokens); n > 0 {
		inf.MaxTokens = aws.Int32(int32(min(n, 1<<31-1)))
	}
	if req.Temperature != nil {
		inf.Temperature = aws.Float32(float32(*req.Temperature))
	}
	if req.TopP != nil {
		inf.TopP = aws.Float32(float32(*req.TopP))
	}
	if inf.MaxTokens != nil || inf.Temperature != nil || inf.TopP != nil || len(inf.StopSequences) > 0 {
		in.inference = &inf
	}
	for i, m := range req.Messages {
		if m.Name != "" {
			return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].name", i), "%s has no name for a message's author", api)
		}
		switch m.Role {
		case "system", "developer":
			for j, p := range m.Parts {
				if p.Type != gateway.PartText {
					return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "%s's system prompt takes text only", api)
				}
			}
			in.system = append(in.system, &types.SystemContentBlockMemberText{Value: m.Text()})
		case "user":
			blocks, err := userBlocks(i, m)
			if err != nil {
				return nil, err
			}
			in.messages = appendTurn(in.messages, types.ConversationRoleUser, blocks...)
		case "assistant":
			blocks, err := assistantBlocks(i, m)
			if err != nil {
				return nil, err
			}
			in.messages = appendTurn(in.messages, types.ConversationRoleAssistant, blocks...)
		case "tool":
			for j, p := range m.Parts {
				if p.Type != gateway.PartText {
					return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "a tool's answer is sent to %s as text only", api)
				}
			}
			var content types.ToolResultContentBlock = &types.ToolResultContentBlockMemberText{Value: m.Text()}
			if out := strings.TrimSpace(m.Text()); strings.HasPrefix(out, "{") {
				if doc, err := jsonDocument(json.RawMessage(out)); err == nil {
					content = &types.ToolResultContentBlockMemberJson{Value: doc}
				}
			}
			in.messages = appendTurn(in.messages, types.ConversationRoleUser, &types.ContentBlockMemberToolResult{Value: types.ToolResultBlock{
				ToolUseId: aws.String(m.ToolCallID), Content: []types.ToolResultContentBlock{content}}})
		default:
			return nil, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].role", i),
				Message: fmt.Sprintf("message %d: unknown role %q", i, m.Role)}
		}
	}
	if err := in.setTools(req); err != nil {
		return nil, err
	}
	if rf := req.ResponseFormat; rf != nil && rf.Type != "text" {
		schema, name := rf.Schema, rf.Name
		switch rf.Type {
		case "json_object":
			schema, name = json.RawMessage(`{"type":"object"}`), "json_object"
		case "json_schema":
		default:
			return nil, gateway.Unsupported("response_format", "response_format %q is not one %s has", rf.Type, api)
		}
		def := types.JsonSchemaDefinition{Schema: aws.String(string(schema))}
		if name != "" {
			def.Name = aws.String(name)
		}
		if rf.Description != "" {
			def.Description = aws.String(rf.Description)
		}
		in.output = &types.OutputConfig{TextFormat: &types.OutputFormat{Type: types.OutputFormatTypeJsonSchema,
			Structure: &types.OutputFormatStructureMemberJsonSchema{Value: def}}}
	}
	if len(req.Metadata) > 0 || req.User != "" {
		in.metadata = map[string]string{}
		for k, v := range req.Metadata {
			in.metadata[k] = v
		}
		if req.User != "" {
			if _, ok := in.metadata["user"]; ok {
				return nil, gateway.Unsupported("user", "user goes to Bedrock's requestMetadata as \"user\", which metadata names too")
			}
			in.metadata["user"] = req.User
		}
	}
	switch req.ServiceTier {
	case "", "auto":
	case "default", "flex", "priority":
		in.tier = &types.ServiceTier{Type: types.ServiceTierType(req.ServiceTier)}
	default:
		return nil, gateway.Unsupported("service_tier", "%s's service tiers are default, flex and priority", api)
	}
	return in, nil
}

// refuseUncarried refuses the parameters Converse has no equivalent of
// (top_k and the like are each model's own, in
// additionalModelRequestFields, which the gateway cannot name for every
// model).
func refuseUncarried(req gateway.Request) error {
	if err := translate.Common(req, api); err != nil {
		return err
	}
	switch {
	case req.TopK != nil:
		return gateway.Unsupported("top_k", "%s has no top_k for every model (it is a model's own field)", api)
	case req.Seed != nil:
		return gateway.Unsupported("seed", "%s has no seed", api)
	case req.PresencePenalty != nil && *req.PresencePenalty != 0:
		return gateway.Unsupported("presence_penalty", "%s has no presence penalty", api)
	case req.FrequencyPenalty != nil && *req.FrequencyPenalty != 0:
		return gateway.Unsupported("frequency_penalty", "%s has no frequency penalty", api)
	case req.ParallelToolCalls != nil && !*req.ParallelToolCalls:
		return gateway.Unsupported("parallel_tool_calls", "%s cannot be told to call one tool at a time", api)
	}
	return nil
}

// setTools carries the tools and the tool choice.
func (in *input) setTools(req gateway.Request) error {
	if len(req.Tools) == 0 {
		if req.ToolChoice != nil && req.ToolChoice.Mode != "auto" && req.ToolChoice.Mode != "none" {
			return gateway.Unsupported("tool_choice", "tool_choice %q names tools the request does not have", req.ToolChoice.Mode)
		}
		return nil
	}
	tc := &types.ToolConfiguration{}
	for i, t := range req.Tools {
		schema := t.Parameters
		if len(schema) == 0 {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		}
		doc, err := jsonDocument(schema)
		if err != nil {
			return gateway.Unsupported(fmt.Sprintf("tools[%d].function.parameters", i), "a tool's parameters must be a JSON Schema object: %v", err)
		}
		spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: doc}, Strict: t.Strict}
		if t.Description != "" {
			spec.Description = aws.String(t.Description)
		}
		tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
	}
	if c := req.ToolChoice; c != nil {
		switch c.Mode {
		case "auto":
			tc.ToolChoice = &types.ToolChoiceMemberAuto{}
		case "required":
			tc.ToolChoice = &types.ToolChoiceMemberAny{}
		case "tool":
			tc.ToolChoice = &types.ToolChoiceMemberTool{Value: types.SpecificToolChoice{Name: aws.String(c.Name)}}
		default:
			return gateway.Unsupported("tool_choice", "%s has no tool_choice %q (only auto, required and a named tool)", api, c.Mode)
		}
	}
	in.tools = tc
	return nil
}

// appendTurn adds blocks to the last turn when it is role's, or as a new
// turn.
func appendTurn(turns []types.Message, role types.ConversationRole, blocks ...types.ContentBlock) []types.Message {
	if n := len(turns); n > 0 && turns[n-1].Role == role {
		turns[n-1].Content = append(turns[n-1].Content, blocks...)
		return turns
	}
	return append(turns, types.Message{Role: role, Content: blocks})
}

// imageFormats are the media types Converse takes images in.
var imageFormats = map[string]types.ImageFormat{
	"image/png": types.ImageFormatPng, "image/jpeg": types.ImageFormatJpeg, "image/jpg": types.ImageFormatJpeg,
	"image/gif": types.ImageFormatGif, "image/webp": types.ImageFormatWebp,
}

func userBlocks(i int, m gateway.Message) ([]types.ContentBlock, error) {
	if len(m.Parts) == 0 {
		return []types.ContentBlock{&types.ContentBlockMemberText{Value: m.Content}}, nil
	}
	blocks := make([]types.ContentBlock, 0, len(m.Parts))
	for j, p := range m.Parts {
		param := fmt.Sprintf("messages[%d].content[%d]", i, j)
		switch p.Type {
		case gateway.PartText:
			blocks = append(blocks, &types.ContentBlockMemberText{Value: p.Text})
		case gateway.PartImage:
			if p.Detail != "" && p.Detail != "auto" {
				return nil, gateway.Unsupported(param+".image_url.detail", "%s has no image detail: send \"auto\" or none", api)
			}
			media, data, ok := translate.DataURL(p.URL)
			if !ok {
				return nil, gateway.Unsupported(param+".image_url.url", "%s takes images as bytes: send a data: URL (data:image/png;base64,...), not a link", api)
			}
			format, ok := imageFormats[media]
			if !ok {
				return nil, gateway.Unsupported(param+".image_url.url", "%s takes png, jpeg, gif and webp images, not %s", api, media)
			}
			raw, err := base64.StdEncoding.DecodeString(data)
			if err != nil {
				return nil, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: param + ".image_url.url", Message: "the image's data: URL is not base64"}
			}
			blocks = append(blocks, &types.ContentBlockMemberImage{Value: types.ImageBlock{Format: format, Source: &types.ImageSourceMemberBytes{Value: raw}}})
		default:
			return nil, gateway.Unsupported(param, "a content part of type %q cannot be sent to %s", p.Type, api)
		}
	}
	return blocks, nil
}

func assistantBlocks(i int, m gateway.Message) ([]types.ContentBlock, error) {
	for j, p := range m.Parts {
		if p.Type != gateway.PartText {
			return nil, gateway.Unsupported(fmt.Sprintf("messages[%d].content[%d]", i, j), "an assistant's content is sent to %s as text only", api)
		}
	}
	var blocks []types.ContentBlock
	if text := m.Text(); text != "" || len(m.ToolCalls) == 0 {
		blocks = append(blocks, &types.ContentBlockMemberText{Value: text})
	}
	for j, tc := range m.ToolCalls {
		args := json.RawMessage(tc.Arguments)
		if strings.TrimSpace(tc.Arguments) == "" {
			args = json.RawMessage("{}")
		}
		doc, err := jsonDocument(args)
		if err != nil {
			return nil, &gateway.ProviderError{Kind: gateway.KindBadRequest, Param: fmt.Sprintf("messages[%d].tool_calls[%d].function.arguments", i, j),
				Message: "a tool call's arguments must be a JSON object"}
		}
		blocks = append(blocks, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{ToolUseId: aws.String(tc.ID), Name: aws.String(tc.Name), Input: doc}})
	}
	return blocks, nil
}

// jsonDocument is a JSON object as the SDK's document.
func jsonDocument(raw json.RawMessage) (document.Interface, error) {
	// Numbers decode as float64: the SDK's document writes a json.Number
	// as a string.
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("null, not an object")
	}
	return document.NewLazyDocument(v), nil
}

// documentJSON is a document of an answer (a toolUse's input) as JSON
// text; "{}" for none.
func documentJSON(doc document.Interface) (string, error) {
	if doc == nil {
		return "{}", nil
	}
	b, err := doc.MarshalSmithyDocument()
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		return "", err
	}
	if out.String() == "null" {
		return "{}", nil
	}
	return out.String(), nil
}
