// Package gemini is the gateway's adapter for Google's Gemini API
// (generativelanguage: models/{model}:generateContent,
// :streamGenerateContent with alt=sse, :batchEmbedContents): it turns a
// gateway.Request into Gemini's contents and parts (text, inline images,
// functionCall and functionResponse), its tools and JSON-schema output
// into functionDeclarations and responseJsonSchema, and Gemini's answers,
// events, usageMetadata and errors (RESOURCE_EXHAUSTED with its RetryInfo)
// into the gateway's types; what Gemini cannot carry is refused with
// gateway.Unsupported naming the parameter.
//
// It owns the wire format and nothing else: it never retries, fails over
// or counts cost (the router does), keeps no state between calls, and
// never logs or returns the API key.
package gemini

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gateway/provider/internal/translate"
)

// Defaults for the zero fields of Config.
const (
	DefaultBaseURL      = "https://generativelanguage.googleapis.com"
	DefaultAPIVersion   = "v1beta"
	DefaultTimeout      = 60 * time.Second
	DefaultStallTimeout = 30 * time.Second
)

const (
	headerAPIKey = "x-goog-api-key"
	// maxBody bounds a whole answer; maxEvent one event of a stream.
	maxBody      = 32 << 20
	maxEvent     = 4 << 20
	maxErrorBody = 64 << 10
	api          = "the Gemini API"
)

// ErrNoAPIKey is New's refusal of a Config without a key.
var ErrNoAPIKey = errors.New("gemini: no API key")

// Config configures an Adapter. Zero fields take the defaults above.
type Config struct {
	// BaseURL is the API's root, without the version (default
	// DefaultBaseURL).
	BaseURL string
	// APIVersion is the path's version (default DefaultAPIVersion: the
	// one with function calling's and JSON schema's newer fields).
	APIVersion string
	// APIKey is sent as x-goog-api-key; required.
	APIKey string
	// HTTPClient sends the requests (default: a client of its own). Its
	// Timeout must be zero or longer than any stream.
	HTTPClient *http.Client
	// Timeout bounds a Complete, Embed or HealthCheck call whole, and a
	// Stream call until its answer's headers (default DefaultTimeout).
	Timeout time.Duration
	// StallTimeout is how long a stream may send no byte before it fails
	// with KindTimeout (default DefaultStallTimeout).
	StallTimeout time.Duration
	// Logger receives the adapter's logs (nil: none).
	Logger hclog.Logger
}

// Adapter calls the Gemini API. It is safe for concurrent use.
type Adapter struct {
	root         string // BaseURL + "/" + version
	apiKey       string
	client       *http.Client
	timeout      time.Duration
	stallTimeout time.Duration
	log          hclog.Logger
}

var (
	_ gateway.Adapter  = (*Adapter)(nil)
	_ gateway.Embedder = (*Adapter)(nil)
)

// New returns an Adapter for cfg.
func New(cfg Config) (*Adapter, error) {
	if cfg.APIKey == "" {
		return nil, ErrNoAPIKey
	}
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gemini: base URL %q: want an absolute http(s) URL", base)
	}
	if cfg.Timeout < 0 || cfg.StallTimeout < 0 {
		return nil, errors.New("gemini: negative timeout")
	}
	version := cfg.APIVersion
	if version == "" {
		version = DefaultAPIVersion
	}
	a := &Adapter{
		root:         strings.TrimRight(base, "/") + "/" + strings.Trim(version, "/"),
		apiKey:       cfg.APIKey,
		client:       cfg.HTTPClient,
		timeout:      cfg.Timeout,
		stallTimeout: cfg.StallTimeout,
		log:          cfg.Logger,
	}
	if a.client == nil {
		a.client = &http.Client{Transport: gateway.Transport()}
	}
	if a.timeout == 0 {
		a.timeout = DefaultTimeout
	}
	if a.stallTimeout == 0 {
		a.stallTimeout = DefaultStallTimeout
	}
	if a.log == nil {
		a.log = hclog.NewNullLogger()
	}
	a.log = a.log.With("adapter", "gemini")
	return a, nil
}

