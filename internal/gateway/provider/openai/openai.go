// Package openai is the gateway's adapter for the OpenAI Chat Completions
// API (POST /chat/completions, GET /models). It speaks the real wire
// format, so it also serves OpenAI-compatible servers (vLLM, Ollama,
// LM Studio, llama.cpp, TGI) by pointing BaseURL at them: the deployment
// provider "compat" is this adapter with the quirks of Config (headers,
// the key's header, no stream_options, usage on every chunk), and
// provider/azure builds it with Azure's URLs and key header. One adapter
// for every server of this wire format keeps one parser and one error
// classifier to fix, whoever speaks it.
//
// It owns the translation between gateway.Request/Response/Chunk and the
// provider's JSON and server-sent events, the provider's usage fields
// (prompt_tokens includes the cached tokens; gateway.Usage.Input does
// not) and the classification of its errors into gateway.ProviderError.
// It must never retry, queue, fail over or count cost (the router does),
// and never log or return the API key.
package openai

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
)

// Defaults for the zero values of Config.
const (
	DefaultBaseURL      = "https://api.openai.com/v1"
	DefaultTimeout      = 60 * time.Second
	DefaultStallTimeout = 30 * time.Second
)

// Limits on what is read from the provider.
const (
	// maxBody bounds a whole non-streamed answer.
	maxBody = 16 << 20
	// maxLine bounds one line (and one event) of a stream: a longer one
	// is a broken answer, not a reason to run out of memory.
	maxLine = 1 << 20
)

// Config configures an Adapter.
type Config struct {
	// BaseURL is the API root, without the trailing /chat/completions
	// (empty: DefaultBaseURL). For a compatible server, its /v1 root,
	// e.g. "http://vllm.service.consul:8000/v1".
	BaseURL string
	// APIKey is sent as "Authorization: Bearer <key>"; empty sends no
	// Authorization header (local servers need none).
	APIKey string
	// Organization, when set, is sent as the OpenAI-Organization header.
	Organization string
	// HTTPClient makes the calls (nil: a client of its own). Its Timeout
	// must be zero or longer than any stream: the adapter bounds calls
	// itself.
	HTTPClient *http.Client
	// Timeout bounds a Complete or HealthCheck call whole, and a Stream
	// call until the answer's headers have arrived (zero:
	// DefaultTimeout). The caller's ctx bounds a stream whole.
	Timeout time.Duration
	// StallTimeout is how long a stream may go without a byte before it
	// fails with KindTimeout (zero: DefaultStallTimeout). Time spent
	// waiting for the reader of the stream's channel does not count.
	StallTimeout time.Duration
	// Name names the adapter in logs (empty: "openai").
	Name string

	// The quirks of OpenAI-compatible servers and of Azure.

	// Headers are sent with every call, after the adapter's own (a
	// compatible server's or a proxy's headers).
	Headers map[string]string
	// AuthHeader names the header that carries APIKey: "" (or
	// "Authorization") sends "Authorization: Bearer <key>"; any other
	// name ("api-key", "x-api-key") sends the key as it is.
	AuthHeader string
	// NoStreamOptions is for servers that refuse stream_options: it is
	// never sent (not added, and taken out of a caller's own request), so
	// a stream's usage is whatever the server sends unasked (nothing:
	// the stream is counted as free, with a warning).
	NoStreamOptions bool
	// ContinuousUsage asks a stream for its usage on every chunk (vLLM's
	// stream_options.continuous_usage_stats), so that a stream cut midway
	// is charged what the server had reported. A caller's own request
	// then gets the usage on its chunks too, as the server sends them.
	ContinuousUsage bool
	// Endpoint, when set, makes the URL of a call from its API path
	// ("/chat/completions", "/embeddings", "/models") and the request's
	// model (Azure puts its deployment, the model, in the path). nil:
	// BaseURL + path.
	Endpoint func(path, model string) string
	// Logger receives the adapter's logs (nil: none).
	Logger hclog.Logger
}

// Adapter calls one OpenAI-compatible deployment. It is safe for
// concurrent use.
type Adapter struct {
	base         string // BaseURL without a trailing slash
	apiKey       string
	organization string
	client       *http.Client
	timeout      time.Duration
	stallTimeout time.Duration
	log          hclog.Logger
	headers      map[string]string
	authHeader   string
	// noStreamOptions and continuousUsage are Config's quirks.
	noStreamOptions, continuousUsage bool
	endpoint                         func(path, model string) string
	// now is the clock for Retry-After dates (time.Now; tests set it).
	now func() time.Time
}

var _ gateway.Adapter = (*Adapter)(nil)

