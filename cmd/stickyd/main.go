// Command stickyd is the one binary of stickyd: agent, dev mode and the
// operator's CLI. The demo application is compiled in, so that stickyd dev
// runs it in-process with nothing else installed.
package main

import (
	"os"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/plugins/examples/demo"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	builtins := map[string]agent.Builtin{
		"demo": worker.InProcess(demo.New(), worker.Options{Name: "demo", Version: command.Version}),
	}
	os.Exit(command.Run(os.Args[1:], builtins))
}
