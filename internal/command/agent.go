package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/agent"
)

// AgentCommand runs a long-lived agent from a configuration file.
type AgentCommand struct{ Meta }

func (c *AgentCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd agent -config FILE.hcl [options]

  Runs a stickyd agent: the raft server and supervisor, the worker pool of
  the groups in the configuration, and the HTTP/WebSocket front. It stops
  cleanly (workers included) on SIGINT or SIGTERM.

Options:

  -config=FILE       The HCL configuration file (required).
  -log-level=LEVEL   Overrides log_level: trace, debug, info, warn, error.

Example configuration:

  data_dir = "/var/lib/stickyd"
  server { bootstrap_expect = 1 }
  front  { address = "0.0.0.0:8080" }
  group "web" {
    workers = 2
    plugin { command = "/usr/local/bin/demo-worker" }
  }
`)
}

func (c *AgentCommand) Synopsis() string { return "Run a stickyd agent" }

func (c *AgentCommand) Run(args []string) int {
	var configPath, level string
	fs := c.flagSet("agent", c.Help)
	fs.StringVar(&configPath, "config", "", "")
	fs.StringVar(&level, "log-level", "", "")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error(fmt.Sprintf("unexpected arguments: %v\n\n%s", fs.Args(), c.Help()))
		return 1
	}
	if configPath == "" {
		c.UI.Error("-config is required\n\n" + c.Help())
		return 1
	}
	cfg, err := agent.LoadConfig(configPath)
	if err != nil {
		c.UI.Error(fmt.Sprintf("loading configuration: %v", err))
		return 1
	}
	if level != "" {
		cfg.LogLevel = level
	}
	if !validLevel(cfg.LogLevel) {
		c.UI.Error(fmt.Sprintf("unknown log level %q (want trace, debug, info, warn or error)", cfg.LogLevel))
		return 1
	}
	return runAgent(c.Meta, cfg, c.Builtins, c.logger("stickyd", cfg.LogLevel))
}

// runAgent starts an agent and waits for a signal or for the front to fail.
func runAgent(m Meta, cfg *agent.Config, builtins map[string]agent.Builtin, log hclog.Logger) int {
	a, err := agent.New(cfg, builtins, log)
	if err != nil {
		m.UI.Error(fmt.Sprintf("configuring agent: %v", err))
		return 1
	}
	parent := m.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.Start(ctx); err != nil {
		m.UI.Error(fmt.Sprintf("starting agent: %v", err))
		return 1
	}
	if a.Addr() != "" {
		m.UI.Output(fmt.Sprintf("stickyd is serving on http://%s", a.Addr()))
		m.UI.Output(fmt.Sprintf("the monitor: http://%s/_stickyd/monitor/ (its login is the admin token)", a.Addr()))
	} else {
		m.UI.Output(fmt.Sprintf("stickyd is running as a host (no front), %d workers", len(a.Pool().Workers())))
	}
	m.UI.Output(fmt.Sprintf("admin API on http://%s", a.AdminAddr()))
	if cfg.DataDir == "" && cfg.Admin.Token == "" && os.Getenv("STICKYD_TOKEN") == "" {
		// Dev: the token lives only in this process; show it.
		m.UI.Output(fmt.Sprintf("for the CLI (dev): export STICKYD_ADDR=http://%s STICKYD_TOKEN=%s", a.AdminAddr(), a.Token()))
		m.UI.Output(fmt.Sprintf("admin token (the monitor's login too): %s", a.Token()))
	}
	// SIGHUP reads the TLS certificates again.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	code := 0
wait:
	for {
		select {
		case <-hup:
			if err := a.ReloadTLS(); err != nil {
				m.UI.Error(fmt.Sprintf("reloading the TLS certificates (the current ones stay): %v", err))
			}
		case <-ctx.Done():
			m.UI.Output("stopping: closing the front, then the workers")
			break wait
		case err := <-a.Served():
			m.UI.Error(fmt.Sprintf("front stopped: %v", err))
			code = 1
			break wait
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.StopTimeout())
	defer cancel()
	if err := a.Shutdown(sctx); err != nil {
		m.UI.Error(fmt.Sprintf("shutting down: %v", err))
		code = 1
	}
	return code
}
