package bedrock

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// embedAPI names Bedrock's embeddings in refusals.
const embedAPI = "Bedrock's InvokeModel embeddings"

// Embed embeds the input's texts with InvokeModel, in the body of the
// model's family: Amazon Titan Text Embeddings (one text a call, its
// dimensions), or Cohere Embed (the texts in one call). Any other model
// (Claude, Llama... have no embeddings) is refused naming the model.
func (a *Adapter) Embed(ctx context.Context, req gateway.EmbedRequest) (gateway.Embedding, error) {
	switch {
	case len(req.Extra) > 0:
		return gateway.Embedding{}, gateway.Unsupported(req.Extra[0], "%s is not a parameter %s take", req.Extra[0], embedAPI)
	case req.User != "":
		return gateway.Embedding{}, gateway.Unsupported("user", "%s have no end-user id", embedAPI)
	}
	texts, err := translate.EmbedInputs(req.Input, embedAPI)
	if err != nil {
		return gateway.Embedding{}, err
	}
	if _, err := translate.Vector(nil, req.EncodingFormat); err != nil {
		return gateway.Embedding{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	var vectors [][]float64
	var tokens int64
	switch model := req.Model; {
	case strings.Contains(model, "titan-embed"):
		for _, t := range texts {
			body := map[string]any{"inputText": t}
			if req.Dimensions != nil {
				body["dimensions"] = *req.Dimensions
			}
			var ans struct {
				Embedding           []float64 `json:"embedding"`
				InputTextTokenCount int64     `json:"inputTextTokenCount"`
			}
			if _, err := a.invoke(ctx, model, body, &ans); err != nil {
				return gateway.Embedding{}, err
			}
			vectors = append(vectors, ans.Embedding)
			tokens += ans.InputTextTokenCount
		}
	case strings.Contains(model, "cohere.embed"):
		if req.Dimensions != nil {
			return gateway.Embedding{}, gateway.Unsupported("dimensions", "Cohere's embeddings on Bedrock have their model's dimensions")
		}
		var ans struct {
			Embeddings [][]float64 `json:"embeddings"`
		}
		n, err := a.invoke(ctx, model, map[string]any{"texts": texts, "input_type": "search_document"}, &ans)
		if err != nil {
			return gateway.Embedding{}, err
		}
		vectors, tokens = ans.Embeddings, n
	default:
		return gateway.Embedding{}, gateway.Unsupported("model", "Bedrock model %q has no embeddings the gateway can call: Amazon Titan (amazon.titan-embed-*) and Cohere (cohere.embed-*) models embed", model)
	}
	if len(vectors) != len(texts) {
		return gateway.Embedding{}, &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("%d embeddings for %d inputs", len(vectors), len(texts))}
	}
	out := gateway.Embedding{Model: req.Model, Vectors: make([]json.RawMessage, len(vectors))}
	for i, v := range vectors {
		if out.Vectors[i], err = translate.Vector(v, req.EncodingFormat); err != nil {
			return gateway.Embedding{}, err
		}
	}
	if tokens == 0 {
		tokens = translate.EstimateTokens(texts...) // Bedrock said none: never priced at 0 silently
	}
	out.Usage.Input = tokens
	return out, nil
}

// invoke calls InvokeModel with body as JSON and decodes its answer into
// v; tokens is the input's count from X-Amzn-Bedrock-Input-Token-Count
// (0 when absent).
func (a *Adapter) invoke(ctx context.Context, model string, body, v any) (tokens int64, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, fmt.Errorf("encoding request: %w", err)
	}
	out, err := a.client.InvokeModel(ctx, &bedrockruntime.InvokeModelInput{ModelId: aws.String(model), Body: b,
		ContentType: aws.String("application/json"), Accept: aws.String("application/json")})
	if err != nil {
		return 0, classify(ctx, "calling InvokeModel", err)
	}
	if err := json.Unmarshal(out.Body, v); err != nil {
		return 0, &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf("decoding InvokeModel's answer: %v", err)}
	}
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		tokens, _ = strconv.ParseInt(raw.Header.Get("X-Amzn-Bedrock-Input-Token-Count"), 10, 64)
	}
	return tokens, nil
}
