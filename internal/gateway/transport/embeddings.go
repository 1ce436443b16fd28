package transport

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/stickyd/stickyd/internal/gateway"
)

// embeddingsBody is OpenAI's embeddings request.
type embeddingsBody struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	EncodingFormat string          `json:"encoding_format"`
	Dimensions     *int            `json:"dimensions"`
	User           string          `json:"user"`
}

var embeddingsParams = map[string]bool{"model": true, "input": true, "encoding_format": true, "dimensions": true, "user": true}

// embeddings serves POST /v1/embeddings through the Service's
// EmbedService: the same limits, failover and costs as a completion.
func (h *httpServer) embeddings(w http.ResponseWriter, r *http.Request, caller string) error {
	es, ok := h.svc.(gateway.EmbedService)
	if !ok {
		return &apiError{Status: http.StatusNotImplemented, Type: typeInvalidRequest, ErrCode: "not_implemented",
			Message: "this gateway does not serve embeddings"}
	}
	var body embeddingsBody
	raw, err := h.decodeBody(w, r, &body)
	if err != nil {
		return err
	}
	if body.Model == "" {
		return badRequest("model", "model is required")
	}
	if !present(body.Input) {
		return badRequest("input", "input is required: a string, an array of strings or of token arrays")
	}
	req := gateway.EmbedRequest{Model: body.Model, Input: body.Input, EncodingFormat: body.EncodingFormat, Dimensions: body.Dimensions,
		User: body.User, Native: &gateway.Native{Shape: gateway.ShapeOpenAIEmbeddings, Body: raw}}
	var top map[string]json.RawMessage
	_ = json.Unmarshal(raw, &top)
	for k := range top {
		if !embeddingsParams[k] {
			req.Extra = append(req.Extra, k)
		}
	}
	sortStrings(req.Extra)
	call := gateway.EmbedCall{Request: req, Session: sessionOf(caller, r.Header.Get(SessionHeader), body.User), Key: caller}
	out, err := es.Embed(r.Context(), call)
	if err != nil {
		return err
	}
	setServedBy(w.Header(), out.Provider, out.Deployment)
	w.Header().Set(costTrailer, strconv.FormatInt(out.CostMicros, 10))
	meta := &streamMeta{Provider: out.Provider, Deployment: out.Deployment, CostMicros: out.CostMicros}
	if out.Native != nil && out.Native.Shape == gateway.ShapeOpenAIEmbeddings {
		if b, err := gateway.SetJSONField(out.Native.Body, "stickyd", meta); err == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(b)
			return nil
		}
	}
	data := make([]map[string]any, len(out.Vectors))
	for i, v := range out.Vectors {
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": v}
	}
	prompt := out.Usage.Input + out.Usage.CachedInput
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": firstOf(out.Model, body.Model),
		"usage": map[string]int64{"prompt_tokens": prompt, "total_tokens": prompt}, "stickyd": meta})
	return nil
}

// keyModels is the optional ability of a Service to list the models an
// API key may call.
type keyModels interface {
	ModelsFor(key string) []string
}

// models serves GET /v1/models: the models the caller's key may name, in
// OpenAI's list shape.
func (h *httpServer) models(w http.ResponseWriter, r *http.Request, key string) error {
	data := []map[string]any{}
	var names []string
	switch s := h.svc.(type) {
	case keyModels:
		names = s.ModelsFor(key)
	case gateway.ModelLister:
		names = s.Models()
	}
	for _, name := range names {
		data = append(data, map[string]any{"id": name, "object": "model", "created": 0, "owned_by": "stickyd"})
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	return nil
}
