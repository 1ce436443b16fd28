// Package sdk checks the Go SDK as an application's own module sees it
// (issue 45): the SDK's go.mod names a small set of modules and none of the
// product's, and a worker built from it alone, outside this checkout's
// module, stays small.
package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// sdkPath is the SDK's module path.
const sdkPath = "github.com/stickyd/stickyd/plugins/worker"

// allowed are the modules the SDK's go.mod may name, each for a reason. A
// new one fails TestSDKModuleIsSmall until it is added here with its own.
var allowed = map[string]string{
	"google.golang.org/grpc":                    "the channel's transport (go-plugin's protocol is gRPC)",
	"google.golang.org/protobuf":                "the channel's wire format",
	"google.golang.org/genproto/googleapis/rpc": "gRPC's status messages",
	"golang.org/x/net":                          "gRPC's HTTP/2",
	"golang.org/x/text":                         "x/net's IDNA tables",
	"golang.org/x/sys":                          "gRPC's and the SDK's system calls",
	"github.com/hashicorp/go-hclog":             "the SDK's logs, in the JSON lines go-plugin's client reads",
	"github.com/fatih/color":                    "hclog's",
	"github.com/mattn/go-colorable":             "hclog's",
	"github.com/mattn/go-isatty":                "hclog's",
	"go.uber.org/goleak":                        "the SDK's own tests (leak checks); an app's go.mod never names it",
}

// forbidden are what no app depending on the SDK should have to carry: the
// product's deployment (Consul, Nomad, Terraform), its test tooling, and
// the product itself.
var forbidden = regexp.MustCompile(`hashicorp/consul|hashicorp/nomad|hashicorp/terraform|chromedp|goleak|^github\.com/stickyd/stickyd$`)

// maxWorkerBytes is acceptance 3's bound on a worker built with the flags
// docs/sdk.md recommends.
const maxWorkerBytes = 12_000_000

// The SDK's go.mod names no HashiCorp Consul, Nomad or Terraform module
// (nor the product's, nor go-plugin's), only modules of the allowed list,
// and replaces nothing (an app would not see a replace of the SDK's).
func TestSDKModuleIsSmall(t *testing.T) {
	mod := readModule(t, filepath.Join(repoRoot(t), "plugins", "worker"))
	if mod.Module.Path != sdkPath {
		t.Fatalf("the SDK's module is %q, want %q", mod.Module.Path, sdkPath)
	}
	for _, r := range mod.Require {
		if why, ok := allowed[r.Path]; !ok || strings.Contains(r.Path, "hashicorp/consul") ||
			strings.Contains(r.Path, "hashicorp/nomad") || strings.Contains(r.Path, "hashicorp/terraform") {
			t.Errorf("the SDK requires %s %s: not on the allowed list (test/sdk/module_test.go says why each is there)", r.Path, r.Version)
		} else if testing.Verbose() {
			t.Logf("%s %s: %s", r.Path, r.Version, why)
		}
	}
	if len(mod.Replace) > 0 {
		t.Errorf("the SDK's go.mod replaces %v: an app depending on it would not see that", mod.Replace)
	}
}

// An application's own module, outside the product's, that requires the SDK
// (replaced by this checkout's, as docs/sdk.md shows for a local checkout)
// and holds the counter example: go mod tidy names no Consul, Nomad,
// Terraform, test tooling or product module, and its worker, built with the
// flags docs/sdk.md recommends, is at most maxWorkerBytes and links nothing
// else either.
func TestWorkerBuiltFromTheSDKAlone(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a worker")
	}
	root := repoRoot(t)
	sdk := filepath.Join(root, "plugins", "worker")
	app := t.TempDir()
	if rel, err := filepath.Rel(root, app); err != nil || !strings.HasPrefix(rel, "..") {
		t.Fatalf("the app's folder %s is inside the product's module %s", app, root)
	}
	sdkMod := readModule(t, sdk)
	write(t, filepath.Join(app, "go.mod"), fmt.Sprintf("module example.com/counterapp\n\ngo %s\n\nrequire %s v0.0.0\n\nreplace %s => %s\n",
		sdkMod.Go, sdkPath, sdkPath, sdk))
	// The SDK's sums cover what the app needs: nothing to ask a checksum
	// database for; and with the module cache filled, nothing to download.
	sums, err := os.ReadFile(filepath.Join(sdk, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(app, "go.sum"), string(sums))
	counter, err := os.ReadFile(filepath.Join(root, "plugins", "examples", "counter", "counter.go"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(app, "counter", "counter.go"), string(counter))
	write(t, filepath.Join(app, "cmd", "counter-worker", "main.go"), `package main

import (
	"example.com/counterapp/counter"

	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	worker.Serve(counter.New(), worker.Options{Name: "counter", Version: "1"})
}
`)

	goCmd(t, app, "mod", "tidy")
	mod := readModule(t, app)
	for _, r := range mod.Require {
		if r.Path != sdkPath && forbidden.MatchString(r.Path) {
			t.Errorf("the app's tidy go.mod requires %s %s", r.Path, r.Version)
		}
	}
	t.Logf("the app's go.mod requires %d modules", len(mod.Require))

	bin := filepath.Join(app, "counter-worker")
	goCmd(t, app, "build", "-trimpath", "-ldflags=-s -w", "-tags", "grpcnotrace", "-o", bin, "./cmd/counter-worker")
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counter-worker (-trimpath -ldflags='-s -w' -tags grpcnotrace): %d bytes (%.1f MB)", fi.Size(), float64(fi.Size())/1e6)
	if fi.Size() > maxWorkerBytes {
		t.Errorf("counter-worker is %d bytes, more than %d", fi.Size(), maxWorkerBytes)
	}
	deps := goCmd(t, app, "version", "-m", bin)
	for line := range strings.Lines(deps) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "dep" && f[1] != sdkPath {
			if _, ok := allowed[f[1]]; !ok || forbidden.MatchString(f[1]) {
				t.Errorf("the worker links %s", strings.TrimSpace(line))
			}
		}
	}
}

// module is what `go mod edit -json` says of a go.mod.
type module struct {
	Module  struct{ Path string }
	Go      string
	Require []struct{ Path, Version string }
	Replace []any
}

func readModule(t *testing.T, dir string) module {
	t.Helper()
	var m module
	if err := json.Unmarshal([]byte(goCmd(t, dir, "mod", "edit", "-json")), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// goCmd runs the go command in dir, in that folder's module alone (no
// workspace) and free to update the go.mod there, and returns its stdout.
func goCmd(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s in %s: %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return stdout.String()
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// repoRoot is the product's module root: the folder of the go.mod above
// this test's.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.HasPrefix(b, []byte("module github.com/stickyd/stickyd\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod of github.com/stickyd/stickyd above the test's folder")
		}
		dir = parent
	}
}
