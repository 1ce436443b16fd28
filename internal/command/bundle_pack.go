package command

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundlePackCommand packs a build output into a bundle.
type BundlePackCommand struct{ Meta }

func (c *BundlePackCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle pack [options] -dir BUILD -name NAME -version V -entry PATH -o FILE
       stickyd bundle pack [options] -runtime python3 -app DIR [-deps DIR] [-wheels DIR]
           -wsgi MODULE:CALLABLE -requires-python SPEC -name NAME -version V -o FILE

  Packs every file under BUILD into a bundle: a deterministic .tar.gz whose
  manifest records the application's name and version, the entry point and
  its arguments, the runtime, the toolchain that built it and the exact
  origin of the sources, commit by commit (one -source or -git per
  repository). It prints the bundle's digest (sha256:…), its name from now
  on. The same build and manifest always give the same digest.

  A Python (WSGI) application is a python3 bundle: its directory becomes
  the bundle's app/, its dependencies (installed for the Python it needs by
  its CI: nothing is installed here) its deps/, both on the workers'
  PYTHONPATH; the manifest names the WSGI application and the Python it
  needs. Bytecode (__pycache__, .pyc) and .git are left out.

Options:

  -dir=BUILD         The build output to pack (required for go-plugin).
  -name=NAME         The application's name (required).
  -version=V         The application's version (required).
  -entry=PATH        The entry point inside BUILD, e.g. bin/app (required
                     for go-plugin; a python3 bundle's is its WSGI module's
                     file, found by pack).
  -arg=A             An argument of the entry point (of the Python worker,
                     such as --threads 16, for python3); repeat for more.
  -runtime=R         What runs the entry point: go-plugin (the default) or
                     python3 (the default when -app or -wsgi is given).
  -source=REPO@COMMIT[:PATH]
                     A repository the build came from, at a full commit
                     id; repeat for each repository.
  -git=DIR           A local git checkout the build came from: its origin
                     and HEAD are recorded. Refused with uncommitted
                     changes unless -allow-dirty.
  -allow-dirty       Record a dirty checkout (marked so in the manifest).
  -toolchain=K=V     A toolchain fact (go, goos and goarch are filled from
                     the entry point's build information when missing; for
                     python3, say python=3.11.2 if you like).
  -o=FILE            Where to write the bundle (required).

Python (runtime python3):

  -app=DIR           The application's directory, holding the WSGI module
                     (required).
  -wsgi=MODULE:CALLABLE
                     The WSGI application, or a factory call such as
                     shop:create_app() (required).
  -requires-python=SPEC
                     The Python versions it runs on, as pyproject's
                     requires-python: ">=3.11", "==3.11.*" (a dependency
                     with compiled modules ties it to one minor version).
  -interpreter=NAME  The Python it wants when its group names none: a name
                     on the agents' PATH (python3.11) or an absolute path.
                     Give -requires-python, -interpreter or both.
  -deps=DIR          Installed dependencies: a pip install --target
                     directory or a virtualenv's site-packages; repeat for
                     more. Merged into deps/.
  -wheels=DIR        A wheelhouse: each .whl in it is unpacked into deps/;
                     repeat for more.
  -sdk=DIR           stickyd's Python SDK (plugins/python): its stickyd
                     package goes into deps/, for agents with no python_sdk.
