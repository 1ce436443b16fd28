package agent

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/host"
)

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

// pythonInterpreter runs the python3 groups' workers: the system's Python,
// whose grpcio and protobuf come from the distribution (make deps).
const pythonInterpreter = "/usr/bin/python3"

// pythonLauncher runs a python3 recipe: `python3 -m stickyd.worker
// MODULE:CALLABLE ARGS...`, a go-plugin subprocess like any other worker.
// Its PYTHONPATH is the agent's python_sdk (the stickyd package) followed
// by the recipe's own PYTHONPATH (where the app lives).
func (a *Agent) pythonLauncher(r recipe) (host.Launcher, error) {
	if r.Command == "" || strings.HasPrefix(r.Command, "-") {
		return nil, fmt.Errorf("runtime %s: set command to the WSGI application as MODULE:CALLABLE", RuntimePython3)
	}
	var path []string
	if a.cfg.PythonSDK != "" {
		path = append(path, a.cfg.PythonSDK)
	}
	if p := r.Env["PYTHONPATH"]; p != "" {
		path = append(path, p)
	}
	env := a.workerEnv(r)
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
	return &host.PluginLauncher{Command: pythonInterpreter, Args: args, Env: env, PlainChannel: r.PlainChannel, Logger: a.log.Named("plugin")}, nil
}