// method is the URL of one of a model's methods ("generateContent").
func (a *Adapter) method(model, method string) string {
	return a.root + "/models/" + url.PathEscape(strings.TrimPrefix(model, "models/")) + ":" + method
}

// Complete sends req to generateContent and returns the first candidate.
// Errors are *gateway.ProviderError, or wrap the context's error when ctx
// was cancelled.
func (a *Adapter) Complete(ctx context.Context, req gateway.Request) (gateway.Response, error) {
	body, err := requestBody(req)
	if err != nil {
		return gateway.Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	resp, err := a.do(ctx, http.MethodPost, a.method(req.Model, "generateContent"), body)
	if err != nil {
		return gateway.Response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return gateway.Response{}, translate.TransportError(ctx, "reading the answer", err)
	}
	if len(b) > maxBody {
		return gateway.Response{}, serverError("answer longer than %d bytes", maxBody)
	}
	var gr generateResponse
	if err := json.Unmarshal(b, &gr); err != nil {
		return gateway.Response{}, serverError("decoding the answer: %v", err)
	}
	if gr.Error != nil {
		return gateway.Response{}, gr.Error.providerError(resp.StatusCode, nil)
	}
	out := gateway.Response{ID: gr.ResponseID, Model: gr.ModelVersion, Usage: gr.UsageMetadata.usage()}
	if gr.UsageMetadata == nil {
		a.log.Warn("answer without usageMetadata", "model", req.Model)
	}
	var reason string
	if c := gr.first(); c != nil {
		var text strings.Builder
		for i, p := range c.Content.Parts {
			switch {
			case p.Thought:
			case p.FunctionCall != nil:
				out.ToolCalls = append(out.ToolCalls, p.FunctionCall.toolCall(len(out.ToolCalls), p.ThoughtSignature))
			case p.Text != nil:
				text.WriteString(*p.Text)
			default:
				a.log.Debug("part not carried", "index", i)
			}
		}
		out.Content = text.String()
		reason = c.FinishReason
	} else if gr.PromptFeedback != nil && gr.PromptFeedback.BlockReason != "" {
		reason = "SAFETY" // the prompt was blocked: no candidate
	}
	out.FinishReason = finishReason(reason, len(out.ToolCalls) > 0)
	return out, nil
}

// HealthCheck lists one model (GET models?pageSize=1): nil on a 2xx
// answer, the classified error otherwise.
func (a *Adapter) HealthCheck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	resp, err := a.do(ctx, http.MethodGet, a.root+"/models?pageSize=1", nil)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// do sends a request with the key and a JSON body (nil: none). It returns
// the answer when its status is 2xx, else the classified error with the
// body read and closed.
func (a *Adapter) do(ctx context.Context, method, u string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	hr.Header.Set(headerAPIKey, a.apiKey)
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := a.client.Do(hr)
	if err != nil {
		return nil, translate.TransportError(ctx, "calling "+hr.URL.Path, err)
	}
	if resp.StatusCode/100 != 2 {
		pe := statusError(resp)
		resp.Body.Close()
		a.log.Debug("provider refused", "path", hr.URL.Path, "status", resp.StatusCode, "kind", pe.Kind, "type", pe.Type)
		return nil, pe
	}
	return resp, nil
}

// finishReason maps Gemini's finishReason to the gateway's words; a
// candidate that stopped with function calls finished with "tool_calls".
func finishReason(r string, calls bool) string {
	switch r {
	case "STOP", "":
		if calls {
			return "tool_calls"
		}
		return "stop"
	case "MAX_TOKENS":
		return "length"
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY":
		return "content_filter"
	}
	return strings.ToLower(r)
}

// serverError is a broken answer: KindServer with what was wrong.
func serverError(format string, args ...any) *gateway.ProviderError {
	return &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf(format, args...)}
}
