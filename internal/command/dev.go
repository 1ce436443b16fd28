package command

import (
	"fmt"
	"sort"
	"strings"

	"github.com/stickyd/stickyd/internal/agent"
)

// DevCommand runs everything in one process on embedded defaults.
type DevCommand struct{ Meta }

func (c *DevCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd dev [options]

  Runs stickyd on one machine with embedded defaults: an in-memory raft
  server, the front, and the demo back-office application (or the
  application this binary was built around, see the dev package of the
  Go SDK) on in-process workers attached by in-memory channels (the same
  encoded bytes as the gRPC channel of a plugin). Nothing is written to
  disk.

Options:

  -addr=ADDR         Front address. Default 127.0.0.1:8080.
  -workers=N         Number of workers. Default 2.
  -app=NAME          The application compiled into this binary to run.
                     Default: the one it was built around, else demo.
  -plugin=PATH       Run the workers as go-plugin subprocesses of this
                     worker binary instead of in-process.
  -log-level=LEVEL   trace, debug, info, warn or error. Default info.
`)
}

func (c *DevCommand) Synopsis() string { return "Run stickyd in development mode with the demo app" }

func (c *DevCommand) Run(args []string) int {
	var addr, plugin, level, app string
	var workers int
	fs := c.flagSet("dev", c.Help)
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "")
	fs.StringVar(&app, "app", "", "")
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
	if app == "" {
		app = c.DevApp
	}
	if app == "" {
		app = "demo"
	}
	if plugin == "" && c.Builtins[app] == nil {
		names := make([]string, 0, len(c.Builtins))
		for n := range c.Builtins {
			names = append(names, n)
		}
		sort.Strings(names)
		if len(names) == 0 {
			c.UI.Error("this stickyd binary has no application compiled in; run with -plugin PATH")
		} else {
			c.UI.Error(fmt.Sprintf("-app=%s: this binary has no such application (it has %s); or run with -plugin PATH", app, strings.Join(names, ", ")))
		}
		return 1
	}
	cfg := DevConfig(addr, workers, plugin)
	if plugin == "" && app != "demo" {
		g := cfg.Groups[0]
		g.Name, g.Builtin = app, app
	}
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
