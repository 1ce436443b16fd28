package groups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/host"
)

// BundleSource is the configuration's bundles block: the archive the
// bundles of the groups come from.
type BundleSource struct {
	// Archive is a directory, a file:// URL or an http(s):// URL.
	Archive string
	// Token is sent to an HTTP archive ("": $STICKYD_BUNDLE_TOKEN).
	Token string
	// CacheDir holds the verified, unpacked bundles ("": <data dir>/bundles,
	// or without a data dir a directory of the system's temporary one).
	CacheDir string
}

// OpenBundles prepares the bundle cache of the configuration's archive,
// read-only; nil (and no error) without a bundles block.
func OpenBundles(src *BundleSource, dataDir string) (*bundle.Cache, error) {
	if src == nil {
		return nil, nil
	}
	tok := src.Token
	if tok == "" {
		tok = os.Getenv("STICKYD_BUNDLE_TOKEN")
	}
	ar, err := bundle.OpenArchive(src.Archive, bundle.ArchiveOptions{ReadOnly: true, Token: tok})
	if err != nil {
		return nil, fmt.Errorf("bundles: %w", err)
	}
	dir := src.CacheDir
	switch {
	case dir != "":
	case dataDir != "":
		dir = filepath.Join(dataDir, "bundles")
	default:
		dir = filepath.Join(os.TempDir(), "stickyd-bundles")
	}
	return &bundle.Cache{Dir: dir, Archive: ar}, nil
}

// bundleLauncher opens a group's bundle from the archive (through the local
// cache: verified, unpacked read-only) and runs it: a go-plugin bundle's
// entry point with the manifest's arguments, a python3 bundle's WSGI
// application in the Python worker (pythonBundleLauncher). Nothing is
// installed or built: a bundle that is not in the archive, or fails
// verification, is refused with the reason.
func (l *Launchers) bundleLauncher(r Recipe) (host.Launcher, error) {
	if l.cfg.Bundles == nil {
		return nil, fmt.Errorf("bundle %s: this agent has no bundles block naming an archive", r.Bundle)
	}
	// Its own bound, not the caller's: a first open downloads and unpacks
	// the bundle, which may take longer than a catalog sync's round.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o, err := l.cfg.Bundles.Open(ctx, r.Bundle)
	if err != nil {
		return nil, err
	}
	switch rt := o.Manifest.Runtime; rt {
	case "", bundle.RuntimeGoPlugin:
	case bundle.RuntimePython3:
		return l.pythonBundleLauncher(ctx, r, o)
	default:
		return nil, fmt.Errorf("bundle %s needs runtime %q; this agent runs go-plugin and python3 bundles", r.Bundle, rt)
	}
	env := append(l.workerEnv(r), "STICKYD_BUNDLE="+o.Digest)
	l.cfg.Logger.Info("running a bundle", "bundle", o.Digest, "name", o.Manifest.Name, "version", o.Manifest.Version, "entry", o.EntryPath())
	return &host.PluginLauncher{Command: o.EntryPath(), Args: append(append([]string(nil), o.Manifest.Args...), r.Args...), Env: env,
		PlainChannel: r.PlainChannel, Logger: l.cfg.Logger.Named("plugin")}, nil
}

// pythonBundleLauncher runs a python3 bundle through the python3 recipe's
// launcher (pythonLauncher): `PYTHON -m stickyd.worker WSGI --name NAME
// --version VERSION ARGS...` with the bundle's python path (its app and
// its dependencies, read-only in the cache) on PYTHONPATH after the
// agent's python_sdk and before the recipe's own PYTHONPATH, on the
// interpreter the recipe names, else the one the manifest names, else
// the system's; that interpreter must meet the manifest's
// requires_python.
func (l *Launchers) pythonBundleLauncher(ctx context.Context, r Recipe, o *bundle.Opened) (host.Launcher, error) {
	m := o.Manifest
	interp, err := bundlePython(ctx, r.Interpreter, m)
	if err != nil {
		return nil, fmt.Errorf("bundle %s (%s %s): %w", o.Digest, m.Name, m.Version, err)
	}
	pr := Recipe{Group: r.Group, Runtime: RuntimePython3, Interpreter: interp, Command: m.Python.WSGI, PlainChannel: r.PlainChannel}
	pr.Args = append([]string{"--name", m.Name, "--version", m.Version}, m.Args...)
	pr.Args = append(pr.Args, r.Args...)
	pr.Env = make(map[string]string, len(r.Env)+2)
	for k, v := range r.Env {
		pr.Env[k] = v
	}
	path := o.PythonPath()
	if p := r.Env["PYTHONPATH"]; p != "" {
		path = append(path, p)
	}
	pr.Env["PYTHONPATH"] = strings.Join(path, string(filepath.ListSeparator))
	pr.Env["STICKYD_BUNDLE"] = o.Digest
	l.cfg.Logger.Info("running a bundle", "bundle", o.Digest, "name", m.Name, "version", m.Version, "runtime", m.Runtime,
		"wsgi", m.Python.WSGI, "interpreter", interp)
	return l.pythonLauncher(pr)
}

