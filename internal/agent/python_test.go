package agent

import (
	"slices"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/host"
)

func TestPythonRecipe(t *testing.T) {
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
`
	c, err := ParseConfig("test.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{cfg: c, log: hclog.NewNullLogger()}
	g := c.Groups[0]
	l, err := a.launcher(recipe{Group: g.Name, Runtime: g.Plugin.Runtime, Command: g.Plugin.Command, Args: g.Plugin.Args, Env: g.Plugin.Env})
	if err != nil {
		t.Fatal(err)
	}
	pl, ok := l.(*host.PluginLauncher)
	if !ok {
		t.Fatalf("launcher %T, want a go-plugin launcher", l)
	}
	if pl.Command != "/usr/bin/python3" || !slices.Equal(pl.Args, []string{"-m", "stickyd.worker", "pyshop.app:application", "--threads", "4"}) {
		t.Fatalf("runs %s %v", pl.Command, pl.Args)
	}
	for _, want := range []string{"PYTHONPATH=/opt/stickyd/python:/srv/apps", "PYTHONDONTWRITEBYTECODE=1"} {
		if !slices.Contains(pl.Env, want) {
			t.Errorf("env %v lacks %s", pl.Env, want)
		}
	}
	if _, err := a.launcher(recipe{Group: "x", Runtime: RuntimePython3}); err == nil {
		t.Fatal("a python3 recipe without an app was accepted")
	}
}
