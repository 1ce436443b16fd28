package agent

import (
	"slices"
	"testing"

	"github.com/stickyd/stickyd/internal/groups"
)

// The configuration's groups reach package groups as recipes: a plugin
// block's runtime, command, arguments and environment.
func TestConfiguredGroups(t *testing.T) {
	src := `
python_sdk = "/opt/stickyd/python"
group "shop" {
  workers = 2
  plugin {
    runtime = "python3"
    command = "pyshop.app:application"
    args    = ["--threads", "4"]
    env     = { PYTHONPATH = "/srv/apps" }
  }
}
group "web" {
  builtin = "counter"
  env     = { X = "1" }
}
`
	c, err := ParseConfig("test.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	gs := configuredGroups(c)
	if len(gs) != 2 {
		t.Fatalf("groups %+v", gs)
	}
	shop, web := gs[0], gs[1]
	if shop.Group != "shop" || shop.Workers != 2 || shop.Runtime != groups.RuntimePython3 || shop.Command != "pyshop.app:application" ||
		!slices.Equal(shop.Args, []string{"--threads", "4"}) || shop.Env["PYTHONPATH"] != "/srv/apps" {
		t.Fatalf("shop %+v", shop)
	}
	if web.Group != "web" || web.Builtin != "counter" || web.Env["X"] != "1" || web.Runtime != "" {
		t.Fatalf("web %+v", web)
	}
}
