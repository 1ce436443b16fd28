package command

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/plugins/worker"
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
  encoded bytes as the gRPC channel of a plugin).

  The maps, the parked people and the admin token live in memory only.
  With -plugin, an application with an engine build step (the demo's
  worker: about 35 MB) writes its engine image under a temporary
  directory of this instance (stickyd-dev-* in $TMPDIR), removed at exit;
  set $STICKYD_TEMPLATE_DIR to keep it in a directory of your own instead.
  In-process workers write nothing.

  It prints the front's and the admin API's addresses, and the admin
  token, at start. Two instances run side by side when each has its own
  -addr: the admin API takes a free port by default.

Options:

  -addr=ADDR         Front address. Default 127.0.0.1:8080.
  -admin-addr=ADDR   Admin API address (what the CLI's -address and
                     $STICKYD_ADDR name). Default: a free port on the
                     front's host.
  -workers=N         Number of workers. Default 2.
  -app=NAME          The application compiled into this binary to run.
                     Default: the one it was built around, else demo.
  -plugin=PATH       Run the workers as go-plugin subprocesses of this
                     worker binary instead of in-process.
  -group=NAME        The group's name (what user move -group and the
                     monitor say). Default: -app's name; with -plugin, the
                     worker binary's name without "-worker" (taskboard for
                     bin/taskboard-worker).
  -log-level=LEVEL   trace, debug, info, warn or error. Default info.
`)
}

func (c *DevCommand) Synopsis() string { return "Run stickyd in development mode with the demo app" }

func (c *DevCommand) Run(args []string) int {
	var addr, adminAddr, plugin, level, app, group string
	var workers int
	fs := c.flagSet("dev", c.Help)
	fs.StringVar(&addr, "addr", "127.0.0.1:8080", "")
	fs.StringVar(&adminAddr, "admin-addr", "", "")
	fs.StringVar(&app, "app", "", "")
	fs.IntVar(&workers, "workers", 2, "")
	fs.StringVar(&plugin, "plugin", "", "")
	fs.StringVar(&group, "group", "", "")
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
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		c.UI.Error(fmt.Sprintf("-addr=%s: want HOST:PORT, like 127.0.0.1:8080", addr))
		return 1
	}
	if adminAddr == "" {
		// Beside the front, on a port nobody else has: a second dev
		// instance on another -addr does not clash with this one.
		adminAddr = net.JoinHostPort(host, "0")
	} else if _, _, err := net.SplitHostPort(adminAddr); err != nil {
		c.UI.Error(fmt.Sprintf("-admin-addr=%s: want HOST:PORT, like 127.0.0.1:4650", adminAddr))
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
	cfg.Admin = &agent.AdminConfig{Address: adminAddr}
	if plugin == "" && app != "demo" {
		g := cfg.Groups[0]
		g.Name, g.Builtin = app, app
	}
	if group == "" && plugin != "" {
		group = pluginGroup(plugin)
	}
	if group != "" {
		if !validGroupName(group) {
			c.UI.Error(fmt.Sprintf("-group=%s: a group name is 1-63 letters, digits, '-' and '_'", group))
			return 1
		}
		cfg.Groups[0].Name = group
	}
	if plugin != "" {
		dir, cleanup, err := devTemplateDir(cfg.Groups[0].Name)
		if err != nil {
			c.UI.Error(err.Error())
			return 1
		}
		defer cleanup()
		cfg.Groups[0].Plugin.Env = map[string]string{worker.TemplateDirEnv: dir}
	}
	return runAgent(c.Meta, cfg, c.Builtins, c.logger("stickyd", level))
}

// pluginGroup names dev's group after its worker binary: its base name
// without an extension or a "-worker" suffix ("demo" when nothing is left).
func pluginGroup(plugin string) string {
	name := strings.TrimSuffix(filepath.Base(plugin), filepath.Ext(plugin))
	name = strings.TrimSuffix(name, "-worker")
	if !validGroupName(name) {
		return "demo"
	}
	return name
}

// validGroupName reports whether name can name a group.
func validGroupName(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// devTemplateDir is where dev's plugin workers keep an engine image
// (docs/templates.md): $STICKYD_TEMPLATE_DIR if set, kept; otherwise a
// directory of this instance under $TMPDIR, which cleanup removes, so that
// dev leaves nothing behind and two instances share nothing.
func devTemplateDir(group string) (dir string, cleanup func(), err error) {
	if d := os.Getenv(worker.TemplateDirEnv); d != "" {
		return d, func() {}, nil
	}
	root, err := os.MkdirTemp("", "stickyd-dev-")
	if err != nil {
		return "", nil, fmt.Errorf("making the workers' template directory: %w", err)
	}
	return filepath.Join(root, group), func() { _ = os.RemoveAll(root) }, nil
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
