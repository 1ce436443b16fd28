package docs_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// docs/status.md proves each capability by naming tests, benchmarks, fuzz
// targets and files. The tests below check that every name it cites is
// defined and every path it cites exists, so that a renamed or deleted test
// cannot leave a row claiming a proof that is gone.

// citation is one thing docs/status.md cites: a Go test, benchmark or fuzz
// target (TestX, BenchmarkX, FuzzX; TestX/sub is cited as TestX), a Python
// test (test_x), or a path of the repository (test/bench/peers,
// docs/benchmarks/peers-*.csv).
type citation struct {
	Line int    // 1-based line of the document
	Name string // the name, or the path as written
	// Pkg is the package path written before a Go name in the same clause
	// (`internal/front` `TestA`, `TestB`): a clause ends at a `;` or a
	// table cell's end; a parenthesis opens a clause inside the one it is
	// in, which starts with that clause's package.
	Pkg string
}

// citations is what a document cites, in the order it cites it.
type citations struct {
	Go     []citation
	Python []citation
	Paths  []citation
}

func (c citations) count() int { return len(c.Go) + len(c.Python) + len(c.Paths) }

var (
	goName     = regexp.MustCompile(`^((?:Test|Benchmark|Fuzz)[A-Z0-9_]\w*)(?:/\S*)?$`)
	pythonName = regexp.MustCompile(`^test_[a-z0-9_]+$`)
	// repoPath is a path from the module root: it starts with one of the
	// top-level folders and may hold a glob (*) or braces ({a,b}).
	repoPath = regexp.MustCompile(`^(?:cmd|docs|internal|jobs|plugins|terraform|test)/[\w./*{},-]*$`)
	// barePath finds such a path in prose, outside backticks.
	barePath = regexp.MustCompile(`(?:^|[^\w/.-])((?:cmd|docs|internal|jobs|plugins|terraform|test)/[\w./*{},-]*)`)
	// pkgPath is a path that can name the package of the names after it: a
	// folder of Go code, not a file.
	pkgPath = regexp.MustCompile(`^(?:cmd|internal|plugins|test)/[\w/-]*\w$`)
)

// parseCitations returns the names and paths text cites. Names are the
// backticked ones; paths are backticked (the first word of a command such
// as `test/bench/peers -parts live`) or bare in the prose.
func parseCitations(text string) citations {
	var c citations
	for i, line := range strings.Split(text, "\n") {
		parseLine(&c, i+1, line)
	}
	return c
}

// clause is a level of parentheses: base is the package it started with,
// pkg the package its names are cited under now.
type clause struct{ base, pkg string }

func parseLine(c *citations, n int, line string) {
	stack := []clause{{}}
	var prose strings.Builder // the line outside backticks, for bare paths
	for i := 0; i < len(line); i++ {
		top := &stack[len(stack)-1]
		switch ch := line[i]; {
		case ch == '`':
			end := strings.IndexByte(line[i+1:], '`')
			if end < 0 {
				prose.WriteString(line[i:])
				i = len(line)
				continue
			}
			span := line[i+1 : i+1+end]
			i += end + 1
			prose.WriteByte(' ')
			cite(c, n, span, top)
		case ch == '\\' && i+1 < len(line):
			prose.WriteString(line[i : i+2])
			i++
		case ch == '|':
			// A table cell ends: its clauses with it.
			stack = []clause{{}}
			prose.WriteByte(' ')
		case ch == '(':
			stack = append(stack, clause{base: top.pkg, pkg: top.pkg})
			prose.WriteByte(ch)
		case ch == ')':
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			prose.WriteByte(ch)
		case ch == ';':
			top.pkg = top.base
			prose.WriteByte(ch)
		default:
			prose.WriteByte(ch)
		}
	}
	for _, m := range barePath.FindAllStringSubmatch(prose.String(), -1) {
		if p := trimPath(m[1]); p != "" {
			c.Paths = append(c.Paths, citation{Line: n, Name: p})
		}
	}
}

