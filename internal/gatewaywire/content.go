package gatewaywire

import "encoding/json"

// What agents send beyond plain text: content parts, tools and their
// calls, structured output, and the caller's own request as it sent it.
// Every field is new since the first entries were written, so each is
// omitted when empty and old entries decode unchanged.

// Part is one piece of a message's content.
type Part struct {
	// Type is PartText or PartImage; other types (OpenAI's input_audio
	// and file, Anthropic's document...) are named as their API names
	// them and carried only in the caller's own request (Native): an
	// adapter of another API refuses them.
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// URL is an image's http(s) URL or data: URL (base64 bytes with
	// their media type); Detail is OpenAI's image detail ("auto", "low",
	// "high"; "" says none).
	URL    string `json:"url,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// The part types the gateway models.
const (
	PartText  = "text"
	PartImage = "image"
)

// ToolCall is a model's call of a tool: which one and its arguments, a
// JSON object as text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a function the model may call.
type Tool struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Parameters is the JSON Schema of the arguments (nil: none).
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Strict asks the provider to follow the schema exactly (OpenAI).
	Strict *bool `json:"strict,omitempty"`
}

// ToolChoice says whether and which tool the model must call.
type ToolChoice struct {
	// Mode is "auto", "none", "required" (some tool) or "tool" (Name).
	Mode string `json:"mode"`
	Name string `json:"name,omitempty"`
}

// ResponseFormat asks for structured output.
type ResponseFormat struct {
	// Type is "text", "json_object" (any JSON object) or "json_schema".
	Type string `json:"type"`
	// For json_schema: the schema's name, description, the schema and
	// whether it is followed exactly.
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// Native is a request or an answer as written in one provider API's own
// shape, byte for byte. An adapter that speaks that shape sends the
// caller's request as it is (only the model replaced, and what the
// gateway needs to count usage added) and returns the provider's answer
// as it is; an adapter of another shape works from the gateway's fields.
type Native struct {
	// Shape is one of the Shape constants.
	Shape string `json:"shape"`
	// Body is the JSON document, unchanged ([]byte: encoding/json would
	// compact and re-escape a json.RawMessage).
	Body []byte `json:"body"`
}

// The shapes of Native bodies.
const (
	// ShapeOpenAIChat is OpenAI's Chat Completions API.
	ShapeOpenAIChat = "openai.chat"
	// ShapeOpenAIEmbeddings is OpenAI's Embeddings API.
	ShapeOpenAIEmbeddings = "openai.embeddings"
	// ShapeAnthropicMessages is Anthropic's Messages API.
	ShapeAnthropicMessages = "anthropic.messages"
)
