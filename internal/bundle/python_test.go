package bundle

import (
	"archive/zip"
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pyManifest is the fixed manifest the tests pack testdata/pyapp with.
func pyManifest() Manifest {
	return Manifest{
		Name:    "greet",
		Version: "2.0.1",
		Runtime: RuntimePython3,
		Args:    []string{"--threads", "4"},
		Python:  &Python{WSGI: "greet.wsgi:application", RequiresPython: ">=3.9"},
		Sources: []Source{{Repo: "https://git.example.com/acme/greet.git", Commit: "3f786850e387550fdab836ed7e6dc881de23001b"}},
	}
}

// pyApp is testdata/pyapp's app with its vendored dependency.
func pyApp() PythonApp {
	return PythonApp{App: "testdata/pyapp/app", Deps: []string{"testdata/pyapp/vendor"}}
}

func packPython(t *testing.T, src PythonApp, m Manifest) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	d, err := PackPython(src, m, &buf)
	if err != nil {
		t.Fatalf("PackPython: %v", err)
	}
	return buf.Bytes(), d
}

// writeWheel writes a pure-Python wheel (a zip: the package, its
// .dist-info, and a .data directory with a purelib module and a script)
// into dir.
func writeWheel(t *testing.T, dir, name, version string, files map[string]string) string {
	t.Helper()
	p := filepath.Join(dir, name+"-"+version+"-py3-none-any.whl")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	info := name + "-" + version + ".dist-info/"
	all := map[string]string{
		info + "METADATA": "Metadata-Version: 2.1\nName: " + name + "\nVersion: " + version + "\n",
		info + "WHEEL":    "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
		info + "RECORD":   "",
	}
	for k, v := range files {
		all[k] = v
	}
	names := make([]string, 0, len(all))
	for k := range all {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		h := &zip.FileHeader{Name: k, Method: zip.Deflate}
		h.SetMode(0o644)
		w, err := zw.CreateHeader(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(all[k])); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestPackPythonGolden packs testdata/pyapp: app/ and deps/ on the python
// path, the entry filled with the WSGI module's file, the manifest as
// testdata/manifest.python.golden.json holds it (-update rewrites it), a
// deterministic archive that verifies.
func TestPackPythonGolden(t *testing.T) {
	archive, digest := packPython(t, pyApp(), pyManifest())
	if got := digestOf(archive); got != digest {
		t.Fatalf("PackPython returned %s, the bytes hash to %s", digest, got)
	}
	_, got := firstEntry(t, archive)
	golden := filepath.Join("testdata", "manifest.python.golden.json")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("manifest.json differs from %s (run with -update if intended):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
	m, err := Verify(bytes.NewReader(archive), digest)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if m.Entry != "app/greet/wsgi.py" || !slices.Equal(m.Python.Path, []string{"app", "deps"}) || m.Runtime != RuntimePython3 {
		t.Fatalf("manifest: entry %q, python %+v, runtime %q", m.Entry, m.Python, m.Runtime)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	if got := strings.Join(paths, " "); got != "app/greet/__init__.py app/greet/wsgi.py deps/tinyfmt/__init__.py" {
		t.Fatalf("files: %s", got)
	}

	// The same app from a copy with bytecode, a .git and other modes and
	// times packs to the same bytes: what is left out is left out.
	cp := t.TempDir()
	copyTreeForTest(t, "testdata/pyapp", cp)
	for _, junk := range []string{"app/greet/__pycache__/wsgi.cpython-311.pyc", "app/.git/HEAD", "app/greet/old.pyc", "vendor/tinyfmt/__pycache__/x.pyc"} {
		p := filepath.Join(cp, junk)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("junk"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	again, d2 := packPython(t, PythonApp{App: filepath.Join(cp, "app"), Deps: []string{filepath.Join(cp, "vendor")}}, pyManifest())
	if d2 != digest || !bytes.Equal(again, archive) {
		t.Fatalf("a copy with bytecode and .git packs to %s, want %s", d2, digest)
	}
}

// TestPackPythonWheelsAndSDK installs a wheelhouse's wheels into deps/ (the
// .data directory's purelib at the top, its scripts left out) beside a
// deps directory and stickyd's SDK; a file two dependencies provide
// differently is refused, the same file twice is not.
func TestPackPythonWheelsAndSDK(t *testing.T) {
	wheels := t.TempDir()
	writeWheel(t, wheels, "tally", "1.2", map[string]string{
		"tally/__init__.py":                          "VERSION = '1.2'\n",
		"tally-1.2.data/purelib/tally_extra.py":      "X = 1\n",
		"tally-1.2.data/scripts/tally":               "#!python\n",
		"tally/__pycache__/__init__.cpython-311.pyc": "junk",
	})
	sdk := t.TempDir()
	for _, f := range []string{"stickyd/__init__.py", "stickyd/worker.py"} {
		writeFileForTest(t, filepath.Join(sdk, f), "# sdk\n")
	}
	writeFileForTest(t, filepath.Join(sdk, "tests", "test_x.py"), "# not packed\n")
	src := pyApp()
	src.Wheels, src.SDK = []string{wheels}, sdk
	archive, digest := packPython(t, src, pyManifest())
	m, err := Verify(bytes.NewReader(archive), digest)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	want := "app/greet/__init__.py app/greet/wsgi.py deps/stickyd/__init__.py deps/stickyd/worker.py deps/tally-1.2.dist-info/METADATA " +
		"deps/tally-1.2.dist-info/RECORD deps/tally-1.2.dist-info/WHEEL deps/tally/__init__.py deps/tally_extra.py deps/tinyfmt/__init__.py"
	if got := strings.Join(paths, " "); got != want {
		t.Fatalf("files:\n%s\nwant\n%s", got, want)
	}

	// The same file from two places: fine when equal, refused when not.
	dup := t.TempDir()
	copyTreeForTest(t, "testdata/pyapp/vendor", dup)
	src = pyApp()
	src.Deps = append(src.Deps, dup)
	packPython(t, src, pyManifest())
	writeFileForTest(t, filepath.Join(dup, "tinyfmt", "__init__.py"), "__version__ = '9'\n")
	var buf bytes.Buffer
	_, err = PackPython(src, pyManifest(), &buf)
	wantErr(t, err, nil, "deps/tinyfmt/__init__.py is in deps testdata/pyapp/vendor too, with other content")
	if buf.Len() != 0 {
		t.Fatal("a refused pack wrote bytes")
	}
}

// TestPackPythonRefuses: what a Python bundle cannot be.
func TestPackPythonRefuses(t *testing.T) {
	noWheel := t.TempDir()
	writeFileForTest(t, filepath.Join(noWheel, "README"), "no wheels here\n")
	notWheel := t.TempDir()
	if err := os.WriteFile(filepath.Join(notWheel, "x-1-py3-none-any.whl"), []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	linked := t.TempDir()
	copyTreeForTest(t, "testdata/pyapp/app", linked)
	if err := os.Symlink("/etc/passwd", filepath.Join(linked, "greet", "passwd")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		src  PythonApp
		edit func(*Manifest)
		says string
	}{
		{"no app", PythonApp{}, nil, "no app directory"},
		{"missing app", PythonApp{App: "testdata/nope"}, nil, "testdata/nope"},
		{"go-plugin runtime", pyApp(), func(m *Manifest) { m.Runtime = RuntimeGoPlugin }, "a Python app is a python3 bundle"},
		{"no python block", pyApp(), func(m *Manifest) { m.Python = nil }, "no python block"},
		{"module not in the bundle", pyApp(), func(m *Manifest) { m.Python.WSGI = "flask.app:app" }, "module flask.app is not in the bundle (looked for app/flask/app/__init__.py, app/flask/app.py, deps/flask/app/__init__.py"},
		{"no callable", pyApp(), func(m *Manifest) { m.Python.WSGI = "greet.wsgi" }, "want MODULE:CALLABLE"},
		{"no python named", pyApp(), func(m *Manifest) { m.Python.RequiresPython = "" }, "say which Python the bundle needs"},
		{"bad requirement", pyApp(), func(m *Manifest) { m.Python.RequiresPython = "3.11" }, `"3.11" is not a version specifier`},
		{"pre-release requirement", pyApp(), func(m *Manifest) { m.Python.RequiresPython = ">=3.13.0rc1" }, "no pre-, post-, dev- or local versions"},
		{"relative interpreter", pyApp(), func(m *Manifest) { m.Python.Interpreter = "venv/bin/python" }, "want a name on PATH"},
		{"empty wheelhouse", PythonApp{App: "testdata/pyapp/app", Wheels: []string{noWheel}}, nil, "no .whl file in it"},
		{"not a wheel", PythonApp{App: "testdata/pyapp/app", Wheels: []string{notWheel}}, nil, "wheel x-1-py3-none-any.whl"},
		{"not the SDK", PythonApp{App: "testdata/pyapp/app", SDK: noWheel}, nil, "not stickyd's Python SDK"},
		{"symlink", PythonApp{App: linked}, nil, "greet/passwd is a symlink"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := pyManifest()
			py := *m.Python
			m.Python = &py
			if tc.edit != nil {
				tc.edit(&m)
			}
			var buf bytes.Buffer
			_, err := PackPython(tc.src, m, &buf)
			wantErr(t, err, nil, tc.says)
			if buf.Len() != 0 {
				t.Fatal("a refused pack wrote bytes")
			}
		})
	}
}

// TestValidatePython breaks a valid python3 manifest one field at a time.
func TestValidatePython(t *testing.T) {
	good := func() Manifest {
		m := pyManifest()
		m.Format, m.Entry = FormatVersion, "app/greet/wsgi.py"
		m.Python = &Python{WSGI: "greet.wsgi:application", Path: []string{"app", "deps"}, RequiresPython: ">=3.9"}
		for _, e := range []tarEntry{reg("app/greet/__init__.py", "", 0o644), reg("app/greet/wsgi.py", "app", 0o644), reg("deps/x.py", "x", 0o644)} {
			m.Files = append(m.Files, File{Path: e.name, Size: int64(len(e.body)), SHA256: hexSum(e.body), Mode: FileMode(e.mode)})
		}
		return m
	}
	m := good()
	if err := m.Validate(); err != nil {
		t.Fatalf("valid python3 manifest: %v", err)
	}
	tests := []struct {
		name string
		edit func(m *Manifest)
		says string
	}{
		{"no python block", func(m *Manifest) { m.Python = nil }, "python: missing"},
		{"python block on go-plugin", func(m *Manifest) {
			m.Runtime = RuntimeGoPlugin
			m.Toolchain = map[string]string{"go": "1", "goos": "l", "goarch": "a"}
		}, "python: only a python3 bundle has one"},
		{"empty wsgi", func(m *Manifest) { m.Python.WSGI = "" }, "python.wsgi is empty"},
		{"bad module", func(m *Manifest) { m.Python.WSGI = "greet-app:application" }, `module "greet-app" is not a dotted Python name`},
		{"no path", func(m *Manifest) { m.Python.Path = nil }, "python.path: none"},
		{"root on the path", func(m *Manifest) { m.Python.Path = []string{"."} }, "not its root"},
		{"path escapes", func(m *Manifest) { m.Python.Path = []string{"app", "../x"} }, "path escapes the bundle"},
		{"absolute path", func(m *Manifest) { m.Python.Path = []string{"/usr/lib/python3/dist-packages"} }, "absolute path"},
		{"path twice", func(m *Manifest) { m.Python.Path = []string{"app", "app"} }, "listed twice"},
		{"empty path dir", func(m *Manifest) { m.Python.Path = []string{"app", "lib"} }, `python.path[1] "lib": no file of the bundle is in it`},
		{"entry not the module", func(m *Manifest) { m.Entry = "deps/x.py" }, "for python3 it is the WSGI module's file, app/greet/wsgi.py"},
		{"module elsewhere", func(m *Manifest) { m.Python.WSGI = "x:app"; m.Entry = "app/greet/wsgi.py" }, "deps/x.py"},
		{"requirement", func(m *Manifest) { m.Python.RequiresPython = ">=3.x" }, `version "3.x"`},
		{"arbitrary equality", func(m *Manifest) { m.Python.RequiresPython = "===3.11" }, "=== (arbitrary equality) is not supported"},
		{"star on >=", func(m *Manifest) { m.Python.RequiresPython = ">=3.*" }, "takes no .*"},
		{"interpreter with a space", func(m *Manifest) { m.Python.Interpreter = "/opt/my python/bin/python" }, "clean absolute path"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.edit(&m)
			wantErr(t, m.Validate(), ErrInvalidManifest, tc.says)
		})
	}
	// Either a requirement or an interpreter names the Python.
	m = good()
	m.Python.RequiresPython, m.Python.Interpreter = "", "python3.11"
	if err := m.Validate(); err != nil {
		t.Fatalf("a manifest naming its interpreter only: %v", err)
	}
}

// TestRequiresPython: PEP 440's specifiers on release numbers.
func TestRequiresPython(t *testing.T) {
	tests := []struct {
		spec    string
		allowed []string
		refused []string
	}{
		{">=3.11", []string{"3.11.0", "3.11.2", "3.12.1", "4.0.0"}, []string{"3.10.14", "3.9.0"}},
		{"==3.11.*", []string{"3.11.0", "3.11.9"}, []string{"3.10.0", "3.12.0"}},
		{"==3.11", []string{"3.11.0"}, []string{"3.11.2"}},
		{"!=3.12.*", []string{"3.11.2", "3.13.0"}, []string{"3.12.4"}},
		{">=3.10, <3.13", []string{"3.10.0", "3.12.9"}, []string{"3.9.18", "3.13.0"}},
		{"~=3.11", []string{"3.11.0", "3.12.0", "3.99.1"}, []string{"3.10.0", "4.0.0"}},
		{"~=3.11.2", []string{"3.11.2", "3.11.9"}, []string{"3.11.1", "3.12.0"}},
		{">3.11", []string{"3.11.1", "3.12.0"}, []string{"3.11.0", "3.11"}},
		{"<=3.11", []string{"3.11.0", "3.10.5"}, []string{"3.11.1"}},
		{"!=3.11.2,>=3", []string{"3.11.3"}, []string{"3.11.2", "2.7.18"}},
	}
	for _, tc := range tests {
		req, err := ParseRequiresPython(tc.spec)
		if err != nil {
			t.Fatalf("%q: %v", tc.spec, err)
		}
		for _, v := range tc.allowed {
			if ok, err := req.Allows(v); !ok || err != nil {
				t.Errorf("%q refuses %s (%v)", tc.spec, v, err)
			}
		}
		for _, v := range tc.refused {
			if ok, err := req.Allows(v); ok || err != nil {
				t.Errorf("%q allows %s (%v)", tc.spec, v, err)
			}
		}
	}
	for _, bad := range []string{"", " ", "3.11", ">=", ">= 3.11 3.12", "~=3", "<3.*", ">=3.11a1", "==3.11.*.*", "python3.11", ">=3.11;"} {
		if _, err := ParseRequiresPython(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	req, _ := ParseRequiresPython(">=3")
	if _, err := req.Allows("3.13.0rc1"); err == nil {
		t.Error("a pre-release interpreter version was compared")
	}
}

// TestPythonBundleRuns opens a python3 bundle through a cache (verified,
// unpacked read-only) and imports its WSGI application with the bundle's
// python path on the system's Python: the app and its vendored dependency
// come from the read-only copy, and nothing is written there.
func TestPythonBundleRuns(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	archive, digest := packPython(t, pyApp(), pyManifest())
	ar := NewMemArchive()
	if err := ar.Put(context.Background(), digest, bytes.NewReader(archive)); err != nil {
		t.Fatal(err)
	}
	c := &Cache{Dir: t.TempDir(), Archive: ar}
	o, err := c.Open(context.Background(), digest)
	if err != nil {
		t.Fatal(err)
	}
	dirs := o.PythonPath()
	if !slices.Equal(dirs, []string{filepath.Join(o.Dir, "app"), filepath.Join(o.Dir, "deps")}) {
		t.Fatalf("python path %v", dirs)
	}
	if fi, err := os.Stat(dirs[0]); err != nil || fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("the app's directory is writable: %v %v", fi.Mode(), err)
	}
	cmd := exec.Command(py, "-c", `
import greet.wsgi, tinyfmt
out = []
body = greet.wsgi.application({}, lambda status, headers: out.append(status))
print(out[0], b"".join(body).decode(), tinyfmt.__file__)`)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+strings.Join(dirs, string(filepath.ListSeparator)), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("importing the bundle's app: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "200 OK HELLO! "+filepath.Join(dirs[1], "tinyfmt", "__init__.py") {
		t.Fatalf("the app answered %q", got)
	}
	// Opened again: the read-only copy is unchanged (no __pycache__).
	if _, err := c.Open(context.Background(), digest); err != nil {
		t.Fatalf("reopening after a run: %v", err)
	}
}

func writeFileForTest(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTreeForTest copies the regular files under src into dst.
func copyTreeForTest(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		writeFileForTest(t, filepath.Join(dst, rel), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
