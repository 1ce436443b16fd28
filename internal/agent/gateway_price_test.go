package agent

import (
	"strings"
	"testing"
)

// A gateway deployment states its price: a missing price block is refused
// when the configuration is read, saying how to price it at 0.
func TestGatewayPriceRequired(t *testing.T) {
	const block = "gateway {\n model \"m\" {\n concurrency = 1\n deployment \"d\" {\n provider = \"openai\"\n model = \"x\"\n%s }\n }\n}\n"
	if _, err := ParseConfig("agent.hcl", []byte(strings.ReplaceAll(block, "%s", ""))); err == nil ||
		!strings.Contains(err.Error(), `deployment "d": no price block`) || !strings.Contains(err.Error(), "price { free = true }") {
		t.Fatalf("no price block: %v", err)
	}
	for _, price := range []string{"price {\n free = true\n }\n", "price {\n input = 3\n output = 15\n }\n"} {
		c, err := ParseConfig("agent.hcl", []byte(strings.ReplaceAll(block, "%s", price)))
		if err != nil {
			t.Fatalf("%q: %v", price, err)
		}
		if p := c.Gateway.Models[0].Deployments[0].Price; p == nil || (!p.Free && p.Output != 15) {
			t.Fatalf("%q read as %+v", price, p)
		}
	}
}
