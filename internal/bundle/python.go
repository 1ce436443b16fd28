package bundle

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

// Python says how a RuntimePython3 bundle runs: stickyd's Python worker
// (`PYTHON -m stickyd.worker WSGI ARGS...`) with the bundle's directories
// on PYTHONPATH, on an interpreter that meets RequiresPython. A manifest of
// another runtime has none.
type Python struct {
	// WSGI is the application as MODULE:CALLABLE, or an application
	// factory with literal arguments (MODULE:create_app()), as
	// stickyd.worker takes it. The module must be in the bundle: the
	// manifest's Entry is its file.
	WSGI string `json:"wsgi"`
	// Path lists the bundle's directories that go on PYTHONPATH, in
	// order, before the interpreter's own site-packages: the app's
	// directory, then its dependencies' (PackPython writes "app" and
	// "deps").
	Path []string `json:"path"`
	// RequiresPython is the Python versions the bundle runs on, as the
	// requires-python of a pyproject.toml says it (PEP 440 specifiers
	// separated by commas, release numbers only): ">=3.11", "==3.11.*",
	// ">=3.10,<3.13", "~=3.11.2". Dependencies with compiled extension
	// modules tie a bundle to the minor version they were built for.
	RequiresPython string `json:"requires_python,omitempty"`
	// Interpreter names the Python the bundle wants when the group's
	// recipe names none: a name looked up on the agents' PATH
	// ("python3.11") or an absolute path. Empty means the system's
	// /usr/bin/python3.
	Interpreter string `json:"interpreter,omitempty"`
}

// maxPythonPath bounds Python.Path.
const maxPythonPath = 16

var (
	moduleRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	interpNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	specifierRE   = regexp.MustCompile(`^(~=|===|==|!=|<=|>=|<|>)\s*(\S+)$`)
	releaseRE     = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*$`)
	releaseStarRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)*\.\*$`)
)

// SplitWSGI splits MODULE:CALLABLE. It does not validate either part.
func SplitWSGI(wsgi string) (module, callable string) {
	module, callable, _ = strings.Cut(wsgi, ":")
	return module, callable
}

// problems lists what is wrong with a python3 manifest's python block and
// its entry, given the manifest's files by path.
func (p *Python) problems(entry string, listed map[string]File) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	module, callable, hasColon := strings.Cut(p.WSGI, ":")
	switch {
	case p.WSGI == "":
		add("python.wsgi is empty (want the WSGI application as MODULE:CALLABLE)")
	case !hasColon || callable == "":
		add("python.wsgi %q: want MODULE:CALLABLE, e.g. shop.wsgi:application", p.WSGI)
	case !moduleRE.MatchString(module):
		add("python.wsgi %q: module %q is not a dotted Python name", p.WSGI, module)
	case len(callable) > 256 || strings.ContainsFunc(callable, unicode.IsControl) || strings.HasPrefix(callable, "-"):
		add("python.wsgi %q: the callable must be 1 to 256 printable characters", p.WSGI)
	}

	if len(p.Path) == 0 {
		add("python.path: none (want the bundle's directories for PYTHONPATH, e.g. app and deps)")
	}
	if len(p.Path) > maxPythonPath {
		add("python.path: %d directories (at most %d)", len(p.Path), maxPythonPath)
	}
	seen := map[string]bool{}
	for i, d := range p.Path {
		switch {
		case d == ".":
			add("python.path[%d] %q: name a directory of the bundle, not its root", i, d)
		case pathProblem(d) != "":
			add("python.path[%d] %q: %s", i, d, pathProblem(d))
		case seen[d]:
			add("python.path[%d] %q: listed twice", i, d)
		case !holdsFiles(d, listed):
			add("python.path[%d] %q: no file of the bundle is in it", i, d)
		}
		seen[d] = true
	}

	if p.RequiresPython == "" && p.Interpreter == "" {
		add("python: say which Python the bundle needs (requires_python, e.g. \">=3.11\", or interpreter)")
	}
	if p.RequiresPython != "" {
		if _, err := ParseRequiresPython(p.RequiresPython); err != nil {
			add("python.%v", err)
		}
	}
	if p.Interpreter != "" {
		if why := interpreterProblem(p.Interpreter); why != "" {
			add("python.interpreter %q: %s", p.Interpreter, why)
		}
	}

	if moduleRE.MatchString(module) && len(out) == 0 {
		want, candidates := ModuleFile(module, p.Path, listed)
		switch {
		case want == "":
			add("python.wsgi %q: module %s is not in the bundle (looked for %s)", p.WSGI, module, strings.Join(candidates, ", "))
		case entry == "":
			add("entry is empty (want the WSGI module's file, %s)", want)
		case entry != want:
			add("entry %q: for python3 it is the WSGI module's file, %s", entry, want)
		}
	}
	return out
}

