package cluster

import (
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclsimple"

	"github.com/stickyd/stickyd/internal/gateway"
)

// Finish fills the listeners' defaults and refuses a block the gateway
// could not run.
func TestFinish(t *testing.T) {
	model := func() *Model {
		return &Model{Name: "m", Concurrency: 1, Deployments: []*Deployment{{Name: "d", Provider: "openai", Model: "x", Price: &gateway.Price{Input: 1, Output: 2}}}}
	}
	c := &Config{Models: []*Model{model()}}
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	free := &Config{Models: []*Model{model()}}
	free.Models[0].Deployments[0].Price = &gateway.Price{Free: true}
	if err := free.Finish(); err != nil {
		t.Fatalf("a free deployment: %v", err)
	}
	if c.Address != "127.0.0.1:4660" || c.GRPCAddress != "127.0.0.1:4661" {
		t.Fatalf("defaults: %q %q", c.Address, c.GRPCAddress)
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no model", func(c *Config) { c.Models = nil }, "at least one model"},
		{"twice", func(c *Config) { c.Models = append(c.Models, model()) }, "configured twice"},
		{"no concurrency", func(c *Config) { c.Models[0].Concurrency = 0 }, "concurrency must be at least 1"},
		{"bad duration", func(c *Config) { c.CallTimeout = "soon" }, "call_timeout"},
		{"bad zone", func(c *Config) { c.DayZone = "Mars/Olympus" }, "day_zone"},
		{"negative budget", func(c *Config) { c.DayBudget = -1 }, "must not be negative"},
		{"unknown key budget", func(c *Config) { c.KeyBudgets = map[string]float64{"k": 1} }, "not in api_keys"},
		{"provider", func(c *Config) { c.Models[0].Deployments[0].Provider = "x" }, "want one of openai, compat, anthropic, gemini, azure, bedrock"},
		{"compat without base_url", func(c *Config) { c.Models[0].Deployments[0].Provider = "compat" }, "needs base_url"},
		{"azure without key", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.Provider, d.BaseURL = "azure", "https://res.openai.azure.com"
		}, "needs its key"},
		{"gemini without key", func(c *Config) { c.Models[0].Deployments[0].Provider = "gemini" }, "needs its key"},
		{"bedrock without region", func(c *Config) { c.Models[0].Deployments[0].Provider = "bedrock" }, "needs region"},
		{"bedrock with a key", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.Provider, d.Region, d.APIKeyEnv = "bedrock", "us-east-1", "K"
		}, "AWS SDK's chain"},
		{"region elsewhere", func(c *Config) { c.Models[0].Deployments[0].Region = "us-east-1" }, "region is not a setting of provider \"openai\""},
		{"api_version elsewhere", func(c *Config) { c.Models[0].Deployments[0].APIVersion = "v1" }, "api_version is not a setting"},
		{"headers elsewhere", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.Provider, d.Region, d.Headers = "bedrock", "us-east-1", map[string]string{"X": "y"}
		}, "headers is not a setting of provider \"bedrock\""},
		{"quirks at odds", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.NoStreamOptions, d.ContinuousUsage = true, true
		}, "set one"},
		{"two keys", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.APIKeyEnv, d.APIKeyFile = "K", "/k"
		}, "not both"},
		{"stall", func(c *Config) { c.Models[0].Deployments[0].StallTimeout = "-1s" }, "stall_timeout"},
		{"no price", func(c *Config) { c.Models[0].Deployments[0].Price = nil }, "no price block: price it in dollars per million tokens, price { input = 3  output = 15 }, or say it costs nothing, price { free = true }"},
		{"zero price", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{} }, "price { free = true }"},
		{"free and priced", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{Free: true, Output: 1} }, "choose one"},
		{"negative price", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{Input: -1} }, "must not be negative"},
		{"routing", func(c *Config) { c.Models[0].Routing = "fastest" }, `routing "fastest": want ordered, weighted, least-busy or latency`},
		{"weight without weighted routing", func(c *Config) { c.Models[0].Deployments[0].Weight = 2 }, `weight is read only by routing = "weighted"`},
		{"negative weight", func(c *Config) {
			c.Models[0].Routing, c.Models[0].Deployments[0].Weight = "weighted", -1
		}, "weight must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Config{Models: []*Model{model()}}
			tc.edit(c)
			err := c.Finish()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Every provider a deployment may name builds its adapter from the
// deployment's own settings.
func TestNewAdapter(t *testing.T) {
	t.Setenv("TEST_PROVIDER_KEY", "k")
	t.Setenv("AWS_CA_BUNDLE", "")
	price := &gateway.Price{Input: 1}
	for _, d := range []*Deployment{
		{Name: "o", Provider: "openai", Model: "m", Price: price},
		{Name: "c", Provider: "compat", Model: "m", BaseURL: "http://vllm:8000/v1", Headers: map[string]string{"X-Team": "a"}, AuthHeader: "X-Key", ContinuousUsage: true, Price: price},
		{Name: "a", Provider: "anthropic", Model: "m", APIKeyEnv: "TEST_PROVIDER_KEY", Price: price},
		{Name: "g", Provider: "gemini", Model: "m", APIKeyEnv: "TEST_PROVIDER_KEY", Price: price},
		{Name: "z", Provider: "azure", Model: "m", BaseURL: "https://res.openai.azure.com", APIVersion: "2024-10-21", APIKeyEnv: "TEST_PROVIDER_KEY", Price: price},
		{Name: "b", Provider: "bedrock", Model: "m", Region: "eu-central-1", Price: price},
	} {
		c := &Config{Models: []*Model{{Name: "m", Concurrency: 1, Deployments: []*Deployment{d}}}}
		if err := c.Finish(); err != nil {
			t.Fatalf("%s: %v", d.Provider, err)
		}
		if _, err := newAdapter(d); err != nil {
			t.Fatalf("%s: %v", d.Provider, err)
		}
	}
}

// A model's routing and its deployments' weights are read from HCL; a
// model without routing is ordered.
func TestRoutingConfig(t *testing.T) {
	const src = `
gateway {
  model "chat" {
    concurrency = 4
    routing     = "weighted"
    deployment "a" {
      provider = "openai"
      model    = "x"
      weight   = 3
      price {
        free = true
      }
    }
    deployment "b" {
      provider = "openai"
      model    = "x"
      price {
        free = true
      }
    }
  }
  model "plain" {
    concurrency = 1
    deployment "a" {
      provider = "openai"
      model    = "x"
      price {
        free = true
      }
    }
  }
}
`
	var f struct {
		Gateway *Config `hcl:"gateway,block"`
	}
	if err := hclsimple.Decode("agent.hcl", []byte(src), nil, &f); err != nil {
		t.Fatal(err)
	}
	if err := f.Gateway.Finish(); err != nil {
		t.Fatal(err)
	}
	chat, plain := f.Gateway.Models[0], f.Gateway.Models[1]
	if chat.Routing != "weighted" || chat.Deployments[0].Weight != 3 || chat.Deployments[1].Weight != 0 {
		t.Fatalf("chat: routing %q, weights %d and %d", chat.Routing, chat.Deployments[0].Weight, chat.Deployments[1].Weight)
	}
	if plain.Routing != "ordered" {
		t.Fatalf("a model without routing: %q", plain.Routing)
	}
}
