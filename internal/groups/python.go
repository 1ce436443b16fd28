package groups

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/host"
)

// pythonInterpreter runs the python3 groups' workers: the system's Python,
// whose grpcio and protobuf come from the distribution (make deps).
const pythonInterpreter = "/usr/bin/python3"

// pythonLauncher runs a python3 recipe: `python3 -m stickyd.worker
// MODULE:CALLABLE ARGS...`, a go-plugin subprocess like any other worker.
// Its PYTHONPATH is the agent's python_sdk (the stickyd package) followed
// by the recipe's own PYTHONPATH (where the app lives).
func (l *Launchers) pythonLauncher(r Recipe) (host.Launcher, error) {
	if r.Command == "" || strings.HasPrefix(r.Command, "-") {
		return nil, fmt.Errorf("runtime %s: set command to the WSGI application as MODULE:CALLABLE", RuntimePython3)
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
	args := append([]string{"-m", "stickyd.worker", r.Command}, r.Args...)
	return &host.PluginLauncher{Command: pythonInterpreter, Args: args, Env: env, PlainChannel: r.PlainChannel, Logger: l.cfg.Logger.Named("plugin")}, nil
}
