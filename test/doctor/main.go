// Command doctor tells a newcomer, before a test fails for it, what this
// machine lacks to run stickyd's demo and tests: a Go as new as go.mod's,
// Chromium for the browser tests, python3 with grpc, protobuf and
// cryptography for the Python worker's tests, a free port for make run.
// `make doctor` runs it. It prints one plain line per check and exits 1 when
// something required is missing; it installs nothing (make deps does).
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the front address make run uses (its ADDR)")
	root := flag.String("root", ".", "the checkout (where go.mod is)")
	flag.Parse()
	os.Exit(run(os.Stdout, system(*root), *addr))
}

// Status is how a check went.
type Status string

const (
	OK      Status = "ok"
	Missing Status = "MISSING" // required: make doctor exits 1
	Note    Status = "note"    // worth knowing, not required
)

// Result is one line of the report.
type Result struct {
	Status Status
	Text   string
}

// Env is what the checks look at; tests give a fake one.
type Env struct {
	// GoVersion is the running toolchain's ("go1.26.8"); GoMod is go.mod.
	GoVersion string
	GoMod     func() ([]byte, error)
	// LookPath finds a program; Getenv reads the environment.
	LookPath func(string) (string, error)
	Getenv   func(string) string
	// PythonImports reports whether python3 imports the module.
	PythonImports func(module string) bool
	// Listen tries to bind addr.
	Listen func(addr string) error
	// Exists reports whether a file of the checkout exists.
	Exists func(path string) bool
	// IsRoot reports whether this runs as root.
	IsRoot bool
}

// system is the machine's Env.
func system(root string) Env {
	return Env{
		GoVersion: runtime.Version(),
		GoMod:     func() ([]byte, error) { return os.ReadFile(filepath.Join(root, "go.mod")) },
		LookPath:  exec.LookPath,
		Getenv:    os.Getenv,
		PythonImports: func(module string) bool {
			return exec.Command("/usr/bin/python3", "-c", "import "+module).Run() == nil
		},
		Listen: func(addr string) error {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return err
			}
			return ln.Close()
		},
		Exists: func(path string) bool { _, err := os.Stat(filepath.Join(root, path)); return err == nil },
		IsRoot: os.Geteuid() == 0,
	}
}

// run prints the report to w and returns the exit code.
func run(w io.Writer, env Env, addr string) int {
	results := check(env, addr)
	code := 0
	for _, r := range results {
		fmt.Fprintf(w, "%-8s %s\n", r.Status, r.Text)
		if r.Status == Missing {
			code = 1
		}
	}
	if code != 0 {
		fmt.Fprintln(w, "\nSomething required is missing (MISSING above); `make deps` installs the Debian packages.")
	} else {
		fmt.Fprintln(w, "\nNothing required is missing: `make run` and `make test` can start.")
	}
	return code
}

// check runs every check, in the order a newcomer meets them.
func check(env Env, addr string) []Result {
	return []Result{
		checkGo(env),
		checkPort(env, addr),
		checkChromium(env),
		checkPython(env),
		checkTools(env),
	}
}

func checkGo(env Env) Result {
	mod, err := env.GoMod()
	if err != nil {
		return Result{Missing, fmt.Sprintf("go.mod: %v (run make doctor in the checkout)", err)}
	}
	want := ""
	for _, line := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "go "); ok {
			want = strings.TrimSpace(v)
			break
		}
	}
	if want == "" {
		return Result{Missing, "go.mod names no go version"}
	}
	have := strings.TrimPrefix(env.GoVersion, "go")
	if older(have, want) {
		return Result{Missing, fmt.Sprintf("Go %s is older than go.mod's %s: install Go %s or newer", have, want, want)}
	}
	return Result{OK, fmt.Sprintf("Go %s (go.mod wants %s or newer)", have, want)}
}

// older reports whether version a is before b ("1.26.1" < "1.26.8";
// "1.27rc1" counts as 1.27).
func older(a, b string) bool {
	pa, pb := parts(a), parts(b)
	for i := range 3 {
		if pa[i] != pb[i] {
			return pa[i] < pb[i]
		}
	}
	return false
}

func parts(v string) [3]int {
	var out [3]int
	for i, p := range strings.SplitN(v, ".", 3) {
		end := 0
		for end < len(p) && p[end] >= '0' && p[end] <= '9' {
			end++
		}
		out[i], _ = strconv.Atoi(p[:end])
	}
	return out
}

func checkPort(env Env, addr string) Result {
	if err := env.Listen(addr); err != nil {
		host, port, _ := net.SplitHostPort(addr)
		next := addr
		if n, err := strconv.Atoi(port); err == nil {
			next = net.JoinHostPort(host, strconv.Itoa(n+1))
		}
		return Result{Missing, fmt.Sprintf("port %s for make run: %v; stop what holds it, or make run ADDR=%s", addr, err, next)}
	}
	return Result{OK, fmt.Sprintf("port %s is free for make run", addr)}
}

func checkChromium(env Env) Result {
	if p := env.Getenv("CHROMIUM"); p != "" {
		if path, err := env.LookPath(p); err == nil {
			return Result{OK, "Chromium for the browser tests: " + path + " ($CHROMIUM)"}
		}
		return Result{Missing, fmt.Sprintf("$CHROMIUM=%q is not a program; the browser tests (test/browser) need Chromium", p)}
	}
	for _, p := range []string{"/usr/bin/chromium", "chromium"} {
		if path, err := env.LookPath(p); err == nil {
			return Result{OK, "Chromium for the browser tests: " + path}
		}
	}
	return Result{Missing, "Chromium: the browser tests (test/browser) need it; make deps installs chromium with apt-get" + sudoHint(env)}
}

// pythonModules are what the Python worker's tests import, and the Debian
// package of each.
var pythonModules = []struct{ module, pkg string }{
	{"grpc", "python3-grpcio"},
	{"google.protobuf", "python3-protobuf"},
	{"cryptography", "python3-cryptography"},
}

func checkPython(env Env) Result {
	if _, err := env.LookPath("/usr/bin/python3"); err != nil {
		return Result{Missing, "/usr/bin/python3: the Python worker's tests need it with grpc, protobuf and cryptography; make deps installs python3-grpcio python3-protobuf python3-cryptography with apt-get" + sudoHint(env)}
	}
	var missing, pkgs []string
	for _, m := range pythonModules {
		if !env.PythonImports(m.module) {
			missing, pkgs = append(missing, m.module), append(pkgs, m.pkg)
		}
	}
	if len(missing) > 0 {
		return Result{Missing, fmt.Sprintf("python3 cannot import %s: the Python worker's tests need it; make deps installs %s with apt-get%s",
			strings.Join(missing, ", "), strings.Join(pkgs, " "), sudoHint(env))}
	}
	return Result{OK, "python3 imports grpc, google.protobuf and cryptography"}
}

// checkTools notes the Consul and Nomad agents make test builds: not
// required (make test builds them), but slow the first time.
func checkTools(env Env) Result {
	if env.Exists("bin/consul") && env.Exists("bin/nomad") {
		return Result{OK, "bin/consul and bin/nomad are built (the deployment suite)"}
	}
	return Result{Note, "bin/consul, bin/nomad not built yet: make test builds them first (make tools: about 3.6 GB of modules and 10-15 minutes, once)"}
}

// sudoHint says how make deps will get root for apt-get.
func sudoHint(env Env) string {
	if env.IsRoot {
		return " (as root)"
	}
	if _, err := env.LookPath("sudo"); err == nil {
		return " (through sudo: it may ask for your password)"
	}
	return " (needs root, and there is no sudo: run make deps as root)"
}