// errNoInterpreter is bundlePython's error for an interpreter this agent
// does not have.
var errNoInterpreter = errors.New("no such interpreter on this agent")

// pythonProbeTimeout bounds the run of an interpreter that reports its
// version.
const pythonProbeTimeout = 15 * time.Second

// bundlePython resolves the interpreter a python3 bundle's workers run on
// (the recipe's, else the manifest's, else the system's /usr/bin/python3)
// to an absolute path, and checks that its version meets the manifest's
// requires_python. A name is looked up on PATH; a virtualenv's bin/python
// keeps its path.
func bundlePython(ctx context.Context, recipeInterpreter string, m *bundle.Manifest) (string, error) {
	name, whose := recipeInterpreter, "the group's interpreter"
	if name == "" && m.Python.Interpreter != "" {
		name, whose = m.Python.Interpreter, "the bundle's interpreter"
	}
	if name == "" {
		name, whose = pythonInterpreter, "the system's Python"
	}
	found, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: it runs on %s %q: %v", errNoInterpreter, whose, name, err)
	}
	abs, err := filepath.Abs(found)
	if err != nil {
		return "", fmt.Errorf("interpreter %q: %w", name, err)
	}
	if m.Python.RequiresPython == "" {
		return abs, nil
	}
	req, err := bundle.ParseRequiresPython(m.Python.RequiresPython)
	if err != nil {
		return "", err // Validate let it through: it parses
	}
	v, err := pythonVersion(ctx, abs)
	if err != nil {
		return "", fmt.Errorf("reading the version of %s %s: %w", whose, abs, err)
	}
	ok, err := req.Allows(v)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", whose, abs, err)
	}
	if !ok {
		return "", fmt.Errorf("needs Python %s (its requires_python); %s here, %s, is Python %s", m.Python.RequiresPython, whose, abs, v)
	}
	return abs, nil
}

// pythonVersion runs an interpreter to learn its version, "3.11.2"
// (sys.version_info's release numbers), isolated from the environment's
// PYTHON* variables and the user's site-packages.
func pythonVersion(ctx context.Context, interp string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pythonProbeTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, interp, "-I", "-c", `import sys; print("%d.%d.%d" % sys.version_info[:3])`)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		return "", fmt.Errorf("%v %s", err, msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// CheckBundle makes sure a bundle a new group names is in the archive and
// verifies (it is unpacked into the cache on the way), and that this agent
// can run its runtime, which it returns (go-plugin or python3). For a
// python3 bundle, interpreter (the group's; "": the one the bundle names,
// or the system's) must meet its requires_python when this agent has it;
// an interpreter this agent lacks is left to the agents that run the
// group, which check it at launch.
func (l *Launchers) CheckBundle(ctx context.Context, digest, interpreter string) (string, error) {
	if l.cfg.Bundles == nil {
		return "", fmt.Errorf("this agent has no bundles block naming an archive")
	}
	o, err := l.cfg.Bundles.Open(ctx, digest)
	if err != nil {
		return "", err
	}
	switch rt := o.Manifest.Runtime; rt {
	case "", bundle.RuntimeGoPlugin:
		if interpreter != "" {
			return "", fmt.Errorf("interpreter %q is for a python3 bundle; %s %s is a go-plugin bundle (its own binary)", interpreter, o.Manifest.Name, o.Manifest.Version)
		}
		return bundle.RuntimeGoPlugin, nil
	case bundle.RuntimePython3:
		_, err := bundlePython(ctx, interpreter, o.Manifest)
		if errors.Is(err, errNoInterpreter) {
			l.cfg.Logger.Warn("a python3 bundle's interpreter is not on this agent; the agents that run its group check it at launch",
				"bundle", o.Digest, "error", err)
			return bundle.RuntimePython3, nil
		}
		if err != nil {
			return "", fmt.Errorf("%s %s %w", o.Manifest.Name, o.Manifest.Version, err)
		}
		return bundle.RuntimePython3, nil
	default:
		return "", fmt.Errorf("bundle %s needs runtime %q; agents run go-plugin and python3 bundles", digest, rt)
	}
}
