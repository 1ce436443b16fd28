package groups

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// A group names its interpreter: a virtualenv's python keeps its path (the
// virtualenv is found from it), a name is looked up on PATH, and one that
// is not there stops the group saying which.
func TestPythonRecipeInterpreter(t *testing.T) {
	dir := t.TempDir()
	venvPython := filepath.Join(dir, "venv", "bin", "python")
	onPath := filepath.Join(dir, "path", "python3.99")
	for _, p := range []string{venvPython, onPath} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", filepath.Dir(onPath))
	l := NewLaunchers(LaunchersConfig{Agent: "a"})
	for _, c := range []struct{ interpreter, want string }{
		{venvPython, venvPython},
		{"python3.99", onPath},
	} {
		got, err := l.Launcher(Recipe{Group: "shop", Runtime: RuntimePython3, Command: "app:application", Interpreter: c.interpreter})
		if err != nil {
			t.Fatalf("interpreter %s: %v", c.interpreter, err)
		}
		if pl := got.(*host.PluginLauncher); pl.Command != c.want {
			t.Errorf("interpreter %s runs %s, want %s", c.interpreter, pl.Command, c.want)
		}
	}
	for _, bad := range []string{filepath.Join(dir, "venv", "bin", "python2"), "python-nowhere", filepath.Join(dir, "venv", "bin")} {
		_, err := l.Launcher(Recipe{Group: "shop", Runtime: RuntimePython3, Command: "app:application", Interpreter: bad})
		if err == nil || !strings.Contains(err.Error(), "interpreter") || !strings.Contains(err.Error(), bad) {
			t.Errorf("interpreter %s: %v, want a refusal naming it", bad, err)
		}
	}
}
