package bundle

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The directories of a bundle PackPython lays out, both on the python
// path, in this order.
const (
	PythonAppDir  = "app"
	PythonDepsDir = "deps"
)

// PythonApp is what PackPython packs: a Python application's directory and
// the dependencies its CI installed for the Python the bundle needs.
// Nothing is installed or downloaded here: the dependencies are copied as
// they are.
type PythonApp struct {
	// App is the application's directory: its modules and packages (the
	// WSGI module among them) and whatever files it reads. It becomes the
	// bundle's app/.
	App string
	// Deps are directories of installed packages, as `pip install
	// --target DIR` writes them or a virtualenv's
	// lib/pythonX.Y/site-packages holds them. Their contents are merged
	// into the bundle's deps/.
	Deps []string
	// Wheels are wheelhouse directories (`pip wheel -w DIR`): every *.whl
	// directly in them is unpacked into deps/ as an installer would (the
	// wheel's .data/purelib and .data/platlib at the top, its scripts,
	// headers and data left out).
	Wheels []string
	// SDK, when set, is the directory holding stickyd's Python package
	// (plugins/python): its stickyd/ is copied into deps/, so that the
	// bundle runs on agents without a python_sdk of their own (an agent
	// that has one puts it first).
	SDK string
}

// PackPython packs a Python application as a RuntimePython3 bundle: App
// as app/, every dependency (Deps, Wheels, SDK) merged into deps/, and the
// manifest's Python block naming them as its Path (app, then deps). m must
// have a Python block with its WSGI and RequiresPython or Interpreter; Pack
// fills the Entry (the WSGI module's file, which must be in the bundle), and
// the rest as for any bundle.
//
// Left out everywhere: __pycache__ directories and .pyc and .pyo files (the
// workers compile what they import, and write nothing), and .git, .hg and
// .svn directories. A symlink, device, socket or pipe is an error, as for
// Pack, and so is a file that two dependencies provide with different
// contents.
func PackPython(src PythonApp, m Manifest, w io.Writer) (digest string, err error) {
	label := src.App
	if src.App == "" {
		return "", errors.New("packing a Python app: no app directory")
	}
	switch m.Runtime {
	case "", RuntimePython3:
		m.Runtime = RuntimePython3
	default:
		return "", fmt.Errorf("packing %s: runtime %q: a Python app is a %s bundle", label, m.Runtime, RuntimePython3)
	}
	if m.Python == nil {
		return "", fmt.Errorf("packing %s: no python block (its WSGI application and the Python it needs)", label)
	}
	py := *m.Python
	stage, err := os.MkdirTemp("", "stickyd-pack-python-*")
	if err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	defer os.RemoveAll(stage)

	st := &stager{root: stage, from: map[string]string{}}
	if err := st.copyTree(src.App, PythonAppDir, "app "+src.App); err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	if !st.has(PythonAppDir) {
		return "", fmt.Errorf("packing %s: app: no files to pack", label)
	}
	for _, d := range src.Deps {
		if err := st.copyTree(d, PythonDepsDir, "deps "+d); err != nil {
			return "", fmt.Errorf("packing %s: %w", label, err)
		}
	}
	for _, d := range src.Wheels {
		if err := st.unpackWheels(d); err != nil {
			return "", fmt.Errorf("packing %s: %w", label, err)
		}
	}
	if src.SDK != "" {
		pkg := filepath.Join(src.SDK, "stickyd")
		if _, err := os.Stat(filepath.Join(pkg, "worker.py")); err != nil {
			return "", fmt.Errorf("packing %s: sdk %s: not stickyd's Python SDK (no stickyd/worker.py): %w", label, src.SDK, err)
		}
		if err := st.copyTree(pkg, PythonDepsDir+"/stickyd", "sdk "+src.SDK); err != nil {
			return "", fmt.Errorf("packing %s: %w", label, err)
		}
	}
	py.Path = []string{PythonAppDir}
	if st.has(PythonDepsDir) {
		py.Path = append(py.Path, PythonDepsDir)
	}
	m.Python = &py
	return pack(stage, label, m, w)
}

// stager builds a Python bundle's tree in root, remembering where each
// file came from.
type stager struct {
	root string
	from map[string]string // bundle path → its origin, for messages
}

// has reports whether a file was staged under dir.
func (s *stager) has(dir string) bool {
	for p := range s.from {
		if strings.HasPrefix(p, dir+"/") {
			return true
		}
	}
	return false
}

// skipped reports whether a name is left out of a Python bundle: bytecode
// and version control.
func skipped(name string, dir bool) bool {
	if dir {
		switch name {
		case "__pycache__", ".git", ".hg", ".svn":
			return true
		}
		return false
	}
	return strings.HasSuffix(name, ".pyc") || strings.HasSuffix(name, ".pyo")
}

