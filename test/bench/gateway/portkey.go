package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Portkey's open-source AI gateway, the peer: the npm package
// @portkey-ai/gateway installed by `npm ci` in testdata/portkey (make
// bench-gateway-deps), with hono and @hono/node-server pinned by the
// package's overrides (newer ones break its streaming). It runs as its
// package starts it (`npx @portkey-ai/gateway`, that is node
// build/start-server.js), headless, in one node process. A call names its
// provider per request: x-portkey-provider openai and
// x-portkey-custom-host the fake provider's /v1 root (Portkey trusts
// 127.0.0.1 as a custom host by default).

// portkeyScript is the package's server, inside the install directory.
const portkeyScript = "node_modules/@portkey-ai/gateway/build/start-server.js"

// defaultPortkeyDir is testdata/portkey beside this program's source,
// as the working directory names it when it is the repository's root
// (go run ./test/bench/gateway), or else as the source's path does.
func defaultPortkeyDir() string {
	const rel = "test/bench/gateway/testdata/portkey"
	if _, err := os.Stat(rel); err == nil {
		return rel
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		return filepath.Join(filepath.Dir(file), "testdata", "portkey")
	}
	return rel
}

// portkey is a running Portkey gateway.
type portkey struct {
	proc    *process
	addr    string
	version string // the package's, node's and the pinned hono's
	header  http.Header
}

// startPortkey starts Portkey from its install directory dir on a free
// port, its output to a file in logDir, and returns once it answers.
func startPortkey(ctx context.Context, dir, providerURL, logDir string) (*portkey, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	script := filepath.Join(dir, portkeyScript)
	if _, err := os.Stat(script); err != nil {
		return nil, fmt.Errorf("portkey is not installed in %s (run make bench-gateway-deps, or npm ci there; -systems without portkey leaves it out): %w", dir, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("portkey needs node: %w", err)
	}
	addr, err := freePort()
	if err != nil {
		return nil, err
	}
	_, port, _ := strings.Cut(addr, ":")
	logFile, err := os.Create(filepath.Join(logDir, "portkey.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// Portkey listens on every interface of the port it is given (its
	// server takes no host).
	cmd := exec.Command(node, script, "--port="+port, "--headless")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting portkey: %w", err)
	}
	p := &portkey{proc: newProcess(cmd, addr), addr: addr, header: http.Header{}}
	p.header.Set("x-portkey-provider", "openai")
	p.header.Set("x-portkey-custom-host", providerURL)
	p.header.Set("Authorization", "Bearer sk-bench")
	p.version = portkeyVersions(dir, node)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if resp, err := http.Get("http://" + addr + "/"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if p.proc.exited() || time.Now().After(deadline) {
			p.proc.stop()
			out, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Errorf("portkey did not start on %s: %.2000s", addr, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := waitAnswered(ctx, "http://"+addr+"/v1/chat/completions", providerModel, p.header); err != nil {
		p.proc.stop()
		return nil, fmt.Errorf("portkey's first call: %w", err)
	}
	return p, nil
}

// portkeyVersions names the installed Portkey, hono and
// @hono/node-server, and node.
func portkeyVersions(dir, node string) string {
	version := func(pkg string) string {
		b, err := os.ReadFile(filepath.Join(dir, "node_modules", pkg, "package.json"))
		if err != nil {
			return "?"
		}
		var p struct{ Version string }
		_ = json.Unmarshal(b, &p)
		return p.Version
	}
	nv, _ := exec.Command(node, "--version").Output()
	return fmt.Sprintf("@portkey-ai/gateway %s (hono %s, @hono/node-server %s), node %s",
		version("@portkey-ai/gateway"), version("hono"), version("@hono/node-server"), strings.TrimSpace(string(nv)))
}