// holdsFiles reports whether a listed file is under directory d.
func holdsFiles(d string, listed map[string]File) bool {
	for p := range listed {
		if strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// interpreterProblem says what makes s unfit as an interpreter's name, or "".
func interpreterProblem(s string) string {
	switch {
	case strings.HasPrefix(s, "/"):
		if len(s) > maxPathLen || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == ' ' }) {
			return "want a clean absolute path without spaces"
		}
		if path.Clean(s) != s {
			return fmt.Sprintf("path is not clean (want %q)", path.Clean(s))
		}
		return ""
	case interpNameRE.MatchString(s):
		return ""
	default:
		return "want a name on PATH (python3.11) or an absolute path"
	}
}

// ModuleFile finds the file of a Python module in the bundle's python path
// dirs, in order, as the import system would: a package's __init__.py
// before a module's .py, the first directory that has either. It returns
// the file, or "" and the candidates it looked for.
func ModuleFile(module string, dirs []string, listed map[string]File) (file string, candidates []string) {
	rel := strings.ReplaceAll(module, ".", "/")
	for _, d := range dirs {
		for _, c := range []string{d + "/" + rel + "/__init__.py", d + "/" + rel + ".py"} {
			if _, ok := listed[c]; ok {
				return c, nil
			}
			candidates = append(candidates, c)
		}
	}
	return "", candidates
}

// PythonRequirement is a parsed requires_python: every specifier must
// allow a version for the requirement to.
type PythonRequirement []pySpecifier

type pySpecifier struct {
	op       string
	release  []int
	wildcard bool // ==V.* or !=V.*
}

// ParseRequiresPython parses PEP 440 version specifiers separated by
// commas: ~=, ==, !=, <=, >=, <, > and the ==V.* and !=V.* prefix forms, on
// release numbers (3, 3.11, 3.11.4). Pre-, post- and dev-releases, local
// versions and === are refused: a deployment runs a released Python.
func ParseRequiresPython(s string) (PythonRequirement, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("requires_python is empty")
	}
	if len(s) > 256 || strings.ContainsFunc(s, unicode.IsControl) {
		return nil, fmt.Errorf("requires_python %q: want at most 256 printable characters", s)
	}
	var req PythonRequirement
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		m := specifierRE.FindStringSubmatch(part)
		if m == nil {
			return nil, fmt.Errorf("requires_python %q: %q is not a version specifier (want e.g. >=3.11, ==3.11.*, <3.14)", s, part)
		}
		op, v := m[1], m[2]
		sp := pySpecifier{op: op}
		switch {
		case op == "===":
			return nil, fmt.Errorf("requires_python %q: === (arbitrary equality) is not supported", s)
		case releaseStarRE.MatchString(v) && (op == "==" || op == "!="):
			sp.wildcard = true
			v = strings.TrimSuffix(v, ".*")
		case releaseStarRE.MatchString(v):
			return nil, fmt.Errorf("requires_python %q: %s takes no .* (only == and != do)", s, op)
		case !releaseRE.MatchString(v):
			return nil, fmt.Errorf("requires_python %q: version %q: want release numbers such as 3.11 or 3.11.4 (no pre-, post-, dev- or local versions)", s, v)
		}
		rel, err := parseRelease(v)
		if err != nil {
			return nil, fmt.Errorf("requires_python %q: %w", s, err)
		}
		if op == "~=" && len(rel) < 2 {
			return nil, fmt.Errorf("requires_python %q: ~= needs at least two numbers (~=3.11)", s)
		}
		sp.release = rel
		req = append(req, sp)
	}
	return req, nil
}

// parseRelease parses "3.11.4" into its numbers.
func parseRelease(v string) ([]int, error) {
	parts := strings.Split(v, ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || len(p) > 9 {
			return nil, fmt.Errorf("version %q: %q is not a number", v, p)
		}
		out[i] = n
	}
	return out, nil
}

// Allows reports whether the Python version v ("3.11.4", as
// sys.version_info gives it) meets every specifier.
func (r PythonRequirement) Allows(v string) (bool, error) {
	if !releaseRE.MatchString(v) {
		return false, fmt.Errorf("python version %q: want release numbers such as 3.11.4", v)
	}
	ver, err := parseRelease(v)
	if err != nil {
		return false, err
	}
	for _, s := range r {
		if !s.allows(ver) {
			return false, nil
		}
	}
	return true, nil
}

func (s pySpecifier) allows(v []int) bool {
	c := compareRelease(v, s.release)
	switch s.op {
	case "==":
		if s.wildcard {
			return hasPrefix(v, s.release)
		}
		return c == 0
	case "!=":
		if s.wildcard {
			return !hasPrefix(v, s.release)
		}
		return c != 0
	case "<=":
		return c <= 0
	case ">=":
		return c >= 0
	case "<":
		return c < 0
	case ">":
		return c > 0
	case "~=":
		return c >= 0 && hasPrefix(v, s.release[:len(s.release)-1])
	}
	return false
}

// compareRelease compares two release numbers, the shorter padded with
// zeros (3.11 == 3.11.0).
func compareRelease(a, b []int) int {
	for i := 0; i < max(len(a), len(b)); i++ {
		x, y := 0, 0
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// hasPrefix reports whether v, padded with zeros, starts with prefix.
func hasPrefix(v, prefix []int) bool {
	for i, p := range prefix {
		x := 0
		if i < len(v) {
			x = v[i]
		}
		if x != p {
			return false
		}
	}
	return true
}
