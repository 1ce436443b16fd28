package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FormatVersion is the manifest format this package writes and reads.
const FormatVersion = 1

// ManifestName is the archive's first entry, and the name reserved for it at
// the root of a bundle and of its unpacked copy.
const ManifestName = "manifest.json"

// Runtimes a manifest may name.
const (
	// RuntimeGoPlugin is a go-plugin worker binary: the entry is executed
	// with Args. It is the default.
	RuntimeGoPlugin = "go-plugin"
	// RuntimePython3 is a WSGI application run by stickyd's Python
	// worker: the manifest's Python block says which application, which
	// of the bundle's directories go on PYTHONPATH and which Python it
	// needs; the entry is the application module's file, and Args go to
	// the worker (stickyd.worker's options, such as --threads).
	RuntimePython3 = "python3"
)

// Modes a bundle file may have.
const (
	ModeExec  FileMode = 0o755 // an executable
	ModePlain FileMode = 0o644 // anything else
)

// FileMode is a bundle file's permission bits: ModeExec or ModePlain. In
// JSON it is the octal string ("0755"), which people can read.
type FileMode uint32

// String returns the mode in octal, "0755".
func (m FileMode) String() string { return fmt.Sprintf("%04o", uint32(m)) }

// MarshalJSON writes the octal string.
func (m FileMode) MarshalJSON() ([]byte, error) { return json.Marshal(m.String()) }

// UnmarshalJSON reads the octal string.
func (m *FileMode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("mode: want an octal string such as \"0644\": %w", err)
	}
	v, err := strconv.ParseUint(s, 8, 32)
	if err != nil {
		return fmt.Errorf("mode %q: want an octal string such as \"0644\"", s)
	}
	*m = FileMode(v)
	return nil
}

// File is one file of a bundle, as its manifest lists it.
type File struct {
	// Path is relative to the bundle's root, slash separated, clean (no
	// ".", "..", empty or absolute parts).
	Path string `json:"path"`
	// Size is the length in bytes.
	Size int64 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the content.
	SHA256 string `json:"sha256"`
	// Mode is ModeExec or ModePlain.
	Mode FileMode `json:"mode"`
}

// Manifest describes a bundle: what it is, how to start it, where every
// piece came from, and every file it holds. It is the archive's first entry
// (manifest.json), so the bundle's digest covers it.
type Manifest struct {
	// Format is FormatVersion; Pack fills it when zero.
	Format int `json:"format"`
	// Name of the application: 1 to 64 of [a-z0-9._-], starting with a
	// letter or digit.
	Name string `json:"name"`
	// Version of the application, as its authors number it: 1 to 128 of
	// [A-Za-z0-9._+~-], starting with a letter or digit.
	Version string `json:"version"`
	// Runtime says how the entry is run: RuntimeGoPlugin (Pack's default)
	// or RuntimePython3.
	Runtime string `json:"runtime"`
	// Entry is the path of the entry point inside the bundle. It must be a
	// listed file: executable (ModeExec) for RuntimeGoPlugin; for
	// RuntimePython3 the file of the WSGI module (Pack fills it).
	Entry string `json:"entry"`
	// Args are the entry point's arguments (for RuntimePython3, the
	// Python worker's).
	Args []string `json:"args,omitempty"`
	// Python is how a RuntimePython3 bundle runs; nil for the others.
	Python *Python `json:"python,omitempty"`
	// Sources are the repositories the build came from, at least one.
	Sources []Source `json:"sources"`
	// Toolchain records what built it, e.g. {"go": "go1.26.8", "goos":
	// "linux", "goarch": "amd64"}; the three are required for
	// RuntimeGoPlugin, and Pack fills those missing.
	Toolchain map[string]string `json:"toolchain"`
	// Files lists every file of the bundle but manifest.json, sorted by
	// path. Pack fills it.
	Files []File `json:"files"`
}

