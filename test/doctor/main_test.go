package main

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// fakeEnv is a machine with everything; each test takes something away.
func fakeEnv() Env {
	return Env{
		GoVersion: "go1.26.8",
		GoMod:     func() ([]byte, error) { return []byte("module x\n\ngo 1.26.8\n"), nil },
		LookPath: func(p string) (string, error) {
			switch p {
			case "/usr/bin/chromium", "/usr/bin/python3", "sudo":
				return p, nil
			}
			return "", errors.New("not found")
		},
		Getenv:        func(string) string { return "" },
		PythonImports: func(string) bool { return true },
		Listen:        func(string) error { return nil },
		Exists:        func(string) bool { return true },
	}
}

func report(env Env) (string, int) {
	var b strings.Builder
	code := run(&b, env, "127.0.0.1:8080")
	return b.String(), code
}

// Each thing a test or make run needs, when missing, is one MISSING line
// that names it and says how to get it, and the exit code is 1; with all
// of them, every line is ok and the exit code 0.
func TestDoctor(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Env)
		code  int
		wants []string
	}{
		{"all there", func(*Env) {}, 0, []string{"ok       Go 1.26.8", "ok       Chromium for the browser tests: /usr/bin/chromium", "ok       python3 imports grpc", "Nothing required is missing"}},
		{"old go", func(e *Env) { e.GoVersion = "go1.25.3" }, 1, []string{"MISSING  Go 1.25.3 is older than go.mod's 1.26.8"}},
		{"older patch", func(e *Env) { e.GoVersion = "go1.26.1" }, 1, []string{"MISSING  Go 1.26.1 is older"}},
		{"newer go", func(e *Env) { e.GoVersion = "go1.27rc1" }, 0, []string{"ok       Go 1.27rc1"}},
		{"no chromium", func(e *Env) {
			e.LookPath = func(p string) (string, error) {
				if p == "/usr/bin/python3" {
					return p, nil
				}
				return "", errors.New("not found")
			}
		}, 1, []string{"MISSING  Chromium: the browser tests (test/browser) need it; make deps installs chromium with apt-get (needs root, and there is no sudo"}},
		{"chromium elsewhere", func(e *Env) {
			e.Getenv = func(k string) string {
				if k == "CHROMIUM" {
					return "/opt/chrome"
				}
				return ""
			}
		}, 1, []string{`MISSING  $CHROMIUM="/opt/chrome" is not a program`}},
		{"no grpc, no cryptography", func(e *Env) {
			e.PythonImports = func(m string) bool { return m == "google.protobuf" }
		}, 1, []string{"MISSING  python3 cannot import grpc, cryptography", "make deps installs python3-grpcio python3-cryptography with apt-get (through sudo"}},
		{"as root", func(e *Env) {
			e.IsRoot = true
			e.PythonImports = func(m string) bool { return m != "google.protobuf" }
		}, 1, []string{"installs python3-protobuf with apt-get (as root)"}},
		{"port taken", func(e *Env) {
			e.Listen = func(string) error { return syscall.EADDRINUSE }
		}, 1, []string{"MISSING  port 127.0.0.1:8080 for make run: address already in use; stop what holds it, or make run ADDR=127.0.0.1:8081"}},
		{"tools not built", func(e *Env) { e.Exists = func(string) bool { return false } }, 0, []string{"note     bin/consul, bin/nomad not built yet"}},
		{"outside the checkout", func(e *Env) { e.GoMod = func() ([]byte, error) { return nil, os.ErrNotExist } }, 1, []string{"MISSING  go.mod:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := fakeEnv()
			tt.edit(&env)
			out, code := report(env)
			if code != tt.code {
				t.Fatalf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			for _, w := range tt.wants {
				if !strings.Contains(out, w) {
					t.Fatalf("report lacks %q:\n%s", w, out)
				}
			}
			if n := strings.Count(out, "MISSING "); (n > 0) != (tt.code != 0) {
				t.Fatalf("%d MISSING lines with exit %d:\n%s", n, code, out)
			}
		})
	}
}

// On this machine the real checks run and say something for each.
func TestDoctorOnThisMachine(t *testing.T) {
	out, _ := report(system("../.."))
	for _, w := range []string{"Go ", "Chromium", "python3", "port 127.0.0.1:8080", "bin/consul"} {
		if !strings.Contains(out, w) {
			t.Fatalf("report lacks %q:\n%s", w, out)
		}
	}
}
