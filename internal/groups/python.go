package groups

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/host"
)

// pythonInterpreter runs the python3 groups' workers that name no
// interpreter: the system's Python, whose grpcio and protobuf come from
// the distribution (make deps).
const pythonInterpreter = "/usr/bin/python3"

// pythonLauncher runs a python3 recipe: `PYTHON -m stickyd.worker
// MODULE:CALLABLE ARGS...`, a go-plugin subprocess like any other worker,
// PYTHON being the recipe's interpreter (a virtualenv's bin/python keeps
// its path: Python finds the virtualenv from it). Its PYTHONPATH is the
// agent's python_sdk (the stickyd package) followed by the recipe's own
// PYTHONPATH (where the app lives).
func (l *Launchers) pythonLauncher(r Recipe) (host.Launcher, error) {
	if r.Command == "" || strings.HasPrefix(r.Command, "-") {
		return nil, fmt.Errorf("runtime %s: set command to the WSGI application as MODULE:CALLABLE", RuntimePython3)
	}
	interpreter := pythonInterpreter
	if r.Interpreter != "" {
		// A name is looked up on PATH, a path must be an executable file:
		// a wrong one stops the start here, not at every launch.
		found, err := exec.LookPath(r.Interpreter)
		if err != nil {
			return nil, fmt.Errorf("interpreter %q: %w", r.Interpreter, err)
		}
		if interpreter, err = filepath.Abs(found); err != nil {
			return nil, fmt.Errorf("interpreter %q: %w", r.Interpreter, err)
		}
	}
	var path []string
	if l.cfg.PythonSDK != "" {
		path = append(path, l.cfg.PythonSDK)
	}
	if p := r.Env["PYTHONPATH"]; p != "" {
		path = append(path, p)
	}
	env := l.workerEnv(r)
	set := func(k, v string) {
		for i, kv := range env {
			if strings.HasPrefix(kv, k+"=") {
				env[i] = k + "=" + v
				return
			}
		}
		env = append(env, k+"="+v)
	}
	set("PYTHONPATH", strings.Join(path, string(filepath.ListSeparator)))
	if _, ok := r.Env["PYTHONDONTWRITEBYTECODE"]; !ok {
		// The app's and the SDK's directories may be read-only, or a
		// checkout: the worker leaves no __pycache__ behind.
		set("PYTHONDONTWRITEBYTECODE", "1")
	}
	if r.TemplateBuild != "" {
		args := append([]string{"-m", "stickyd.template", "--build", r.TemplateBuild, r.Command}, r.Args...)
		return &host.TemplateLauncher{Command: interpreter, Args: args, Env: env, PlainChannel: r.PlainChannel,
			Logger: l.cfg.Logger.Named("plugin").With("group", r.Group)}, nil
	}
	args := append([]string{"-m", "stickyd.worker", r.Command}, r.Args...)
	return &host.PluginLauncher{Command: interpreter, Args: args, Env: env, PlainChannel: r.PlainChannel, Logger: l.cfg.Logger.Named("plugin")}, nil
}