// cite records what one backticked span cites.
func cite(c *citations, n int, span string, cl *clause) {
	if m := goName.FindStringSubmatch(span); m != nil {
		c.Go = append(c.Go, citation{Line: n, Name: m[1], Pkg: cl.pkg})
		return
	}
	if pythonName.MatchString(span) {
		c.Python = append(c.Python, citation{Line: n, Name: span})
		return
	}
	word, _, _ := strings.Cut(span, " ")
	if !repoPath.MatchString(word) {
		return
	}
	if p := trimPath(word); p != "" {
		c.Paths = append(c.Paths, citation{Line: n, Name: p})
	}
	if span == word && pkgPath.MatchString(word) {
		cl.pkg = word
	}
}

// trimPath drops the punctuation of the sentence after a path.
func trimPath(p string) string { return strings.TrimRight(p, ".,") }

// defined is what the repository defines: each Go test, benchmark and fuzz
// target with the folders (slash-separated, from the root) that define it,
// and each Python test.
type defined struct {
	Go     map[string][]string
	Python map[string]bool
}

var (
	goDef     = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)\w*)\(`)
	pythonDef = regexp.MustCompile(`(?m)^\s*(?:async\s+)?def (test_\w+)\(`)
)

// definitions walks the repository from root (skipping .git and
// node_modules) and reads every *_test.go and *.py file.
func definitions(root string) (defined, error) {
	d := defined{Go: map[string][]string{}, Python: map[string]bool{}}
	err := filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if e.Name() == ".git" || e.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		goFile, pyFile := strings.HasSuffix(path, "_test.go"), strings.HasSuffix(path, ".py")
		if !goFile && !pyFile {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if pyFile {
			for _, m := range pythonDef.FindAllSubmatch(b, -1) {
				d.Python[string(m[1])] = true
			}
			return nil
		}
		dir, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range goDef.FindAllSubmatch(b, -1) {
			d.Go[string(m[1])] = append(d.Go[string(m[1])], filepath.ToSlash(dir))
		}
		return nil
	})
	return d, err
}

// missing lists what text cites that root does not have: names no file
// defines and paths that match nothing, one line each ("line 12: TestX").
func missing(root string, d defined, c citations) (names, paths []string) {
	for _, ct := range c.Go {
		if len(d.Go[ct.Name]) == 0 {
			names = append(names, fmt.Sprintf("line %d: %s", ct.Line, ct.Name))
		}
	}
	for _, ct := range c.Python {
		if !d.Python[ct.Name] {
			names = append(names, fmt.Sprintf("line %d: %s (Python)", ct.Line, ct.Name))
		}
	}
	for _, ct := range c.Paths {
		if !pathExists(root, ct.Name) {
			paths = append(paths, fmt.Sprintf("line %d: %s", ct.Line, ct.Name))
		}
	}
	return names, paths
}

// misplaced lists the Go names cited under a package that exists but does
// not define them ("line 54: internal/agent TestX (defined in test/e2e)").
func misplaced(root string, d defined, c citations) []string {
	var out []string
	for _, ct := range c.Go {
		dirs := d.Go[ct.Name]
		if ct.Pkg == "" || len(dirs) == 0 {
			continue
		}
		if st, err := os.Stat(filepath.Join(root, filepath.FromSlash(ct.Pkg))); err != nil || !st.IsDir() {
			continue // a path that is not a folder: the path check says so
		}
		found := false
		for _, dir := range dirs {
			found = found || dir == ct.Pkg
		}
		if !found {
			out = append(out, fmt.Sprintf("line %d: %s %s (defined in %s)", ct.Line, ct.Pkg, ct.Name, strings.Join(dirs, ", ")))
		}
	}
	return out
}

// pathExists says whether p, with its braces expanded and its globs
// matched, names at least one file or folder under root for each
// expansion.
func pathExists(root, p string) bool {
	for _, e := range expandBraces(p) {
		full := filepath.Join(root, filepath.FromSlash(e))
		if strings.ContainsAny(e, "*?[") {
			if m, err := filepath.Glob(full); err != nil || len(m) == 0 {
				return false
			}
			continue
		}
		if _, err := os.Stat(full); err != nil {
			return false
		}
	}
	return true
}

// expandBraces expands a{b,c}d{e,f} into abde, abdf, acde, acdf.
func expandBraces(p string) []string {
	open := strings.IndexByte(p, '{')
	if open < 0 {
		return []string{p}
	}
	end := strings.IndexByte(p[open:], '}')
	if end < 0 {
		return []string{p}
	}
	var out []string
	for _, alt := range strings.Split(p[open+1:open+end], ",") {
		out = append(out, expandBraces(p[:open]+alt+p[open+end+1:])...)
	}
	return out
}

// moduleRoot is the folder of go.mod, found upward from here.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// checkStatus reads the status document at path and returns what it cites
// and, when something it cites is missing from the repository at root, a
// report naming each missing thing with its line ("" when nothing is).
func checkStatus(root string, d defined, path string) (citations, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return citations{}, "", err
	}
	c := parseCitations(string(b))
	names, paths := missing(root, d, c)
	var report []string
	if len(names) > 0 {
		report = append(report, fmt.Sprintf("%s cites %d names that no *_test.go or Python test defines:\n\t%s",
			path, len(names), strings.Join(names, "\n\t")))
	}
	if len(paths) > 0 {
		report = append(report, fmt.Sprintf("%s cites %d paths that do not exist:\n\t%s",
			path, len(paths), strings.Join(paths, "\n\t")))
	}
	return c, strings.Join(report, "\n"), nil
}

// Every test, benchmark, fuzz target and path docs/status.md cites exists,
// and a Go name cited under a package is defined in that package.
func TestStatusCitationsExist(t *testing.T) {
	root := moduleRoot(t)
	d, err := definitions(root)
	if err != nil {
		t.Fatal(err)
	}
	c, report, err := checkStatus(root, d, filepath.Join(root, "docs", "status.md"))
	if err != nil {
		t.Fatal(err)
	}
	if report != "" {
		t.Error(report)
	}
	if len(c.Go) == 0 || len(c.Paths) == 0 {
		t.Fatalf("found %d Go names and %d paths in docs/status.md: the parser is broken", len(c.Go), len(c.Paths))
	}
	if bad := misplaced(root, d, c); len(bad) > 0 {
		t.Errorf("docs/status.md cites %d names under a package that does not define them:\n\t%s",
			len(bad), strings.Join(bad, "\n\t"))
	}
	unique := map[string]bool{}
	for _, ct := range c.Go {
		unique[ct.Name] = true
	}
	t.Logf("docs/status.md: %d citations checked (%d of Go tests, benchmarks and fuzz targets, %d distinct; %d of Python tests; %d of paths)",
		c.count(), len(c.Go), len(unique), len(c.Python), len(c.Paths))
}

// The check fails, naming them, on a copy of docs/status.md with a bogus
// test name and a bogus path added.
func TestStatusCheckNamesWhatIsMissing(t *testing.T) {
	root := moduleRoot(t)
	d, err := definitions(root)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "status.md"))
	if err != nil {
		t.Fatal(err)
	}
	bogus := "| a bogus row | built | `internal/front` `TestCookieLife`, `TestNoSuchTestAnywhere42`; `internal/nosuch/file.go` |\n"
	copyPath := filepath.Join(t.TempDir(), "status.md")
	if err := os.WriteFile(copyPath, append(b, bogus...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, report, err := checkStatus(root, d, copyPath)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Count(string(b), "\n") + 1
	want := fmt.Sprintf("%[1]s cites 1 names that no *_test.go or Python test defines:\n\tline %[2]d: TestNoSuchTestAnywhere42\n"+
		"%[1]s cites 1 paths that do not exist:\n\tline %[2]d: internal/nosuch/file.go", copyPath, line)
	if report != want {
		t.Fatalf("on the copy with a bogus row the report is\n%s\nwant\n%s", report, want)
	}
	t.Logf("the report on the copy with a bogus row:\n%s", report)
}

// parseCitations on a small sample: backticked names (a subtest cited by
// its test), packages carried to the names after them until a `;`,
// parentheses, a table cell's end, paths backticked or bare; and missing
// names one that exists and not the other.
func TestParseCitations(t *testing.T) {
	sample := strings.Join([]string{
		"# Status",
		"| cap | built: `worker.Session`, `PackageChunk` | `internal/front` `TestCookieLife`, `TestBogusName99/sub` (a note, `test/e2e` `TestX`), `FuzzOp`; `TestAfterTheClause` |",
		"| cap2 | built: docs/benchmarks.md, `test/bench/peers -parts live` | `BenchmarkPage10MB`; Python `test_message_runs_once`; `docs/benchmarks/peers-*.csv`, `internal/front/decode.go`. |",
		"| cap3 | `stickyd bundle pack\\|push` `(` | `internal/nosuch` `TestY` |",
	}, "\n")
	c := parseCitations(sample)
	var goNames []string
	for _, ct := range c.Go {
		goNames = append(goNames, fmt.Sprintf("%d %s %s", ct.Line, ct.Pkg, ct.Name))
	}
	want := []string{
		"2 internal/front TestCookieLife", "2 internal/front TestBogusName99", "2 test/e2e TestX",
		"2 internal/front FuzzOp", "2  TestAfterTheClause", "3  BenchmarkPage10MB", "4 internal/nosuch TestY",
	}
	if strings.Join(goNames, "|") != strings.Join(want, "|") {
		t.Errorf("Go names:\n got %q\nwant %q", goNames, want)
	}
	if len(c.Python) != 1 || c.Python[0].Name != "test_message_runs_once" {
		t.Errorf("Python names: %+v", c.Python)
	}
	var paths []string
	for _, ct := range c.Paths {
		paths = append(paths, ct.Name)
	}
	sort.Strings(paths)
	wantPaths := []string{"docs/benchmarks.md", "docs/benchmarks/peers-*.csv", "internal/front", "internal/front/decode.go", "internal/nosuch", "test/bench/peers", "test/e2e"}
	if strings.Join(paths, " ") != strings.Join(wantPaths, " ") {
		t.Errorf("paths:\n got %q\nwant %q", paths, wantPaths)
	}

	root := moduleRoot(t)
	d, err := definitions(root)
	if err != nil {
		t.Fatal(err)
	}
	names, missingPaths := missing(root, d, citations{
		Go:    []citation{{Line: 2, Name: "TestCookieLife"}, {Line: 2, Name: "TestBogusName99"}},
		Paths: []citation{{Line: 3, Name: "internal/front/decode.go"}, {Line: 3, Name: "docs/benchmarks/peers-*.csv"}, {Line: 4, Name: "internal/nosuch"}},
	})
	if fmt.Sprint(names) != "[line 2: TestBogusName99]" || fmt.Sprint(missingPaths) != "[line 4: internal/nosuch]" {
		t.Errorf("missing: names %q, paths %q", names, missingPaths)
	}
	bad := misplaced(root, d, citations{Go: []citation{
		{Line: 5, Name: "TestCookieLife", Pkg: "internal/front"},
		{Line: 6, Name: "TestCookieLife", Pkg: "internal/agent"},
	}})
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "line 6: internal/agent TestCookieLife (defined in internal/front") {
		t.Errorf("misplaced: %q", bad)
	}
}

// cells counts a table row's cells as GitHub renders them: every "|" not
// escaped as "\|" separates two, inside backticks too.
func cells(row string) int {
	row = strings.TrimSpace(row)
	n := 0
	for i := 0; i < len(row); i++ {
		switch row[i] {
		case '\\':
			i++
		case '|':
			n++
		}
	}
	return n - 1 // the row starts and ends with one
}

// Every row of docs/status.md's tables has as many cells as its header:
// an unescaped "|" in a row (a command's alternatives in backticks) splits
// it and shifts the proof out of its column.
func TestStatusTablesAreWellFormed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "status.md"))
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "|") {
			want = 0
			continue
		}
		if want == 0 {
			want = cells(line) // the header
			continue
		}
		if got := cells(line); got != want {
			t.Errorf("docs/status.md line %d has %d cells, its table %d (escape a | inside a cell as \\|)", i+1, got, want)
		}
	}
	if got := cells("| `a\\|b` | c |"); got != 2 {
		t.Errorf("cells of an escaped pipe: %d, want 2", got)
	}
}
