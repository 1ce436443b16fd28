package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

// startBare starts an in-process agent from cfg (a counter group added),
// logging at info into the returned buffer; it returns Start's error.
func startBare(t *testing.T, cfg *agent.Config) (*agent.Agent, *syncBuffer, error) {
	t.Helper()
	cfg.Name = "startup"
	cfg.LogLevel = "info"
	if cfg.Server == nil {
		cfg.Server = &agent.ServerConfig{}
	}
	cfg.Groups = []*agent.GroupConfig{{Name: "web", Workers: 1, Builtin: "counter"}}
	out := &syncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Info, Output: out})
	builtins := map[string]agent.Builtin{
		"counter": worker.InProcess(counter.New(), worker.Options{Name: "counter", Version: "1", Logger: log.Named("worker")}),
	}
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = a.Start(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = a.Shutdown(ctx)
	})
	return a, out, err
}

// A port another process holds is refused with the listener's name, the
// address and the system's reason.
func TestPortClashNamesTheListener(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	addr := taken.Addr().String()
	tests := []struct {
		name  string
		front string
		admin string
		want  string
	}{
		{"front", addr, "127.0.0.1:0", "front: listening on " + addr + ": "},
		{"admin", "127.0.0.1:0", addr, "admin API: listening on " + addr + ": "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := startBare(t, &agent.Config{
				Front: &agent.FrontConfig{Address: tt.front},
				Admin: &agent.AdminConfig{Address: tt.admin, Token: testToken},
			})
			if err == nil {
				t.Fatal("the agent started on a port in use")
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "address already in use") {
				t.Fatalf("error %q, want %q and the reason", err, tt.want)
			}
		})
	}
}

// With no token configured and a data dir, the agent keeps its admin token
// in <data_dir>/admin.token and says so at start: the file, never the token.
func TestTokenFileLogged(t *testing.T) {
	t.Setenv("STICKYD_TOKEN", "")
	dir := t.TempDir()
	_, out, err := startBare(t, &agent.Config{
		DataDir: dir,
		Server:  &agent.ServerConfig{RaftAddr: "127.0.0.1:0"},
		Front:   &agent.FrontConfig{Address: "127.0.0.1:0"},
		Admin:   &agent.AdminConfig{Address: "127.0.0.1:0"},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "admin.token")
	tok, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no admin token file: %v", err)
	}
	log := out.String()
	var lines []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "admin token") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "[INFO]") || !strings.Contains(lines[0], "file="+path) {
		t.Fatalf("want one info line naming %s, got %q in:\n%s", path, lines, log)
	}
	if s := strings.TrimSpace(string(tok)); s == "" || strings.Contains(log, s) {
		t.Fatalf("the log holds the token (%q) or the file is empty:\n%s", s, log)
	}
}
