package groups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Builtin is an application compiled into stickyd, runnable in-process: it
// serves one worker on its end of an in-memory channel until the channel
// closes or ctx ends. worker.InProcess builds one from an App.
type Builtin func(ctx context.Context, c channel.Conn) error

// Runtimes a group's recipe may name (fsm.GroupEntry.Runtime).
const (
	// RuntimeGoPlugin runs a go-plugin worker binary: the recipe's
	// command, or its bundle's entry point.
	RuntimeGoPlugin = "go-plugin"
	// RuntimeBuiltin runs an application compiled into stickyd.
	RuntimeBuiltin = "builtin"
	// RuntimePython3 runs a WSGI application in stickyd's Python worker;
	// the recipe's command names it as MODULE:CALLABLE (docs/python.md).
	RuntimePython3 = "python3"
)

// templateDirEnv names a group's template directory in its workers'
// environment; the SDK reads it (worker.TemplateDirEnv).
const templateDirEnv = "STICKYD_TEMPLATE_DIR"

// Recipe is what runs a group's workers, wherever the group was defined
// (this agent's configuration file or the replicated catalog).
type Recipe struct {
	Group string
	// Runtime is RuntimePython3 for a WSGI app; otherwise what is set
	// (builtin, bundle or command) says how the workers run.
	Runtime string
	Builtin string
	Command string
	Args    []string
	Env     map[string]string
	Bundle  string
	// PlainChannel turns the worker channel's AutoMTLS off
	// (plugin.plain_channel).
	PlainChannel bool
	// Interpreter is the Python of a RuntimePython3 recipe ("": the
	// system's, /usr/bin/python3).
	Interpreter string
	// TemplateBuild, for a RuntimePython3 recipe, is the build step
	// (MODULE:FUNCTION) of the template process its workers are forked
	// from; "" starts each worker on its own.
	TemplateBuild string
}

// LaunchersConfig is what Launchers builds launchers from: values of the
// agent's configuration, its builtins and its bundle cache.
type LaunchersConfig struct {
	// Agent is this agent's name: the default template directory (without
	// a data dir) is per agent.
	Agent string
	// DataDir is the agent's data directory; "" for none.
	DataDir string
	// PythonSDK is the directory of the stickyd Python package, put first
	// on a python3 worker's PYTHONPATH; "" leaves it to the system.
	PythonSDK string
	// WorkerPrefix starts every worker id of the groups (the agent's name
	// and a dot when other agents share the maps; "" alone).
	WorkerPrefix string
	// Builtins are the in-process applications a recipe may name.
	Builtins map[string]Builtin
	// Bundles is the cache of the bundle archive (OpenBundles); nil when
	// the agent has no bundles block, and a bundle recipe is refused.
	Bundles *bundle.Cache
	// CheckpointInterval is how often the workers of a group checkpoint
	// (0: never). Nil checkpoints no group.
	CheckpointInterval func(group string) time.Duration
	// Logger is the agent's; the plugins log under "plugin".
	Logger hclog.Logger
}

// Launchers builds the host.Launcher of a group's recipe and the group's
// host.GroupSpec. It is safe for concurrent use (it holds no state of its
// own beyond its configuration).
type Launchers struct {
	cfg LaunchersConfig
}

// NewLaunchers returns the launchers' builder of cfg.
func NewLaunchers(cfg LaunchersConfig) *Launchers {
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Launchers{cfg: cfg}
}

// Launcher builds the launcher of a recipe: a builtin application in
// process, a go-plugin binary (from a bundle, or a command), or a WSGI
// application in the Python worker.
func (l *Launchers) Launcher(r Recipe) (host.Launcher, error) {
	switch {
	case r.Runtime == RuntimePython3 && r.Bundle == "":
		return l.pythonLauncher(r)
	case r.Builtin != "":
		b, ok := l.cfg.Builtins[r.Builtin]
		if !ok {
			return nil, fmt.Errorf("no builtin application named %q", r.Builtin)
		}
		return &host.InprocLauncher{Serve: b}, nil
	case r.Bundle != "":
		return l.bundleLauncher(r)
	case r.Command != "":
		return &host.PluginLauncher{Command: r.Command, Args: r.Args, Env: l.workerEnv(r), PlainChannel: r.PlainChannel, Logger: l.cfg.Logger.Named("plugin")}, nil
	}
	return nil, fmt.Errorf("no runtime: set a bundle, a command or a builtin")
}

// workerEnv is what a plugin worker of the recipe gets in its environment:
// the recipe's variables, and the group's template directory (where an
// application with an engine build step keeps its frozen image, so that the
// group builds it once; docs/templates.md) unless the recipe sets one.
func (l *Launchers) workerEnv(r Recipe) []string {
	env := make([]string, 0, len(r.Env)+1)
	for k, v := range r.Env {
		env = append(env, k+"="+v)
	}
	if _, ok := r.Env[templateDirEnv]; !ok {
		root := filepath.Join(os.TempDir(), "stickyd-templates", l.cfg.Agent)
		if l.cfg.DataDir != "" {
			root = filepath.Join(l.cfg.DataDir, "templates")
		}
		env = append(env, templateDirEnv+"="+filepath.Join(root, r.Group))
	}
	sort.Strings(env)
	return env
}

// Spec is a group as this agent's host runs it.
func (l *Launchers) Spec(name string, workers, memoryMaxMB int, limits *fsm.GroupLimits, launcher host.Launcher) host.GroupSpec {
	spec := host.GroupSpec{Name: name, Workers: workers, MemoryMax: uint64(memoryMaxMB) << 20, Launcher: launcher,
		Prefix: l.cfg.WorkerPrefix}
	if l.cfg.CheckpointInterval != nil {
		spec.CheckpointInterval = l.cfg.CheckpointInterval(name)
	}
	if limits != nil {
		spec.Limits = &protocol.WorkerLimits{MaxPageBytes: limits.MaxPageBytes, MaxPersonBytes: limits.MaxPersonBytes,
			MaxPagesPerConn: limits.MaxPagesPerConn, MaxPagesPerPerson: limits.MaxPagesPerPerson}
	}
	return spec
}
