package groups

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/channel"
)

func TestTemplateDirEnvIsTheSDKs(t *testing.T) {
	if templateDirEnv != worker.TemplateDirEnv {
		t.Fatalf("the agent sets %s, the SDK reads %s", templateDirEnv, worker.TemplateDirEnv)
	}
	l := NewLaunchers(LaunchersConfig{Agent: "a", DataDir: "/data"})
	env := l.workerEnv(Recipe{Group: "web", Env: map[string]string{"X": "1"}})
	if len(env) != 2 || env[0] != templateDirEnv+"=/data/templates/web" || env[1] != "X=1" {
		t.Fatalf("worker env %v", env)
	}
	env = l.workerEnv(Recipe{Group: "web", Env: map[string]string{templateDirEnv: "/elsewhere"}})
	if len(env) != 1 || env[0] != templateDirEnv+"=/elsewhere" {
		t.Fatalf("a recipe's own template dir: %v", env)
	}
}

func TestLauncherOfEachRecipe(t *testing.T) {
	serve := func(ctx context.Context, c channel.Conn) error { return nil }
	l := NewLaunchers(LaunchersConfig{Agent: "a", Builtins: map[string]Builtin{"counter": serve}})
	for _, c := range []struct {
		name string
		r    Recipe
		want string // the launcher's type, or the error's words
	}{
		{"builtin", Recipe{Group: "g", Builtin: "counter"}, "*host.InprocLauncher"},
		{"unknown builtin", Recipe{Group: "g", Builtin: "nope"}, `no builtin application named "nope"`},
		{"command", Recipe{Group: "g", Command: "/bin/app"}, "*host.PluginLauncher"},
		{"bundle without an archive", Recipe{Group: "g", Bundle: "sha256:00"}, "no bundles block"},
		{"nothing", Recipe{Group: "g"}, "no runtime"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := l.Launcher(c.r)
			switch {
			case strings.HasPrefix(c.want, "*"):
				if err != nil {
					t.Fatal(err)
				}
				if typ := typeName(got); typ != c.want {
					t.Fatalf("launcher %s, want %s", typ, c.want)
				}
			case err == nil || !strings.Contains(err.Error(), c.want):
				t.Fatalf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

func typeName(l host.Launcher) string {
	switch l.(type) {
	case *host.InprocLauncher:
		return "*host.InprocLauncher"
	case *host.PluginLauncher:
		return "*host.PluginLauncher"
	}
	return "?"
}

func TestSpec(t *testing.T) {
	l := NewLaunchers(LaunchersConfig{WorkerPrefix: "a1.", CheckpointInterval: func(g string) time.Duration {
		if g == "web" {
			return time.Second
		}
		return 0
	}})
	s := l.Spec("web", 3, 64, &fsm.GroupLimits{MaxPageBytes: 10}, nil)
	if s.Name != "web" || s.Workers != 3 || s.MemoryMax != 64<<20 || s.Prefix != "a1." || s.CheckpointInterval != time.Second {
		t.Fatalf("spec %+v", s)
	}
	if s.Limits == nil || s.Limits.MaxPageBytes != 10 {
		t.Fatalf("limits %+v", s.Limits)
	}
	if s := l.Spec("batch", 1, 0, nil, nil); s.Limits != nil || s.CheckpointInterval != 0 || s.MemoryMax != 0 {
		t.Fatalf("spec without limits %+v", s)
	}
}
