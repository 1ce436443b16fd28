package groups

import (
	"slices"
	"testing"

	"github.com/stickyd/stickyd/internal/host"
)

func TestPythonRecipe(t *testing.T) {
	l := NewLaunchers(LaunchersConfig{Agent: "a", PythonSDK: "/opt/stickyd/python"})
	r := Recipe{Group: "shop", Runtime: RuntimePython3, Command: "pyshop.app:application", Args: []string{"--threads", "4"},
		Env: map[string]string{"PYTHONPATH": "/srv/apps"}}
	got, err := l.Launcher(r)
	if err != nil {
		t.Fatal(err)
	}
	pl, ok := got.(*host.PluginLauncher)
	if !ok {
		t.Fatalf("launcher %T, want a go-plugin launcher", got)
	}
	if pl.Command != "/usr/bin/python3" || !slices.Equal(pl.Args, []string{"-m", "stickyd.worker", "pyshop.app:application", "--threads", "4"}) {
		t.Fatalf("runs %s %v", pl.Command, pl.Args)
	}
	for _, want := range []string{"PYTHONPATH=/opt/stickyd/python:/srv/apps", "PYTHONDONTWRITEBYTECODE=1"} {
		if !slices.Contains(pl.Env, want) {
			t.Errorf("env %v lacks %s", pl.Env, want)
		}
	}
	if _, err := l.Launcher(Recipe{Group: "x", Runtime: RuntimePython3}); err == nil {
		t.Fatal("a python3 recipe without an app was accepted")
	}
}
