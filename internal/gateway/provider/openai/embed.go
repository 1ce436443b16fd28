package openai

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/stickyd/stickyd/internal/gateway"
)

var _ gateway.Embedder = (*Adapter)(nil)

// embedRequest is the body of POST /embeddings built from the gateway's
// fields (a caller's request in this shape is sent as it is).
type embedRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format,omitempty"`
	Dimensions     *int            `json:"dimensions,omitempty"`
	User           string          `json:"user,omitempty"`
}

// embedAnswer is the fields read of its answer.
type embedAnswer struct {
	Model string `json:"model"`
	Data  []struct {
		Index     int             `json:"index"`
		Embedding json.RawMessage `json:"embedding"`
	} `json:"data"`
	Usage *wireUsage `json:"usage"`
}

// Embed sends req to POST {BaseURL}/embeddings. A caller's request in
// OpenAI's own shape is sent as it is (the model replaced) and its answer
// returned as it is too (Native).
func (a *Adapter) Embed(ctx context.Context, req gateway.EmbedRequest) (gateway.Embedding, error) {
	var body []byte
	native := req.Native != nil && req.Native.Shape == gateway.ShapeOpenAIEmbeddings
	var err error
	if native {
		if body, err = gateway.SetJSONField(req.Native.Body, "model", req.Model); err != nil {
			return gateway.Embedding{}, gateway.Unsupported("", "the request is not a JSON object: %v", err)
		}
	} else {
		if len(req.Extra) > 0 {
			return gateway.Embedding{}, gateway.Unsupported(req.Extra[0], "%s is not a parameter of OpenAI's Embeddings API", req.Extra[0])
		}
		if body, err = json.Marshal(embedRequest{Model: req.Model, Input: req.Input, EncodingFormat: req.EncodingFormat, Dimensions: req.Dimensions, User: req.User}); err != nil {
			return gateway.Embedding{}, fmt.Errorf("encoding request: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	resp, err := a.do(ctx, http.MethodPost, a.url("/embeddings", req.Model), "application/json", body)
	if err != nil {
		return gateway.Embedding{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return gateway.Embedding{}, transportError(ctx, "reading embeddings", err)
	}
	if len(b) > maxBody {
		return gateway.Embedding{}, serverError("embeddings longer than %d bytes", maxBody)
	}
	var ea embedAnswer
	if err := json.Unmarshal(b, &ea); err != nil {
		return gateway.Embedding{}, serverError("decoding embeddings: %v", err)
	}
	out := gateway.Embedding{Model: ea.Model, Vectors: make([]json.RawMessage, len(ea.Data)), Usage: ea.Usage.usage()}
	for i, d := range ea.Data {
		at := d.Index
		if at < 0 || at >= len(out.Vectors) {
			at = i
		}
		out.Vectors[at] = d.Embedding
	}
	if native {
		out.Native = &gateway.Native{Shape: gateway.ShapeOpenAIEmbeddings, Body: b}
	}
	return out, nil
}
