// Package translate holds what the adapters of APIs other than OpenAI's
// share when they turn the gateway's fields (OpenAI's words: data: URLs,
// embedding inputs, float vectors, tool answers) into their provider's,
// and their HTTP failures into gateway errors. It has no state and calls
// nothing: each adapter still owns its provider's wire format.
package translate

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
)

// DataURL splits a data: URL of base64 bytes into its media type and its
// bytes (still base64, as providers take them); ok is false for any other
// URL or encoding.
func DataURL(url string) (media, data string, ok bool) {
	rest, found := strings.CutPrefix(url, "data:")
	if !found {
		return "", "", false
	}
	meta, data, found := strings.Cut(rest, ",")
	media, enc, _ := strings.Cut(meta, ";")
	if !found || enc != "base64" || media == "" {
		return "", "", false
	}
	return media, data, true
}

// EmbedInputs reads OpenAI's embeddings input as texts: a string or an
// array of strings. Token arrays, which only OpenAI's own models read, are
// refused naming "input".
func EmbedInputs(raw json.RawMessage, api string) ([]string, error) {
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err == nil && len(many) > 0 {
		return many, nil
	}
	return nil, gateway.Unsupported("input", "%s embeds text: input must be a string or an array of strings (token arrays are OpenAI's)", api)
}

// Vector writes an embedding as OpenAI's API would for format: an array
// of numbers ("" or "float"), or "base64" of little-endian float32s (the
// official clients ask for it).
func Vector(values []float64, format string) (json.RawMessage, error) {
	switch format {
	case "", "float":
		return json.Marshal(values)
	case "base64":
		b := make([]byte, 4*len(values))
		for i, v := range values {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
		}
		return json.Marshal(base64.StdEncoding.EncodeToString(b))
	}
	return nil, gateway.Unsupported("encoding_format", "encoding_format %q is not one of float, base64", format)
}

// EstimateTokens is the gateway's estimate of the tokens of texts when a
// provider reports none: about four bytes each, at least one a text.
func EstimateTokens(texts ...string) int64 {
	var n int64
	for _, s := range texts {
		n += max(int64(len(s)+3)/4, 1)
	}
	return n
}

// ToolName finds the name of the tool call id among the messages before
// the i-th (a tool's answer names only its call; Gemini wants the
// function's name): the latest call with that id.
func ToolName(msgs []gateway.Message, i int, id string) (string, bool) {
	for j := i - 1; j >= 0; j-- {
		for _, tc := range msgs[j].ToolCalls {
			if tc.ID == id {
				return tc.Name, true
			}
		}
	}
	return "", false
}

// ToolOutput is a tool's answer as a JSON object, which Gemini and
// Bedrock want: the answer itself when it is one, else {"output": text}.
func ToolOutput(text string) json.RawMessage {
	trimmed := strings.TrimSpace(text)
	if strings.HasPrefix(trimmed, "{") && json.Valid([]byte(trimmed)) {
		return json.RawMessage(trimmed)
	}
	b, _ := json.Marshal(map[string]string{"output": text})
	return b
}

// TransportError classifies err, returned by the HTTP client for a call
// under ctx: the caller's cancel passes through as the context's error, a
// deadline or a transport timeout is KindTimeout, anything else
// KindNetwork.
func TransportError(ctx context.Context, doing string, err error) error {
	if ctx.Err() == context.Canceled {
		return fmt.Errorf("%s: %w", doing, context.Canceled)
	}
	var ne net.Error
	if ctx.Err() == context.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) {
		return &gateway.ProviderError{Kind: gateway.KindTimeout, Message: fmt.Sprintf("%s: %v", doing, err)}
	}
	return &gateway.ProviderError{Kind: gateway.KindNetwork, Message: fmt.Sprintf("%s: %v", doing, err)}
}

// Common refuses, for an adapter of api, the parameters that only
// OpenAI's Chat Completions carries or that the gateway's answer cannot
// bring back, the ones every non-OpenAI adapter refuses alike: Extra (a
// parameter of the caller's own API), n > 1 and logprobs (the gateway's
// answer has one choice and no logprobs).
func Common(req gateway.Request, api string) error {
	switch {
	case len(req.Extra) > 0:
		return gateway.Unsupported(req.Extra[0], "%s is not a parameter of %s, which this deployment speaks", req.Extra[0], api)
	case req.N > 1:
		return gateway.Unsupported("n", "%s makes one answer per request through the gateway: n must be 1", api)
	case req.Logprobs || req.TopLogprobs != nil:
		return gateway.Unsupported("logprobs", "logprobs are carried only to OpenAI-compatible deployments, not to %s", api)
	case len(req.LogitBias) > 0:
		return gateway.Unsupported("logit_bias", "%s has no logit bias", api)
	case req.ReasoningEffort != "":
		return gateway.Unsupported("reasoning_effort", "reasoning_effort is not carried to %s", api)
	}
	return nil
}
