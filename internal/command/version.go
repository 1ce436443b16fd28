package command

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// VersionCommand prints the version.
type VersionCommand struct{ Meta }

func (c *VersionCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd version

  Prints the stickyd version, the channel protocol version and the Go version.
`)
}

func (c *VersionCommand) Synopsis() string { return "Print the stickyd version" }

func (c *VersionCommand) Run(args []string) int {
	if len(args) > 0 {
		c.UI.Error("version takes no arguments\n\n" + c.Help())
		return 1
	}
	c.UI.Output(versionString())
	return 0
}

// versionString is what stickyd version and stickyd --version print:
// "stickyd v0.1.0-dev (channel protocol 1, go1.26.0)".
func versionString() string {
	return fmt.Sprintf("stickyd v%s (channel protocol %d, %s)", Version, protocol.Version, runtime.Version())
}
