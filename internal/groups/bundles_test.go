package groups

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/host"
)

// fakePython writes an executable that answers the version probe with
// version, and returns its path.
func fakePython(t *testing.T, dir, name, version string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho "+version+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// pyBundle packs a small WSGI app (app/shop/wsgi.py and a vendored
// dependency) as a python3 bundle with py's requirement and interpreter,
// into the archive, and returns its digest.
func pyBundle(t *testing.T, ar bundle.Archive, py bundle.Python) string {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string]string{
		"app/shop/__init__.py":     "",
		"app/shop/wsgi.py":         "def application(environ, start_response):\n    start_response('200 OK', [])\n    return [b'ok']\n",
		"vendor/tally/__init__.py": "N = 1\n",
	} {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	py.WSGI = "shop.wsgi:application"
	m := bundle.Manifest{Name: "shop", Version: "1.2.0", Args: []string{"--threads", "4"}, Python: &py,
		Sources: []bundle.Source{{Repo: "https://git.example.com/shop.git", Commit: strings.Repeat("a", 40)}}}
	var buf bytes.Buffer
	digest, err := bundle.PackPython(bundle.PythonApp{App: filepath.Join(src, "app"), Deps: []string{filepath.Join(src, "vendor")}}, m, &buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := ar.Put(context.Background(), digest, &buf); err != nil {
		t.Fatal(err)
	}
	return digest
}

func envOf(env []string, key string) (string, bool) {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == key {
			return v, true
		}
	}
	return "", false
}

// A python3 bundle runs through the python3 recipe's launcher: the Python
// worker on the WSGI application the manifest names, named and versioned
// as the bundle, with the SDK, the bundle's app and dependencies (in the
// read-only cache) and the recipe's own PYTHONPATH, in that order.
func TestPythonBundleLauncher(t *testing.T) {
	bin := t.TempDir()
	py342 := fakePython(t, bin, "python3.42", "3.42.0")
	t.Setenv("PATH", bin)
	ar := bundle.NewMemArchive()
	digest := pyBundle(t, ar, bundle.Python{RequiresPython: ">=3.40", Interpreter: "python3.42"})
	cache := &bundle.Cache{Dir: t.TempDir(), Archive: ar}
	l := NewLaunchers(LaunchersConfig{Agent: "a", PythonSDK: "/opt/stickyd/python", Bundles: cache})

	got, err := l.Launcher(Recipe{Group: "shop", Runtime: RuntimeGoPlugin, Bundle: digest, Args: []string{"--threads", "8"},
		Env: map[string]string{"PYTHONPATH": "/srv/extra", "SHOP_MODE": "test"}})
	if err != nil {
		t.Fatal(err)
	}
	pl := got.(*host.PluginLauncher)
	if pl.Command != py342 {
		t.Fatalf("runs %s, want the bundle's interpreter %s", pl.Command, py342)
	}
	wantArgs := []string{"-m", "stickyd.worker", "shop.wsgi:application", "--name", "shop", "--version", "1.2.0", "--threads", "4", "--threads", "8"}
	if !slices.Equal(pl.Args, wantArgs) {
		t.Fatalf("args %q, want %q", pl.Args, wantArgs)
	}
	o, err := cache.Open(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	wantPath := strings.Join([]string{"/opt/stickyd/python", filepath.Join(o.Dir, "app"), filepath.Join(o.Dir, "deps"), "/srv/extra"}, ":")
	for k, want := range map[string]string{"PYTHONPATH": wantPath, "STICKYD_BUNDLE": digest, "PYTHONDONTWRITEBYTECODE": "1", "SHOP_MODE": "test"} {
		if v, _ := envOf(pl.Env, k); v != want {
			t.Errorf("%s=%q, want %q", k, v, want)
		}
	}

	// The recipe's interpreter comes first; it must meet the requirement.
	venv := fakePython(t, filepath.Join(t.TempDir(), "venv", "bin"), "python", "3.41.7")
	got, err = l.Launcher(Recipe{Group: "shop", Bundle: digest, Interpreter: venv})
	if err != nil {
		t.Fatal(err)
	}
	if pl := got.(*host.PluginLauncher); pl.Command != venv {
		t.Fatalf("runs %s, want the recipe's interpreter %s", pl.Command, venv)
	}
	old := fakePython(t, t.TempDir(), "python", "3.39.1")
	_, err = l.Launcher(Recipe{Group: "shop", Bundle: digest, Interpreter: old})
	if err == nil || !strings.Contains(err.Error(), "needs Python >=3.40 (its requires_python); the group's interpreter here, "+old+", is Python 3.39.1") ||
		!strings.Contains(err.Error(), "shop 1.2.0") {
		t.Fatalf("an interpreter too old: %v", err)
	}
}

// Without an interpreter named anywhere the bundle runs on the system's
// /usr/bin/python3, which must meet its requirement; an interpreter the
// agent lacks is named in the launch's error.
func TestPythonBundleInterpreterChecks(t *testing.T) {
	ar := bundle.NewMemArchive()
	never := pyBundle(t, ar, bundle.Python{RequiresPython: "<3"})
	missing := pyBundle(t, ar, bundle.Python{Interpreter: "python-nowhere"})
	l := NewLaunchers(LaunchersConfig{Agent: "a", Bundles: &bundle.Cache{Dir: t.TempDir(), Archive: ar}})
	if _, err := os.Stat(pythonInterpreter); err == nil {
		_, err := l.Launcher(Recipe{Group: "g", Bundle: never})
		if err == nil || !strings.Contains(err.Error(), "needs Python <3 (its requires_python); the system's Python here, /usr/bin/python3, is Python 3.") {
			t.Fatalf("the system's Python 3 for a bundle needing <3: %v", err)
		}
		// Refused when the group is created too, with the same words.
		_, err = l.CheckBundle(context.Background(), never, "")
		if err == nil || !strings.Contains(err.Error(), "shop 1.2.0 needs Python <3") {
			t.Fatalf("CheckBundle of a bundle needing <3: %v", err)
		}
	}
	_, err := l.Launcher(Recipe{Group: "g", Bundle: missing})
	if err == nil || !strings.Contains(err.Error(), `it runs on the bundle's interpreter "python-nowhere"`) {
		t.Fatalf("a bundle's interpreter the agent lacks: %v", err)
	}
	// An agent without it accepts the group: the agents that run it
	// check it at launch.
	if _, err := l.CheckBundle(context.Background(), missing, ""); err != nil {
		t.Fatalf("CheckBundle with the interpreter elsewhere: %v", err)
	}
}

// CheckBundle accepts a python3 bundle whose interpreter meets its
// requirement, and refuses one not in the archive.
func TestCheckPythonBundle(t *testing.T) {
	bin := t.TempDir()
	fakePython(t, bin, "python3.42", "3.42.0")
	t.Setenv("PATH", bin)
	ar := bundle.NewMemArchive()
	ok := pyBundle(t, ar, bundle.Python{RequiresPython: "==3.42.*", Interpreter: "python3.42"})
	bad := pyBundle(t, ar, bundle.Python{RequiresPython: "~=3.43", Interpreter: "python3.42"})
	l := NewLaunchers(LaunchersConfig{Agent: "a", Bundles: &bundle.Cache{Dir: t.TempDir(), Archive: ar}})
	if rt, err := l.CheckBundle(context.Background(), ok, ""); err != nil || rt != bundle.RuntimePython3 {
		t.Fatalf("a bundle this agent can run: %q %v", rt, err)
	}
	// The group's own interpreter, instead of the bundle's, is checked.
	fakePython(t, bin, "python3.43", "3.43.1")
	if _, err := l.CheckBundle(context.Background(), bad, "python3.43"); err != nil {
		t.Fatalf("a bundle with a group interpreter that meets it: %v", err)
	}
	_, err := l.CheckBundle(context.Background(), bad, "")
	if err == nil || !strings.Contains(err.Error(), "needs Python ~=3.43 (its requires_python); the bundle's interpreter here, "+filepath.Join(bin, "python3.42")+", is Python 3.42.0") {
		t.Fatalf("a bundle needing another Python: %v", err)
	}
	if _, err := l.CheckBundle(context.Background(), "sha256:"+strings.Repeat("1", 64), ""); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("a bundle not in the archive: %v", err)
	}
}