var (
	nameRE         = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	versionRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+~-]{0,127}$`)
	toolchainKeyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
)

// maxProblems bounds how many problems one Validate error lists.
const maxProblems = 10

// Validate checks a complete manifest, as Pack writes it and Verify reads
// it. It returns nil, or an error matching ErrInvalidManifest that lists
// what is wrong ("invalid manifest: name "My App": ...; entry ...").
func (m *Manifest) Validate() error {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}

	if m.Format != FormatVersion {
		add("format %d is not supported (want %d)", m.Format, FormatVersion)
	}
	if !nameRE.MatchString(m.Name) {
		add("name %q: want 1 to 64 of a-z 0-9 . _ - starting with a letter or digit", m.Name)
	}
	if !versionRE.MatchString(m.Version) {
		add("version %q: want 1 to 128 of A-Z a-z 0-9 . _ + ~ - starting with a letter or digit", m.Version)
	}
	switch m.Runtime {
	case RuntimeGoPlugin, RuntimePython3:
	case "":
		add("runtime is empty (want %q or %q)", RuntimeGoPlugin, RuntimePython3)
	default:
		add("runtime %q is unknown (want %q or %q)", m.Runtime, RuntimeGoPlugin, RuntimePython3)
	}
	switch {
	case m.Runtime == RuntimePython3 && m.Python == nil:
		add("python: missing (a %s bundle says its WSGI application, its python path and the Python it needs)", RuntimePython3)
	case m.Runtime != RuntimePython3 && m.Python != nil:
		add("python: only a %s bundle has one (runtime is %q)", RuntimePython3, m.Runtime)
	}
	for i, a := range m.Args {
		if strings.ContainsRune(a, 0) || !utf8.ValidString(a) {
			add("args[%d] %q: contains a NUL byte or invalid UTF-8", i, a)
		}
	}

	if len(m.Sources) == 0 {
		add("sources: none (want at least one REPO@COMMIT)")
	}
	for i, s := range m.Sources {
		if err := s.validate(); err != nil {
			add("sources[%d]: %v", i, err)
		}
	}

	for k, v := range m.Toolchain {
		if !toolchainKeyRE.MatchString(k) {
			add("toolchain key %q: want 1 to 64 of a-z 0-9 . _ -", k)
		}
		if v == "" || len(v) > 256 || strings.ContainsFunc(v, unicode.IsControl) {
			add("toolchain %s %q: want 1 to 256 printable characters", k, v)
		}
	}
	if m.Runtime == RuntimeGoPlugin {
		for _, k := range []string{"go", "goos", "goarch"} {
			if _, ok := m.Toolchain[k]; !ok {
				add("toolchain: %q missing (required for %s)", k, RuntimeGoPlugin)
			}
		}
	}

	if len(m.Files) == 0 {
		add("files: none")
	}
	listed := make(map[string]File, len(m.Files))
	for i, f := range m.Files {
		if why := pathProblem(f.Path); why != "" {
			add("files[%d] %q: %s", i, f.Path, why)
			continue
		}
		if f.Path == ManifestName {
			add("files[%d] %q: the name is reserved for the manifest", i, f.Path)
		}
		if i > 0 && m.Files[i-1].Path >= f.Path {
			if m.Files[i-1].Path == f.Path {
				add("files[%d] %q: listed twice", i, f.Path)
			} else {
				add("files[%d] %q: not sorted (after %q)", i, f.Path, m.Files[i-1].Path)
			}
		}
		if f.Size < 0 {
			add("file %s: negative size %d", f.Path, f.Size)
		}
		if len(f.SHA256) != 64 || !isLowerHex(f.SHA256) {
			add("file %s: sha256 %q is not 64 lowercase hex digits", f.Path, f.SHA256)
		}
		if f.Mode != ModeExec && f.Mode != ModePlain {
			add("file %s: mode %s (want %s or %s)", f.Path, f.Mode, ModeExec, ModePlain)
		}
		listed[f.Path] = f
	}
	// A path cannot be both a file and a directory holding files.
	for _, f := range m.Files {
		if pathProblem(f.Path) != "" {
			continue // reported above
		}
		for _, dir := range parents(f.Path) {
			if _, ok := listed[dir]; ok {
				add("file %s: %s is listed as a file, so it cannot be a directory", f.Path, dir)
				break
			}
		}
	}

	if m.Entry == "" && m.Runtime == RuntimePython3 && m.Python != nil {
		// Reported with the python block's problems: the module's file.
	} else if m.Entry == "" {
		add("entry is empty (want the path of the entry point, e.g. bin/app)")
	} else if f, ok := listed[m.Entry]; !ok {
		add("entry %q is not a listed file", m.Entry)
	} else if m.Runtime == RuntimeGoPlugin && f.Mode != ModeExec {
		add("entry %q has mode %s: a %s entry must be executable (%s)", m.Entry, f.Mode, RuntimeGoPlugin, ModeExec)
	}
	if m.Runtime == RuntimePython3 && m.Python != nil {
		for _, p := range m.Python.problems(m.Entry, listed) {
			add("%s", p)
		}
	}

	if len(problems) == 0 {
		return nil
	}
	if len(problems) > maxProblems {
		problems = append(problems[:maxProblems], fmt.Sprintf("and %d more", len(problems)-maxProblems))
	}
	return fmt.Errorf("%w: %s", ErrInvalidManifest, strings.Join(problems, "; "))
}

// File returns the listed file with the given path.
func (m *Manifest) File(p string) (File, bool) {
	for _, f := range m.Files {
		if f.Path == p {
			return f, true
		}
	}
	return File{}, false
}

// encode returns the manifest as manifest.json holds it: indented JSON,
// HTML characters unescaped, a final newline. Equal manifests encode to
// equal bytes (map keys are sorted).
func (m *Manifest) encode() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	return buf.Bytes(), nil
}

// decodeManifest reads manifest.json strictly: unknown fields and trailing
// data are errors. It does not validate.
func decodeManifest(b []byte) (*Manifest, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m Manifest
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: decoding JSON: %v", ErrInvalidManifest, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: data after the JSON object", ErrInvalidManifest)
	}
	return &m, nil
}

// parents returns the directories holding a relative path, innermost first:
// "a/b/c" gives "a/b", "a". It stops at the root whatever p is.
func parents(p string) []string {
	var dirs []string
	for d := path.Dir(p); d != "." && d != "/" && d != ""; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	return dirs
}

// maxPathLen bounds a path inside a bundle.
const maxPathLen = 1024

// pathProblem says what makes p unfit as a path inside a bundle, or "" if it
// is fit: relative, slash separated, clean, printable.
func pathProblem(p string) string {
	switch {
	case p == "":
		return "empty path"
	case len(p) > maxPathLen:
		return fmt.Sprintf("path longer than %d bytes", maxPathLen)
	case !utf8.ValidString(p):
		return "path is not valid UTF-8"
	case strings.ContainsFunc(p, unicode.IsControl):
		return "path contains control characters"
	case strings.Contains(p, `\`):
		return `path contains a backslash`
	case strings.HasPrefix(p, "/"):
		return "absolute path"
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "path escapes the bundle (..)"
		}
	}
	if c := path.Clean(p); c != p {
		return fmt.Sprintf("path is not clean (want %q)", c)
	}
	return ""
}