// copyTree stages every regular file under src at dst/<its path>.
func (s *stager) copyTree(src, dst, origin string) error {
	root, err := filepath.EvalSymlinks(src)
	if err != nil {
		return fmt.Errorf("%s: %w", origin, err)
	}
	if fi, err := os.Stat(root); err != nil {
		return fmt.Errorf("%s: %w", origin, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory", origin)
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", origin, err)
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsDir():
			if skipped(d.Name(), true) {
				return filepath.SkipDir
			}
			return nil
		case t&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			return fmt.Errorf("%s: %s is a symlink (to %q): bundles hold only regular files; copy the target in its place", origin, rel, target)
		case !t.IsRegular():
			return fmt.Errorf("%s: %s is a %s: bundles hold only regular files", origin, rel, kindOf(t))
		}
		if skipped(d.Name(), false) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("%s: %w", origin, err)
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("%s: %w", origin, err)
		}
		defer f.Close()
		return s.put(dst+"/"+rel, f, fi.Mode().Perm()&0o111 != 0, origin)
	})
}

// put writes one file of the bundle at the bundle path rel. A file staged
// already must have the same content.
func (s *stager) put(rel string, content io.Reader, exec bool, origin string) error {
	if why := pathProblem(rel); why != "" {
		return fmt.Errorf("%s: %q: %s", origin, rel, why)
	}
	dst := filepath.Join(s.root, filepath.FromSlash(rel))
	if prev, ok := s.from[rel]; ok {
		b, err := io.ReadAll(content)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", origin, rel, err)
		}
		old, err := os.ReadFile(dst)
		if err != nil {
			return err
		}
		if !bytes.Equal(b, old) {
			return fmt.Errorf("%s: %s is in %s too, with other content: one version of each file", origin, rel, prev)
		}
		return nil
	}
	for _, dir := range parents(rel) {
		if prev, ok := s.from[dir]; ok {
			return fmt.Errorf("%s: %s: %s is a file of %s", origin, rel, dir, prev)
		}
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrInvalid) {
			return fmt.Errorf("%s: %s: a parent is a file: %w", origin, rel, err)
		}
		return err
	}
	mode := fs.FileMode(0o644)
	if exec {
		mode = 0o755
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %s is a directory of %s", origin, rel, s.dirOrigin(rel))
		}
		return fmt.Errorf("%s: %s: %w", origin, rel, err)
	}
	if _, err := io.Copy(f, content); err != nil {
		f.Close()
		return fmt.Errorf("%s: %s: %w", origin, rel, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	s.from[rel] = origin
	return nil
}

// dirOrigin names where the files under a staged directory came from.
func (s *stager) dirOrigin(dir string) string {
	for p, o := range s.from {
		if strings.HasPrefix(p, dir+"/") {
			return o
		}
	}
	return "another source"
}

// unpackWheels unpacks every *.whl directly in dir into deps/, in name
// order.
func (s *stager) unpackWheels(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("wheels %s: %w", dir, err)
	}
	var wheels []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".whl") && e.Type().IsRegular() {
			wheels = append(wheels, e.Name())
		}
	}
	if len(wheels) == 0 {
		return fmt.Errorf("wheels %s: no .whl file in it", dir)
	}
	sort.Strings(wheels)
	for _, name := range wheels {
		if err := s.unpackWheel(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// unpackWheel installs one wheel's files into deps/: its root as it is,
// its NAME.data/purelib and NAME.data/platlib at the top, nothing else of
// NAME.data.
func (s *stager) unpackWheel(file string) error {
	origin := "wheel " + filepath.Base(file)
	zr, err := zip.OpenReader(file)
	if err != nil {
		return fmt.Errorf("%s: %w", origin, err)
	}
	defer zr.Close()
	hasDistInfo := false
	for _, f := range zr.File {
		name := f.Name
		if strings.HasSuffix(name, "/") {
			continue // a directory entry
		}
		top, rest, _ := strings.Cut(name, "/")
		if strings.HasSuffix(top, ".dist-info") {
			hasDistInfo = true
		}
		if strings.HasSuffix(top, ".data") {
			scheme, inner, _ := strings.Cut(rest, "/")
			if scheme != "purelib" && scheme != "platlib" {
				continue
			}
			name = inner
		}
		parts := strings.Split(name, "/")
		if skipped(parts[len(parts)-1], false) || containsSkippedDir(parts[:len(parts)-1]) {
			continue
		}
		mode := f.Mode()
		if mode&fs.ModeSymlink != 0 || (mode.Type() != 0 && !mode.IsRegular()) {
			return fmt.Errorf("%s: %s is a %s: bundles hold only regular files", origin, f.Name, kindOf(mode))
		}
		if why := pathProblem(name); why != "" {
			return fmt.Errorf("%s: %q: %s", origin, f.Name, why)
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("%s: %s: %w", origin, f.Name, err)
		}
		err = s.put(path.Join(PythonDepsDir, name), rc, mode.Perm()&0o111 != 0, origin)
		rc.Close()
		if err != nil {
			return err
		}
	}
	if !hasDistInfo {
		return fmt.Errorf("%s: not a wheel (no .dist-info directory)", origin)
	}
	return nil
}

// containsSkippedDir reports whether a path's directories include one
// left out of a Python bundle.
func containsSkippedDir(dirs []string) bool {
	for _, d := range dirs {
		if skipped(d, true) {
			return true
		}
	}
	return false
}
