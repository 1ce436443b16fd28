// Package anthropic is the gateway's adapter for Anthropic's Messages API
// (POST /v1/messages): it turns a gateway.Request into Anthropic's request
// shape, and Anthropic's answers, server-sent events, usage fields and
// errors into the gateway's types.
//
// It owns the wire format and nothing else: it never retries, never fails
// over and never waits out a rate limit (the router decides, from the
// gateway.ProviderError it returns), and it keeps no state between calls.
package anthropic

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Defaults for the zero fields of Config.
const (
	DefaultBaseURL      = "https://api.anthropic.com"
	DefaultVersion      = "2023-06-01"
	DefaultTimeout      = 60 * time.Second
	DefaultStallTimeout = 30 * time.Second
	DefaultMaxTokens    = 1024
)

const (
	messagesPath = "/v1/messages"
	modelsPath   = "/v1/models"

	headerAPIKey           = "x-api-key"
	headerAnthropicVersion = "anthropic-version"
	contentTypeJSON        = "application/json"
	contentTypeEventStream = "text/event-stream"

	// systemSeparator joins the request's system messages into one prompt.
	systemSeparator = "\n\n"

	maxResponseBytes  = 32 << 20 // a whole non-streamed answer
	maxErrorBodyBytes = 1 << 20
	maxEventLineBytes = 1 << 20 // one SSE line; longer is a broken stream
)

// Errors of New.
var (
	ErrNoAPIKey   = errors.New("anthropic: no API key")
	ErrBadBaseURL = errors.New("anthropic: base URL must be an absolute http or https URL")
)

// Config configures an Adapter. Zero fields take the defaults above.
type Config struct {
	// BaseURL is the API's root, without /v1 (default DefaultBaseURL).
	BaseURL string
	// APIKey is sent as x-api-key; required.
	APIKey string
	// Version is sent as anthropic-version (default DefaultVersion).
	Version string
	// HTTPClient sends the requests (default: a client on
	// http.DefaultTransport). Its own Timeout, if any, also bounds
	// streams; leave it zero and use Timeout and StallTimeout.
	HTTPClient *http.Client
	// Timeout bounds a Complete or HealthCheck call from start to end,
	// and a Stream call until the response headers arrive (default
	// DefaultTimeout). A stream, once started, is bounded by StallTimeout
	// and the caller's ctx only.
	Timeout time.Duration
	// StallTimeout is how long a stream may send no byte at all (pings
	// count) before it is given up as failed with KindTimeout (default
	// DefaultStallTimeout).
	StallTimeout time.Duration
	// DefaultMaxTokens is max_tokens for requests that set none: Anthropic
	// requires one (default DefaultMaxTokens).
	DefaultMaxTokens int
}

// Adapter calls Anthropic's Messages API. It is safe for concurrent use.
type Adapter struct {
	baseURL      string
	apiKey       string
	version      string
	client       *http.Client
	timeout      time.Duration
	stallTimeout time.Duration
	maxTokens    int
	// now is time.Now; tests replace it to read rate-limit reset headers.
	now func() time.Time
}

var _ gateway.Adapter = (*Adapter)(nil)

// New returns an Adapter for cfg. It returns ErrNoAPIKey without an API
// key and ErrBadBaseURL for a base URL that is not absolute http(s).
func New(cfg Config) (*Adapter, error) {
	if cfg.APIKey == "" {
		return nil, ErrNoAPIKey
	}
	if cfg.Timeout < 0 || cfg.StallTimeout < 0 || cfg.DefaultMaxTokens < 0 {
		return nil, errors.New("anthropic: negative timeout or max tokens")
	}
	a := &Adapter{
		baseURL:      cmp.Or(cfg.BaseURL, DefaultBaseURL),
		apiKey:       cfg.APIKey,
		version:      cmp.Or(cfg.Version, DefaultVersion),
		client:       cfg.HTTPClient,
		timeout:      cmp.Or(cfg.Timeout, DefaultTimeout),
		stallTimeout: cmp.Or(cfg.StallTimeout, DefaultStallTimeout),
		maxTokens:    cmp.Or(cfg.DefaultMaxTokens, DefaultMaxTokens),
		now:          time.Now,
	}
	u, err := url.Parse(a.baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: %q", ErrBadBaseURL, a.baseURL)
	}
	a.baseURL = strings.TrimRight(a.baseURL, "/")
	if a.client == nil {
		a.client = &http.Client{Transport: gateway.Transport()}
	}
	return a, nil
}

