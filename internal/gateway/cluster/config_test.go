package cluster

import (
	"strings"
	"testing"

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
		{"provider", func(c *Config) { c.Models[0].Deployments[0].Provider = "x" }, "want \"openai\" or \"anthropic\""},
		{"two keys", func(c *Config) {
			d := c.Models[0].Deployments[0]
			d.APIKeyEnv, d.APIKeyFile = "K", "/k"
		}, "not both"},
		{"stall", func(c *Config) { c.Models[0].Deployments[0].StallTimeout = "-1s" }, "stall_timeout"},
		{"no price", func(c *Config) { c.Models[0].Deployments[0].Price = nil }, "no price block: price it in dollars per million tokens, price { input = 3  output = 15 }, or say it costs nothing, price { free = true }"},
		{"zero price", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{} }, "price { free = true }"},
		{"free and priced", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{Free: true, Output: 1} }, "choose one"},
		{"negative price", func(c *Config) { c.Models[0].Deployments[0].Price = &gateway.Price{Input: -1} }, "must not be negative"},
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
