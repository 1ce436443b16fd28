package gemini

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

type (
	batchEmbedRequest struct {
		Requests []embedRequest `json:"requests"`
	}
	embedRequest struct {
		Model                string  `json:"model"`
		Content              content `json:"content"`
		OutputDimensionality *int    `json:"outputDimensionality,omitempty"`
	}
	batchEmbedAnswer struct {
		Embeddings []struct {
			Values []float64 `json:"values"`
		} `json:"embeddings"`
		UsageMetadata *struct {
			PromptTokenCount int64 `json:"promptTokenCount"`
		} `json:"usageMetadata"`
	}
)

// Embed embeds the input's texts with batchEmbedContents, one request
// each, and writes the vectors as the caller asked (floats or base64).
// Gemini reports no token count for embeddings where it says none: the
// input is then counted at about four bytes a token (the gateway's
// estimate), so the call is never priced at 0 silently.
func (a *Adapter) Embed(ctx context.Context, req gateway.EmbedRequest) (gateway.Embedding, error) {
	if len(req.Extra) > 0 {
		return gateway.Embedding{}, gateway.Unsupported(req.Extra[0], "%s is not a parameter %s's embeddings take", req.Extra[0], api)
	}
	if req.User != "" {
		return gateway.Embedding{}, gateway.Unsupported("user", "%s has no end-user id", api)
	}
	texts, err := translate.EmbedInputs(req.Input, api)
	if err != nil {
		return gateway.Embedding{}, err
	}
	if _, err := translate.Vector(nil, req.EncodingFormat); err != nil {
		return gateway.Embedding{}, err
	}
	name := "models/" + strings.TrimPrefix(req.Model, "models/")
	br := batchEmbedRequest{Requests: make([]embedRequest, len(texts))}
	for i, t := range texts {
		br.Requests[i] = embedRequest{Model: name, Content: content{Parts: []part{textPart(t)}}, OutputDimensionality: req.Dimensions}
	}
	body, err := json.Marshal(br)
	if err != nil {
		return gateway.Embedding{}, fmt.Errorf("encoding request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	resp, err := a.do(ctx, http.MethodPost, a.method(req.Model, "batchEmbedContents"), body)
	if err != nil {
		return gateway.Embedding{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return gateway.Embedding{}, translate.TransportError(ctx, "reading embeddings", err)
	}
	if len(b) > maxBody {
		return gateway.Embedding{}, serverError("embeddings longer than %d bytes", maxBody)
	}
	var ans batchEmbedAnswer
	if err := json.Unmarshal(b, &ans); err != nil {
		return gateway.Embedding{}, serverError("decoding embeddings: %v", err)
	}
	if len(ans.Embeddings) != len(texts) {
		return gateway.Embedding{}, serverError("%d embeddings for %d inputs", len(ans.Embeddings), len(texts))
	}
	out := gateway.Embedding{Model: req.Model, Vectors: make([]json.RawMessage, len(texts))}
	for i, e := range ans.Embeddings {
		if out.Vectors[i], err = translate.Vector(e.Values, req.EncodingFormat); err != nil {
			return gateway.Embedding{}, err
		}
	}
	if ans.UsageMetadata != nil && ans.UsageMetadata.PromptTokenCount > 0 {
		out.Usage.Input = ans.UsageMetadata.PromptTokenCount
	} else {
		out.Usage.Input = translate.EstimateTokens(texts...)
	}
	return out, nil
}