// Wire shapes of the Messages API (only the fields the gateway uses).
type (
	messagesResponse struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Content []struct {
			Type  string          `json:"type"`
			Text  string          `json:"text"`
			ID    string          `json:"id"`
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
		} `json:"content"`
		StopReason string    `json:"stop_reason"`
		Usage      wireUsage `json:"usage"`
	}
	// wireUsage's fields are pointers so that a message_delta's usage
	// tells which counts it carries (only those replace earlier ones).
	wireUsage struct {
		InputTokens              *int64 `json:"input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	}
)

// mergeInto sets the counts u carries in dst. Anthropic's input_tokens
// already excludes the cache reads and writes, as gateway.Usage.Input does.
func (u wireUsage) mergeInto(dst *gateway.Usage) {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&dst.Input, u.InputTokens)
	set(&dst.Output, u.OutputTokens)
	set(&dst.CachedInput, u.CacheReadInputTokens)
	set(&dst.CacheWrite, u.CacheCreationInputTokens)
}

// finishReason maps Anthropic's stop_reason to the gateway's words.
func finishReason(stopReason string) string {
	switch stopReason {
	case "end_turn", "stop_sequence":
		return "stop"
	case "max_tokens":
		return "length"
	case "tool_use":
		return "tool_calls"
	}
	return strings.ToLower(stopReason)
}

// newRequest returns an HTTP request to path with Anthropic's headers.
func (a *Adapter) newRequest(ctx context.Context, method, path string, body []byte) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hr, err := http.NewRequestWithContext(ctx, method, a.baseURL+path, rd)
	if err != nil {
		return nil, fmt.Errorf("building request: %w", err)
	}
	hr.Header.Set(headerAPIKey, a.apiKey)
	hr.Header.Set(headerAnthropicVersion, a.version)
	if body != nil {
		hr.Header.Set("content-type", contentTypeJSON)
	}
	return hr, nil
}

// Complete sends req to POST /v1/messages and returns the whole answer.
// Errors are *gateway.ProviderError, except when ctx is cancelled: the
// error then wraps ctx.Err().
func (a *Adapter) Complete(ctx context.Context, req gateway.Request) (gateway.Response, error) {
	mr, err := a.requestBody(req, false)
	if err != nil {
		return gateway.Response{}, err
	}
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	hr, err := a.newRequest(cctx, http.MethodPost, messagesPath, mr)
	if err != nil {
		return gateway.Response{}, err
	}
	hr.Header.Set("accept", contentTypeJSON)
	resp, err := a.client.Do(hr)
	if err != nil {
		return gateway.Response{}, transportError(ctx, "sending request", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return gateway.Response{}, a.statusError(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return gateway.Response{}, transportError(ctx, "reading response", err)
	}
	if len(body) > maxResponseBytes {
		return gateway.Response{}, &gateway.ProviderError{Kind: gateway.KindServer, Status: resp.StatusCode,
			Message: fmt.Sprintf("response longer than %d bytes", maxResponseBytes)}
	}
	var mresp messagesResponse
	if err := json.Unmarshal(body, &mresp); err != nil {
		return gateway.Response{}, &gateway.ProviderError{Kind: gateway.KindServer, Status: resp.StatusCode,
			Message: fmt.Sprintf("decoding response: %v", err)}
	}
	var text strings.Builder
	var calls []gateway.ToolCall
	for _, block := range mresp.Content {
		switch block.Type {
		case "text":
			text.WriteString(block.Text)
		case "tool_use":
			args := string(block.Input)
			if args == "" || args == "null" {
				args = "{}"
			}
			calls = append(calls, gateway.ToolCall{ID: block.ID, Name: block.Name, Arguments: args})
		}
	}
	out := gateway.Response{
		ID:           mresp.ID,
		Model:        mresp.Model,
		Content:      text.String(),
		FinishReason: finishReason(mresp.StopReason),
		ToolCalls:    calls,
	}
	mresp.Usage.mergeInto(&out.Usage)
	if native(req) {
		// The caller speaks this API: it gets the answer as it is
		// (thinking blocks, citations... included).
		out.Native = &gateway.Native{Shape: gateway.ShapeAnthropicMessages, Body: body}
	}
	return out, nil
}

// HealthCheck lists the models (GET /v1/models): nil when the answer is
// 2xx, else the *gateway.ProviderError (a refused key is KindAuth).
func (a *Adapter) HealthCheck(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	hr, err := a.newRequest(cctx, http.MethodGet, modelsPath, nil)
	if err != nil {
		return err
	}
	hr.Header.Set("accept", contentTypeJSON)
	resp, err := a.client.Do(hr)
	if err != nil {
		return transportError(ctx, "checking health", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return a.statusError(resp)
	}
	// Drain (boundedly) so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBodyBytes))
	return nil
}
