package cluster

import (
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Config is the gateway block.
type Config struct {
	// Address serves the async REST API and the OpenAI-compatible
	// /v1/chat/completions (default 127.0.0.1:4660); GRPCAddress the
	// Gateway gRPC service (default 127.0.0.1:4661).
	Address     string `hcl:"address,optional"`
	GRPCAddress string `hcl:"grpc_address,optional"`
	// APIKeys maps a caller's name to its API key (sent as a bearer
	// token); the name is the session its costs go to unless the caller
	// names one. Empty: the gateway listener takes every caller.
	APIKeys map[string]string `hcl:"api_keys,optional"`
	// QueueTimeout bounds a call's wait for a slot ("1m"); CallTimeout one
	// attempt ("2m"); RetryAfterCap the longest retry-after honoured
	// before failing over ("10s").
	QueueTimeout  string `hcl:"queue_timeout,optional"`
	CallTimeout   string `hcl:"call_timeout,optional"`
	RetryAfterCap string `hcl:"retry_after_cap,optional"`
	// DayZone is the calendar of the day counters (IANA name, default
	// UTC).
	DayZone string `hcl:"day_zone,optional"`
	// SessionBudget and DayBudget, in US dollars, refuse the calls of a
	// session or a day that spent them (0: none).
	SessionBudget float64 `hcl:"session_budget,optional"`
	DayBudget     float64 `hcl:"day_budget,optional"`
	// KeyBudget, in US dollars, refuses the calls of an API key that spent
	// it, over its life (0: none); KeyBudgets sets it for a key by name
	// (a key named there with 0 has none).
	KeyBudget  float64            `hcl:"key_budget,optional"`
	KeyBudgets map[string]float64 `hcl:"key_budgets,optional"`
	Models     []*Model           `hcl:"model,block"`

	// TracerProvider, set by the agent (not a setting of the block),
	// traces every call (the telemetry block); nil: none.
	TracerProvider trace.TracerProvider
}

// Model is a model callers ask for by name.
type Model struct {
	Name string `hcl:"name,label"`
	// Concurrency is the aggregate limit: calls of this model running at
	// once, cluster-wide. QueueMax bounds the calls waiting (1000).
	Concurrency int `hcl:"concurrency"`
	QueueMax    int `hcl:"queue_max,optional"`
	// MaxOutputTokens is the most tokens an answer may hold (the
	// provider's cap for the model): what a call that names no
	// max_tokens reserves against its budgets. 0: such a call reserves
	// its prompt alone.
	MaxOutputTokens int `hcl:"max_output_tokens,optional"`
	// Routing picks the deployment each call tries first: "ordered" (the
	// default: in the order written), "weighted" (drawn in proportion to
	// the deployments' weights), "least-busy" (the fewest calls in
	// flight) or "latency" (the lowest recent latency). Failover, health
	// and rate limits hold the same in each (docs/gateway.md).
	Routing     string        `hcl:"routing,optional"`
	Deployments []*Deployment `hcl:"deployment,block"`
}

// Deployment is one provider account serving a model, tried in the order
// the model's routing gives (by default, the order written).
type Deployment struct {
	Name string `hcl:"name,label"`
	// Provider is "openai", "compat" (an OpenAI-compatible server: vLLM,
	// Ollama, LM Studio, llama.cpp, TGI), "anthropic", "gemini", "azure"
	// (Azure OpenAI) or "bedrock" (Amazon Bedrock's Converse API).
	Provider string `hcl:"provider"`
	// BaseURL is the API's root: required for compat (the server's /v1
	// root) and azure (the resource's https://NAME.openai.azure.com);
	// for bedrock, an endpoint replacing the region's (optional).
	BaseURL string `hcl:"base_url,optional"`
	// Model is the provider's name of the model (for azure, the Azure
	// deployment's name; for bedrock, the model or inference profile id).
	Model string `hcl:"model"`

	// Headers are sent with every call (openai, compat). AuthHeader names
	// the header of the key (default Authorization: Bearer; another name
	// gets the key alone). NoStreamOptions is for servers that refuse
	// stream_options; ContinuousUsage asks for the usage on every chunk
	// (vLLM's continuous_usage_stats). Compat and openai only.
	Headers         map[string]string `hcl:"headers,optional"`
	AuthHeader      string            `hcl:"auth_header,optional"`
	NoStreamOptions bool              `hcl:"no_stream_options,optional"`
	ContinuousUsage bool              `hcl:"continuous_usage,optional"`
	// APIVersion is azure's api-version ("2024-10-21" by default; "v1"
	// for its v1 API) or gemini's path version ("v1beta" by default).
	APIVersion string `hcl:"api_version,optional"`
	// Region is bedrock's AWS region (required); AWSProfile a profile of
	// the shared AWS files (optional). Bedrock's credentials come from
	// the AWS SDK's standard chain, never from api_key_env or
	// api_key_file.
	Region     string `hcl:"region,optional"`
	AWSProfile string `hcl:"aws_profile,optional"`
	// APIKeyEnv names the environment variable holding the key, or
	// APIKeyFile a file holding it. Neither: no key (local servers).
	APIKeyEnv   string `hcl:"api_key_env,optional"`
	APIKeyFile  string `hcl:"api_key_file,optional"`
	Concurrency int    `hcl:"concurrency,optional"`
	// Weight is the deployment's share of the first attempts of a model
	// whose routing is "weighted", against its other deployments'
	// (default 1).
	Weight int `hcl:"weight,optional"`
	// Price is required: what the deployment costs, or free = true.
	Price *gateway.Price `hcl:"price,block"`
	// StallTimeout is how long a stream may send nothing (not even the
	// provider's pings) before it fails as a timeout (default "30s"); the
	// gateway's call_timeout bounds the whole stream.
	StallTimeout string `hcl:"stall_timeout,optional"`
}

// Finish checks the gateway block and fills its defaults. (That only
// servers run the gateway is the agent's to check: it knows the roles.)
func (g *Config) Finish() error {
	if g.Address == "" {
		g.Address = "127.0.0.1:4660"
	}
	if g.GRPCAddress == "" {
		g.GRPCAddress = "127.0.0.1:4661"
	}
	for name, d := range map[string]string{"queue_timeout": g.QueueTimeout, "call_timeout": g.CallTimeout, "retry_after_cap": g.RetryAfterCap} {
		if d == "" {
			continue
		}
		if v, err := time.ParseDuration(d); err != nil || v <= 0 {
			return fmt.Errorf("gateway: %s %q: want a positive duration like \"30s\"", name, d)
		}
	}
	if g.DayZone != "" {
		if _, err := time.LoadLocation(g.DayZone); err != nil {
			return fmt.Errorf("gateway: day_zone %q: %w", g.DayZone, err)
		}
	}
	if g.SessionBudget < 0 || g.DayBudget < 0 || g.KeyBudget < 0 {
		return fmt.Errorf("gateway: budgets must not be negative")
	}
	for name, b := range g.KeyBudgets {
		if _, ok := g.APIKeys[name]; !ok {
			return fmt.Errorf("gateway: key_budgets names %q, which is not in api_keys", name)
		}
		if b < 0 {
			return fmt.Errorf("gateway: key_budgets: %q's budget must not be negative", name)
		}
	}
	if len(g.Models) == 0 {
		return fmt.Errorf("gateway: configure at least one model block")
	}
	seen := map[string]bool{}
	for _, m := range g.Models {
		if seen[m.Name] {
			return fmt.Errorf("gateway: model %q is configured twice", m.Name)
		}
		seen[m.Name] = true
		if m.Concurrency < 1 {
			return fmt.Errorf("gateway: model %q: concurrency must be at least 1", m.Name)
		}
		if m.MaxOutputTokens < 0 {
			return fmt.Errorf("gateway: model %q: max_output_tokens must not be negative", m.Name)
		}
		if len(m.Deployments) == 0 {
			return fmt.Errorf("gateway: model %q: add a deployment block", m.Name)
		}
		routing, err := gateway.ParseRouting(m.Routing)
		if err != nil {
			return fmt.Errorf("gateway: model %q: %w", m.Name, err)
		}
		m.Routing = string(routing)
		for _, d := range m.Deployments {
			switch {
			case d.Weight < 0:
				return fmt.Errorf("gateway: model %q, deployment %q: weight must not be negative", m.Name, d.Name)
			case d.Weight != 0 && routing != gateway.RoutingWeighted:
				return fmt.Errorf("gateway: model %q, deployment %q: weight is read only by routing = \"weighted\" (the model's is %q)", m.Name, d.Name, routing)
			}
			if err := d.checkProvider(); err != nil {
				return fmt.Errorf("gateway: model %q, deployment %q: %w", m.Name, d.Name, err)
			}
			if d.Model == "" {
				return fmt.Errorf("gateway: model %q, deployment %q: model (the provider's name of it) is empty", m.Name, d.Name)
			}
			if d.APIKeyEnv != "" && d.APIKeyFile != "" {
				return fmt.Errorf("gateway: model %q, deployment %q: set api_key_env or api_key_file, not both", m.Name, d.Name)
			}
			if err := checkPrice(d.Price); err != nil {
				return fmt.Errorf("gateway: model %q, deployment %q: %w", m.Name, d.Name, err)
			}
			if d.StallTimeout != "" {
				if v, err := time.ParseDuration(d.StallTimeout); err != nil || v <= 0 {
					return fmt.Errorf("gateway: model %q, deployment %q: stall_timeout %q: want a positive duration like \"30s\"", m.Name, d.Name, d.StallTimeout)
				}
			}
		}
	}
	return nil
}

// providers are the deployment providers, and the fields each may set
// beyond the common ones.
var providers = map[string][]string{
	"openai":    {"headers", "auth_header", "no_stream_options", "continuous_usage"},
	"compat":    {"headers", "auth_header", "no_stream_options", "continuous_usage"},
	"anthropic": nil,
	"gemini":    {"api_version"},
	"azure":     {"api_version"},
	"bedrock":   {"region", "aws_profile"},
}

// checkProvider checks the provider and the fields that are its own.
func (d *Deployment) checkProvider() error {
	own, ok := providers[d.Provider]
	if !ok {
		return fmt.Errorf("provider %q: want one of openai, compat, anthropic, gemini, azure, bedrock", d.Provider)
	}
	set := map[string]bool{
		"headers": len(d.Headers) > 0, "auth_header": d.AuthHeader != "", "no_stream_options": d.NoStreamOptions,
		"continuous_usage": d.ContinuousUsage, "api_version": d.APIVersion != "", "region": d.Region != "", "aws_profile": d.AWSProfile != "",
	}
	for _, f := range own {
		delete(set, f)
	}
	for f, isSet := range set {
		if isSet {
			return fmt.Errorf("%s is not a setting of provider %q", f, d.Provider)
		}
	}
	hasKey := d.APIKeyEnv != "" || d.APIKeyFile != ""
	switch d.Provider {
	case "compat":
		if d.BaseURL == "" {
			return fmt.Errorf("provider \"compat\" needs base_url, the server's API root (http://vllm.service.consul:8000/v1)")
		}
	case "azure":
		if d.BaseURL == "" {
			return fmt.Errorf("provider \"azure\" needs base_url, the resource's endpoint (https://NAME.openai.azure.com)")
		}
		if !hasKey {
			return fmt.Errorf("provider \"azure\" needs its key: api_key_env or api_key_file")
		}
	case "anthropic", "gemini":
		if !hasKey {
			return fmt.Errorf("provider %q needs its key: api_key_env or api_key_file", d.Provider)
		}
	case "bedrock":
		if d.Region == "" {
			return fmt.Errorf("provider \"bedrock\" needs region (us-east-1, eu-central-1...)")
		}
		if hasKey {
			return fmt.Errorf("provider \"bedrock\" takes its credentials from the AWS SDK's chain (the environment, the shared files, a role), not from api_key_env or api_key_file")
		}
	}
	if d.NoStreamOptions && d.ContinuousUsage {
		return fmt.Errorf("continuous_usage is asked for in stream_options, which no_stream_options says the server refuses: set one")
	}
	return nil
}

// checkPrice refuses a deployment whose price is not stated: a missing
// price block would silently cost 0, so pricing at 0 is said explicitly.
func checkPrice(p *gateway.Price) error {
	const how = `price it in dollars per million tokens, price { input = 3  output = 15 }, or say it costs nothing, price { free = true }`
	switch {
	case p == nil:
		return fmt.Errorf("no price block: %s", how)
	case p.Input < 0 || p.CachedInput < 0 || p.CacheWrite < 0 || p.Output < 0:
		return fmt.Errorf("price: prices must not be negative")
	case p.Free && (p.Input != 0 || p.CachedInput != 0 || p.CacheWrite != 0 || p.Output != 0):
		return fmt.Errorf("price: free = true with prices set: choose one")
	case !p.Free && p.Input == 0 && p.CachedInput == 0 && p.CacheWrite == 0 && p.Output == 0:
		return fmt.Errorf("price: no price above 0 set: %s", how)
	}
	return nil
}

// duration parses a checked duration ("" is zero: the default).
func duration(s string) time.Duration {
	d, _ := time.ParseDuration(s)
	return d
}