`)
}

func (c *BundlePackCommand) Synopsis() string { return "Pack a build into a bundle" }

func (c *BundlePackCommand) Run(args []string) int {
	var dir, out string
	var sources, gits, toolchain, entryArgs stringList
	var allowDirty bool
	var m bundle.Manifest
	var py bundle.Python
	var app bundle.PythonApp
	var deps, wheels stringList
	fs := c.plainFlagSet("bundle pack")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&m.Name, "name", "", "")
	fs.StringVar(&m.Version, "version", "", "")
	fs.StringVar(&m.Entry, "entry", "", "")
	fs.Var(&entryArgs, "arg", "")
	fs.StringVar(&m.Runtime, "runtime", "", "")
	fs.Var(&sources, "source", "")
	fs.Var(&gits, "git", "")
	fs.BoolVar(&allowDirty, "allow-dirty", false, "")
	fs.Var(&toolchain, "toolchain", "")
	fs.StringVar(&out, "o", "", "")
	fs.StringVar(&app.App, "app", "", "")
	fs.StringVar(&py.WSGI, "wsgi", "", "")
	fs.StringVar(&py.RequiresPython, "requires-python", "", "")
	fs.StringVar(&py.Interpreter, "interpreter", "", "")
	fs.Var(&deps, "deps", "")
	fs.Var(&wheels, "wheels", "")
	fs.StringVar(&app.SDK, "sdk", "", "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	app.Deps, app.Wheels = deps, wheels
	pythonFlags := app.App != "" || py.WSGI != "" || py.RequiresPython != "" || py.Interpreter != "" || len(deps)+len(wheels) > 0 || app.SDK != ""
	if m.Runtime == "" {
		m.Runtime = bundle.RuntimeGoPlugin
		if app.App != "" || py.WSGI != "" {
			m.Runtime = bundle.RuntimePython3
		}
	}
	type given struct{ flag, v string }
	required := []given{{"-name", m.Name}, {"-version", m.Version}}
	switch m.Runtime {
	case bundle.RuntimePython3:
		if dir != "" || m.Entry != "" {
			c.UI.Error("a python3 bundle takes -app (its directory) and -wsgi (its application), not -dir and -entry")
			return 1
		}
		required = append(required, given{"-app", app.App}, given{"-wsgi", py.WSGI})
		if py.RequiresPython == "" && py.Interpreter == "" {
			required = append(required, given{"-requires-python (or -interpreter)", ""})
		}
	default:
		if pythonFlags {
			c.UI.Error(fmt.Sprintf("-app, -wsgi, -requires-python, -interpreter, -deps, -wheels and -sdk are for -runtime python3, not %s", m.Runtime))
			return 1
		}
		required = append(required, given{"-dir", dir}, given{"-entry", m.Entry})
	}
	required = append(required, given{"-o", out})
	var missing []string
	for _, f := range required {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		c.UI.Error(fmt.Sprintf("missing %s (see -help)", strings.Join(missing, ", ")))
		return 1
	}
	if len(sources)+len(gits) == 0 {
		c.UI.Error("give at least one -source REPO@COMMIT or -git DIR: a bundle records where it came from")
		return 1
	}
	m.Args = entryArgs
	for _, s := range sources {
		src, err := bundle.ParseSource(s)
		if err != nil {
			return c.fail(err)
		}
		m.Sources = append(m.Sources, src)
	}
	for _, g := range gits {
		src, err := bundle.SourceFromGit(g, allowDirty)
		if err != nil {
			return c.fail(err)
		}
		m.Sources = append(m.Sources, src)
	}
	var err error
	if m.Toolchain, err = keyValues("-toolchain", toolchain); err != nil {
		c.UI.Error(err.Error())
		return 1
	}
	// Write next to the destination, then rename: a failed pack leaves no
	// half bundle under the name.
	tmp, err := os.CreateTemp(filepath.Dir(out), ".bundle-*.tmp")
	if err != nil {
		return c.fail(fmt.Errorf("writing the bundle: %w", err))
	}
	defer os.Remove(tmp.Name())
	var digest string
	if m.Runtime == bundle.RuntimePython3 {
		m.Python = &py
		digest, err = bundle.PackPython(app, m, tmp)
	} else {
		digest, err = bundle.Pack(dir, m, tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), out)
	}
	if err != nil {
		return c.fail(err)
	}
	size := 0
	if fi, err := os.Stat(out); err == nil {
		size = int(fi.Size())
	}
	c.UI.Output(fmt.Sprintf("Packed %s %s (%s) into %s\n%s", m.Name, m.Version, formatBytes(size), out, digest))
	return 0
}
