package command

import (
	"fmt"
	"strings"

	"github.com/stickyd/stickyd/internal/agent"
)

// DevCommand runs everything in one process on embedded defaults.
type DevCommand struct{ Meta }

func (c *DevCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd dev [options]

  Runs stickyd on one machine with embedded defaults: an in-memory raft
  server, the front, and the demo back-office application on in-process
  workers attached by in-memory channels (the same encoded bytes as the
  gRPC channel of a plugin). Nothing is written to disk.

Options:

  -addr=ADDR         Front address. Default 127.0.0.1:8080.
  -workers=N         Number of workers. Default 2.
  -plugin=PATH       Run the workers as go-plugin subprocesses of this
                     worker binary instead of in-process.
  -log-level=LEVEL   trace, debug, info, warn or error. Default info.
`)
}

func (c *DevCommand) Synopsis() string { return "Run stickyd in development mode with the demo app" }

func (c *DevCommand) Run(args []string) int {
	var addr, plugin, level string
	var workers int
	fs := c.flagSet("dev", c.Help)
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "")
	fs.IntVar(&workers, "workers", 2, "")
	fs.StringVar(&plugin, "plugin", "", "")
	fs.StringVar(&level, "log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() > 0 {
		c.UI.Error(fmt.Sprintf("unexpected arguments: %v\n\n%s", fs.Args(), c.Help()))
		return 1
	}
	if workers < 1 || workers > 256 {
		c.UI.Error(fmt.Sprintf("-workers=%d: want 1 to 256", workers))
		return 1
	}
	if !validLevel(level) {
		c.UI.Error(fmt.Sprintf("unknown log level %q (want trace, debug, info, warn or error)", level))
		return 1
	}
	if plugin == "" && c.Builtins["demo"] == nil {
		c.UI.Error("this stickyd binary has no builtin demo application; run with -plugin PATH")
		return 1
	}
	cfg := DevConfig(addr, workers, plugin)
	return runAgent(c.Meta, cfg, c.Builtins, c.logger("stickyd", level))
}

// DevConfig is the embedded configuration of stickyd dev.
func DevConfig(addr string, workers int, plugin string) *agent.Config {
	g := &agent.GroupConfig{Name: "demo", Workers: workers}
	if plugin != "" {
		g.Plugin = &agent.PluginConfig{Command: plugin}
	} else {
		g.Builtin = "demo"
	}
	return &agent.Config{
		Name:     "dev",
		LogLevel: "info",
		Server:   &agent.ServerConfig{BootstrapExpect: 1},
		Front:    &agent.FrontConfig{Address: addr},
		Groups:   []*agent.GroupConfig{g},
	}
}
