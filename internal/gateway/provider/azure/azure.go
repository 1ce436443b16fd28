// Package azure is the gateway's adapter for Azure OpenAI: OpenAI's Chat
// Completions and Embeddings wire format (provider/openai reads and
// writes it) behind Azure's own addressing. A call goes to
// {endpoint}/openai/deployments/{deployment}/chat/completions with the
// api-version query, the key in the api-key header; the deployment is the
// gateway deployment's model, so one Azure resource serves several
// models from one endpoint. APIVersion "v1" speaks Azure's v1 API instead
// ({endpoint}/openai/v1/..., the deployment named by the body's model).
//
// It owns Azure's URLs and key header only: the request and answer
// shapes, the streams (Azure's first chunk holds only its
// prompt_filter_results), the usage and the errors (a content-filter
// refusal is a 400 of type content_filter: a bad request, never retried
// nor failed over) are provider/openai's. Like every adapter it never
// retries, fails over or counts cost, and never logs the key.
package azure

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/gateway/provider/openai"
)

// DefaultAPIVersion is the api-version sent when Config names none: the
// latest generally available data-plane version when this was written.
const DefaultAPIVersion = "2024-10-21"

// APIv1 is the APIVersion that selects Azure's v1 API.
const APIv1 = "v1"

// ErrNoEndpoint is New's refusal of a Config without an endpoint.
var ErrNoEndpoint = errors.New("azure: no endpoint (the resource's https://NAME.openai.azure.com)")

// Config configures an adapter.
type Config struct {
	// Endpoint is the Azure OpenAI resource's endpoint, without /openai:
	// "https://NAME.openai.azure.com". Required.
	Endpoint string
	// APIVersion is the api-version query (empty: DefaultAPIVersion;
	// APIv1: the v1 API, which takes none).
	APIVersion string
	// APIKey is sent as the api-key header.
	APIKey string
	// HTTPClient, Timeout, StallTimeout, Name and Logger are as
	// openai.Config's (Name's default is "azure").
	HTTPClient   *http.Client
	Timeout      time.Duration
	StallTimeout time.Duration
	Name         string
	Logger       hclog.Logger
}

// New returns the adapter for cfg: an openai.Adapter that addresses
// Azure's deployments.
func New(cfg Config) (*openai.Adapter, error) {
	if cfg.Endpoint == "" {
		return nil, ErrNoEndpoint
	}
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("azure: endpoint %q: want an absolute http(s) URL", cfg.Endpoint)
	}
	root := strings.TrimRight(cfg.Endpoint, "/")
	root = strings.TrimSuffix(root, "/openai")
	version := cfg.APIVersion
	if version == "" {
		version = DefaultAPIVersion
	}
	if strings.ContainsAny(version, "&?#/ ") {
		return nil, fmt.Errorf("azure: api_version %q: want a version like %q", version, DefaultAPIVersion)
	}
	name := cfg.Name
	if name == "" {
		name = "azure"
	}
	endpoint := func(path, deployment string) string {
		if version == APIv1 {
			return root + "/openai/v1" + path
		}
		q := "?api-version=" + url.QueryEscape(version)
		if path == "/models" {
			return root + "/openai/models" + q
		}
		return root + "/openai/deployments/" + url.PathEscape(deployment) + path + q
	}
	return openai.New(openai.Config{
		BaseURL:      root + "/openai",
		APIKey:       cfg.APIKey,
		AuthHeader:   "api-key",
		HTTPClient:   cfg.HTTPClient,
		Timeout:      cfg.Timeout,
		StallTimeout: cfg.StallTimeout,
		Name:         name,
		Logger:       cfg.Logger,
		Endpoint:     endpoint,
	})
}