// New returns an Adapter for cfg. It fails on a BaseURL that is not an
// absolute http(s) URL or on a negative timeout.
func New(cfg Config) (*Adapter, error) {
	base := cfg.BaseURL
	if base == "" {
		base = DefaultBaseURL
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("parsing base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("parsing base URL %q: not an absolute http(s) URL", base)
	}
	if cfg.Timeout < 0 || cfg.StallTimeout < 0 {
		return nil, errors.New("configuring openai adapter: negative timeout")
	}
	if cfg.NoStreamOptions && cfg.ContinuousUsage {
		return nil, errors.New("configuring openai adapter: continuous usage is asked for in stream_options, which the server is said to refuse")
	}
	for k := range cfg.Headers {
		if !validHeaderName(k) {
			return nil, fmt.Errorf("configuring openai adapter: %q is not a header name", k)
		}
	}
	if cfg.AuthHeader != "" && !validHeaderName(cfg.AuthHeader) {
		return nil, fmt.Errorf("configuring openai adapter: auth header %q is not a header name", cfg.AuthHeader)
	}
	a := &Adapter{
		base:            strings.TrimRight(base, "/"),
		apiKey:          cfg.APIKey,
		organization:    cfg.Organization,
		client:          cfg.HTTPClient,
		timeout:         cfg.Timeout,
		stallTimeout:    cfg.StallTimeout,
		log:             cfg.Logger,
		headers:         cfg.Headers,
		authHeader:      cfg.AuthHeader,
		noStreamOptions: cfg.NoStreamOptions,
		continuousUsage: cfg.ContinuousUsage,
		endpoint:        cfg.Endpoint,
		now:             time.Now,
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
	name := cfg.Name
	if name == "" {
		name = "openai"
	}
	a.log = a.log.With("adapter", name)
	return a, nil
}

// Complete sends req to POST {BaseURL}/chat/completions and returns the
// first choice. Errors are *gateway.ProviderError, or the context's error
// when ctx was cancelled.
func (a *Adapter) Complete(ctx context.Context, req gateway.Request) (gateway.Response, error) {
	reqBody, _, err := a.requestBody(req, false)
	if err != nil {
		return gateway.Response{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	resp, err := a.do(ctx, http.MethodPost, a.url("/chat/completions", req.Model), "application/json", reqBody)
	if err != nil {
		return gateway.Response{}, err
	}
	defer resp.Body.Close()

	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return gateway.Response{}, transportError(ctx, "reading completion", err)
	}
	if len(body) > maxBody {
		return gateway.Response{}, serverError("completion longer than %d bytes", maxBody)
	}
	var cc chatCompletion
	if err := json.Unmarshal(body, &cc); err != nil {
		return gateway.Response{}, serverError("decoding completion: %v", err)
	}
	if hasError(cc.Error) {
		e, _ := errorObject(cc.Error)
		return gateway.Response{}, &gateway.ProviderError{Kind: gateway.KindServer, Status: resp.StatusCode, Type: e.ident(), Message: e.Message}
	}
	if len(cc.Choices) == 0 {
		return gateway.Response{}, serverError("completion %q has no choices", cc.ID)
	}
	choice := cc.Choices[0]
	for _, c := range cc.Choices {
		if c.Index == 0 {
			choice = c
			break
		}
	}
	if cc.Usage == nil {
		a.log.Warn("completion without usage", "model", req.Model, "id", cc.ID)
	}
	out := gateway.Response{
		ID:           cc.ID,
		Model:        cc.Model,
		Content:      choice.Message.Content,
		FinishReason: choice.FinishReason,
		Usage:        cc.Usage.usage(),
	}
	for _, tc := range choice.Message.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, gateway.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	if native(req) {
		// The caller speaks this API: it gets the answer as it is, every
		// choice and field (logprobs, refusal...) included.
		out.Native = &gateway.Native{Shape: gateway.ShapeOpenAIChat, Body: body}
	}
	return out, nil
}

// native reports whether req is the caller's own Chat Completions request,
// sent as it is and answered with the provider's own answer.
func native(req gateway.Request) bool {
	return req.Native != nil && req.Native.Shape == gateway.ShapeOpenAIChat
}

// HealthCheck lists the models (GET {BaseURL}/models): any 2xx answer is
// healthy; otherwise it returns the classified error.
func (a *Adapter) HealthCheck(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()

	resp, err := a.do(ctx, http.MethodGet, a.url("/models", ""), "application/json", nil)
	if err != nil {
		return err
	}
	// Drain a little so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	return resp.Body.Close()
}

// url is the URL of the API path for model: BaseURL + path, or what
// Config.Endpoint makes of them.
func (a *Adapter) url(path, model string) string {
	if a.endpoint != nil {
		return a.endpoint(path, model)
	}
	return a.base + path
}

// do sends a request to url with the adapter's headers, accepting accept,
// and a JSON body (nil for none), sent as it is. It returns the answer
// when its status is 2xx; otherwise the classified error, with the body
// read and closed.
func (a *Adapter) do(ctx context.Context, method, url, accept string, body []byte) (*http.Response, error) {
	req, err := a.newRequest(ctx, method, url, accept, body)
	if err != nil {
		return nil, err
	}
	path := req.URL.Path // never the query: Azure's holds nothing secret, but a proxy's might
	resp, err := a.client.Do(req)
	if err != nil {
		return nil, transportError(ctx, "calling "+path, err)
	}
	if resp.StatusCode/100 != 2 {
		pe := statusError(resp, a.now())
		resp.Body.Close()
		a.log.Debug("provider refused", "path", path, "status", resp.StatusCode, "kind", pe.Kind, "type", pe.Type)
		return nil, pe
	}
	return resp, nil
}

func (a *Adapter) newRequest(ctx context.Context, method, url, accept string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", accept)
	if a.apiKey != "" {
		switch {
		case a.authHeader == "" || strings.EqualFold(a.authHeader, "Authorization"):
			req.Header.Set("Authorization", "Bearer "+a.apiKey)
		default:
			req.Header.Set(a.authHeader, a.apiKey)
		}
	}
	if a.organization != "" {
		req.Header.Set("OpenAI-Organization", a.organization)
	}
	for k, v := range a.headers {
		req.Header.Set(k, v)
	}
	return req, nil
}

// validHeaderName reports whether s is an HTTP header name (RFC 9110
// token characters).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c > 127 || !strings.ContainsRune("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", c) {
			return false
		}
	}
	return true
}

// serverError is a broken answer: KindServer with what was wrong.
func serverError(format string, args ...any) *gateway.ProviderError {
	return &gateway.ProviderError{Kind: gateway.KindServer, Message: fmt.Sprintf(format, args...)}
}
